from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.blocks import decode_block, decode_block_header, iter_blocks
from processor.segment.records import KafkaRecord, TimestampType
from tests.support.segment_v1_writer import SegmentBuilder

maybe_bytes = st.one_of(st.none(), st.binary(max_size=400))


@st.composite
def partition_records(draw: st.DrawFn) -> list[KafkaRecord]:
    n = draw(st.integers(1, 40))
    offsets = sorted(draw(st.sets(st.integers(0, 10_000), min_size=n, max_size=n)))
    return [
        KafkaRecord(
            o,
            draw(st.integers(0, 2**40)),
            draw(st.sampled_from(list(TimestampType))),
            draw(maybe_bytes),
            draw(maybe_bytes),
            tuple(draw(st.lists(st.tuples(st.text(max_size=8), maybe_bytes), max_size=3))),
        )
        for o in offsets
    ]


def build(
    recs: list[KafkaRecord], block_bytes: int, start: int | None = None
) -> tuple[SegmentBuilder, bytes]:
    b = SegmentBuilder(7, recs[0].offset if start is None else start, block_bytes)
    for r in recs:
        b.append(r.offset, int(r.timestamp_type), r.timestamp, r.key, r.value, r.headers, 3)
    seg = b.seal()
    return b, b"".join(seg.blocks)


@given(partition_records(), st.integers(BLOCK_HEADER_LEN + 1, 4096))
def test_segment_round_trips_across_block_sizes(recs: list[KafkaRecord], block_bytes: int) -> None:
    b = SegmentBuilder(7, 0, block_bytes)
    for r in recs:
        b.append(r.offset, int(r.timestamp_type), r.timestamp, r.key, r.value, r.headers)
    seg = b.seal()
    data = b"".join(seg.blocks)
    assert [r for blk in iter_blocks(data) for r in blk] == recs
    assert seg.size_bytes == len(data)
    assert seg.record_count == len(recs)
    assert seg.end_offset == recs[-1].offset
    # block infos describe the bytes exactly
    pos = 0
    for info, block in zip(seg.block_infos, seg.blocks, strict=True):
        assert info.position == pos and info.length == len(block)
        hdr = decode_block_header(block)
        assert (hdr.first_entry_id, hdr.last_entry_id) == (info.first_offset, info.last_offset)
        pos += len(block)
    assert seg.max_timestamp == max(r.timestamp for r in recs)


def test_coverage_starts_at_given_start_despite_gaps() -> None:
    recs = [KafkaRecord(o, 1, TimestampType.CREATE_TIME, None, b"x") for o in (105, 107, 110)]
    b = SegmentBuilder(0, 100, 1024)
    for r in recs:
        b.append(r.offset, 1, 1, r.key, r.value, None)
    seg = b.seal()
    assert (seg.start_offset, seg.end_offset) == (100, 110)


def test_offsets_must_increase() -> None:
    b = SegmentBuilder(0, 0, 1024)
    b.append(5, 1, 1, None, b"a", None)
    with pytest.raises(ValueError):
        b.append(5, 1, 1, None, b"b", None)


def test_blocks_close_at_the_block_size() -> None:
    b = SegmentBuilder(0, 0, 1000)
    for o in range(50):
        b.append(o, 1, o, None, b"v" * 100, None)
    seg = b.seal()
    assert len(seg.blocks) > 1
    assert all(len(blk) < 1000 + 200 for blk in seg.blocks)
    assert [i.first_offset for i in seg.block_infos] == sorted(i.first_offset for i in seg.block_infos)


@settings(max_examples=50)
@given(partition_records(), st.data())
def test_any_flipped_byte_is_detected(recs: list[KafkaRecord], data: st.DataObject) -> None:
    _b, raw = build(recs, 1 << 20)  # one block
    pos = data.draw(st.integers(0, len(raw) - 1))
    bit = data.draw(st.integers(0, 7))
    corrupted = bytearray(raw)
    corrupted[pos] ^= 1 << bit
    with pytest.raises(FormatError):
        decode_block(bytes(corrupted))
