from __future__ import annotations

import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment.index_format import decode_index, encode_index, index_crc
from tests.support.segment_v1_writer import SegmentBuilder


@st.composite
def segments(draw: st.DrawFn):
    n = draw(st.integers(1, 200))
    offsets = sorted(draw(st.sets(st.integers(0, 100_000), min_size=n, max_size=n)))
    stamps = draw(st.lists(st.integers(0, 10_000), min_size=n, max_size=n))
    start = draw(st.integers(0, offsets[0]))
    b = SegmentBuilder(3, start, draw(st.integers(200, 3000)))
    for o, t in zip(offsets, stamps, strict=True):
        b.append(o, 1, t, None, b"x" * draw(st.integers(0, 300)), None)
    return b.seal(), offsets, stamps


def encode(seg, topic: str = "events", sid: uuid.UUID | None = None) -> bytes:
    return encode_index(
        topic=topic,
        partition=seg.partition,
        segment_id=sid or uuid.UUID(int=42),
        start_offset=seg.start_offset,
        end_offset=seg.end_offset,
        record_count=seg.record_count,
        max_timestamp=seg.max_timestamp,
        data_object_length=seg.size_bytes,
        blocks=seg.block_infos,
    )


@given(segments(), st.text(min_size=1, max_size=30))
def test_index_round_trips(s, topic: str) -> None:
    seg, _offsets, _stamps = s
    sid = uuid.uuid4()
    idx = decode_index(encode(seg, topic, sid))
    assert idx.blocks == tuple(seg.block_infos)
    assert (idx.topic, idx.partition, idx.segment_id) == (topic, 3, sid)
    assert (idx.start_offset, idx.end_offset, idx.record_count) == (
        seg.start_offset,
        seg.end_offset,
        seg.record_count,
    )
    assert idx.data_object_length == seg.size_bytes


@given(segments(), st.data())
def test_offset_and_time_lookups_match_brute_force(s, data: st.DataObject) -> None:
    seg, offsets, stamps = s
    idx = decode_index(encode(seg))
    probe = data.draw(st.integers(seg.start_offset, seg.end_offset + 5))
    want = next((o for o in offsets if o >= probe), None)
    got_block = idx.block_for_offset(probe)
    if want is None:
        assert got_block is None
    else:
        assert got_block is not None
        blk = idx.blocks[got_block]
        assert blk.first_offset <= want <= blk.last_offset or (
            probe < blk.first_offset and want == blk.first_offset
        )
    ts = data.draw(st.integers(-5, 10_005))
    first_at_or_after = next((o for o, t in zip(offsets, stamps, strict=True) if t >= ts), None)
    tb = idx.block_for_timestamp(ts)
    if first_at_or_after is None:
        assert tb is None
    else:
        assert tb is not None
        blk = idx.blocks[tb]
        assert blk.first_offset <= first_at_or_after <= blk.last_offset


@settings(max_examples=60)
@given(segments(), st.data())
def test_any_flipped_byte_is_detected(s, data: st.DataObject) -> None:
    seg, _, _ = s
    raw = bytearray(encode(seg))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(FormatError):
        decode_index(bytes(raw))


def test_crc_helper_matches_trailer() -> None:
    b = SegmentBuilder(0, 0, 1000)
    b.append(0, 1, 1, None, b"v", None)
    raw = encode(b.seal())
    assert index_crc(raw) == int.from_bytes(raw[-4:], "big")
