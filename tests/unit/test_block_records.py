"""``block_records``: a block's records within a read's bounds are exactly those of the whole
block's decode, cut; damaged bytes are refused whether or not the damage lies in what is returned."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.reader.block_records import batch_records_within, block_records, make_record
from processor.segment.blocks import decode_block
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.records import Header, KafkaRecord, TimestampType
from processor.segment.segment_assembler import SegmentAssembler
from tests.batch_samples import make_batch
from tests.support.segment_v1_writer import SegmentBuilder


def _v2_blocks(sizes: list[int], gaps: list[int], codec: str, archive: str) -> list[bytes]:
    """Blocks of batches of ``sizes[i]`` records each, batch i starting ``gaps[i]`` offsets after the
    previous one's end (compaction), some records keyless or valueless, with headers."""
    asm = SegmentAssembler(0, 0, 4096, compression=archive)
    base = 0
    for i, (n, gap) in enumerate(zip(sizes, gaps, strict=True)):
        base += gap
        recs = [
            (1_700_000_000_000 + base + j, None if j % 4 == 0 else b"k%d" % j,
             None if j % 5 == 3 else b"v" * (17 * j % 300), [("h", b"%d" % i)] if j % 3 == 0 else [])
            for j in range(n)
        ]  # fmt: skip
        batch = make_batch(base, recs, codec)
        asm.append(parse_batch_header(batch), batch)
        base += n
    return [bytes(b) for b in asm.seal().blocks]


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    data=st.data(),
    codec=st.sampled_from(["none", "zstd"]),
    archive=st.sampled_from(["keep", "zstd"]),
)
def test_v2_matches_the_whole_decode_cut(
    sizes: list[int], data: st.DataObject, codec: str, archive: str
) -> None:
    gaps = data.draw(st.lists(st.integers(0, 3), min_size=len(sizes), max_size=len(sizes)))
    for block in _v2_blocks(sizes, gaps, codec, archive):
        whole = decode_block(block)
        lo = whole[0].offset - 2 if whole else 0
        hi = whole[-1].offset + 2 if whole else 2
        min_offset = data.draw(st.one_of(st.none(), st.integers(lo, hi)))
        limit = data.draw(st.one_of(st.none(), st.integers(0, len(whole) + 2)))
        wanted = [r for r in whole if min_offset is None or r.offset >= min_offset]
        wanted = wanted if limit is None else wanted[:limit]
        got = block_records(memoryview(block), where="b", min_offset=min_offset, limit=limit)
        assert got == wanted


@settings(max_examples=50, deadline=None)
@given(
    count=st.integers(1, 60), min_offset=st.integers(0, 70), limit=st.one_of(st.none(), st.integers(0, 70))
)
def test_v1_blocks_are_cut_the_same_way(count: int, min_offset: int, limit: int | None) -> None:
    b = SegmentBuilder(0, 0, 1 << 20)
    for o in range(count):
        b.append(o, 0, 1000 + o, b"k", b"v%d" % o, ())
    (block,) = b.seal().blocks
    whole = [r for r in decode_block(block) if r.offset >= min_offset]
    assert block_records(memoryview(bytes(block)), where="b", min_offset=min_offset, limit=limit) == (
        whole if limit is None else whole[:limit]
    )


def test_damage_past_the_records_returned_is_still_refused() -> None:
    (block,) = _v2_blocks([10, 10, 10], [0, 0, 0], "none", "keep")
    damaged = bytearray(block)
    damaged[-5] ^= 0x01  # inside the last batch, which a limit of 3 never decodes
    with pytest.raises(FormatError, match="CRC"):
        block_records(memoryview(damaged), where="b", limit=3)
    # bytes a cache verified whole skip the payload CRC; a batch that is decoded still has its CRC-32C
    first = bytearray(block)
    first[128 + 12 + 40] ^= 0x01  # inside the first batch's records
    with pytest.raises(FormatError, match="CRC-32C"):
        block_records(memoryview(first), where="b", limit=3, payload_crc=False)


def test_a_control_batch_holds_no_records_and_a_bad_limit_is_refused() -> None:
    marker = make_batch(7, [(1, None, b"\x00\x00\x00\x00\x00\x00", ())], control=True, transactional=True)
    assert batch_records_within(marker, where="m") == []
    (block,) = _v2_blocks([3], [0], "none", "keep")
    with pytest.raises(ValueError, match="limit"):
        block_records(memoryview(block), where="b", limit=-1)


@given(
    offset=st.integers(0, 2**63 - 1),
    ts=st.integers(-1, 2**63 - 1),
    ts_type=st.sampled_from(list(TimestampType)),
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=20)),
    headers=st.lists(st.tuples(st.text(max_size=5), st.one_of(st.none(), st.binary(max_size=5))), max_size=3),
)
def test_a_record_built_by_its_slots_is_the_constructors(
    offset: int,
    ts: int,
    ts_type: TimestampType,
    key: bytes | None,
    value: bytes | None,
    headers: list[Header],
) -> None:
    assert make_record is not KafkaRecord  # the fast path is the one in use
    made = make_record(offset, ts, ts_type, key, value, tuple(headers))
    built = KafkaRecord(offset, ts, ts_type, key, value, tuple(headers))
    assert made == built and hash(made) == hash(built) and repr(made) == repr(built)
    with pytest.raises(dataclasses.FrozenInstanceError):
        made.offset = 1  # type: ignore[misc]
