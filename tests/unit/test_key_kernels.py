"""The key filter's compiled code (``processor.segment.key_kernels``): the walk summarises the same
keys as aiokafka's reader reads for any batch (every codec, null, empty and long keys, headers,
control batches, compaction gaps), and refuses framing that does not check under a good CRC with a
FormatError naming the batch (never a shorter key list: a filter missing a key lets an erasure skip
a segment that holds it). The summary itself is checked against the documented one in
test_key_filter."""

from __future__ import annotations

import dataclasses
import uuid

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment.batch_rewrite import batch_keys, decompressed_section
from processor.segment.blocks import block_payload
from processor.segment.entries_v2 import iter_batch_entries, parse_batch_header
from processor.segment.key_filter import FilterSecret, build_key_filter, summarise
from processor.segment.key_filter_builder import segment_key_filter, with_key_summaries
from processor.segment.key_kernels import segment_key_summaries
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler, compress_segment
from tests.batch_samples import CODECS, Rec, batch_with_section, control_batch, make_batch, varint

SECRET = FilterSecret(b"s" * 32)


def segment_of(batches: list[bytes], archive: str = "keep") -> SealedSegment:
    asm = SegmentAssembler(0, parse_batch_header(batches[0]).base_offset, 4096, archive)
    for raw in batches:
        asm.append(parse_batch_header(raw), raw)
    return compress_segment(asm.seal())


def reference_keys(segment: SealedSegment) -> list[bytes]:
    """The segment's non-null keys by aiokafka's C reader, in order."""
    keys: list[bytes] = []
    for block in segment.blocks:
        _header, payload = block_payload(block, where="test")
        for batch in iter_batch_entries(payload, where="test"):
            keys += [key for key in batch_keys(batch) if key is not None]
    return keys


key_st = st.one_of(st.none(), st.binary(max_size=70))
record_st = st.tuples(
    st.integers(0, 2**40),
    key_st,
    st.one_of(st.none(), st.binary(max_size=200)),
    st.lists(st.tuples(st.text(max_size=4), st.one_of(st.none(), st.binary(max_size=8))), max_size=2),
)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(record_st, min_size=1, max_size=30), st.sampled_from(sorted(CODECS)), st.booleans()
        ),
        min_size=1,
        max_size=6,
    ),
    st.sampled_from(["keep", "zstd"]),
)
def test_property_the_walk_reads_the_keys_aiokafka_reads(
    batches: list[tuple[list[Rec], str, bool]], archive: str
) -> None:
    raw: list[bytes] = []
    offset = 0
    for records, codec, gaps in batches:
        deltas = [2 * i for i in range(len(records))] if gaps else None  # a compacted batch's gaps
        raw.append(make_batch(offset, records, codec, offset_deltas=deltas))
        offset += 2 * len(records) if gaps else len(records)
        raw.append(control_batch(offset, producer_id=7, commit=True))
        offset += 1
    segment = segment_of(raw, archive)
    keys = reference_keys(segment)
    assert segment_key_summaries(segment).tolist() == summarise(keys).tolist()
    salt = uuid.UUID(int=len(keys))
    assert segment_key_filter(segment, SECRET, salt) == build_key_filter(keys, SECRET, salt.bytes).encode()


def test_a_segment_of_control_batches_and_null_keys_has_no_keys() -> None:
    segment = segment_of([make_batch(0, [(1, None, b"v", [])] * 3), control_batch(3, 7, commit=False)])
    summaries = segment_key_summaries(segment)
    assert summaries.shape == (0, 2) and summaries.dtype == np.uint64


def test_many_batches_grow_the_rows_past_the_first_guess() -> None:
    """The summaries are sized by the segment's record count first; batches holding more keys than
    that (a count the segment does not vouch for) grow them, nothing is lost."""
    batches = [make_batch(100 * i, [(1, b"k%d-%d" % (i, j), b"", []) for j in range(100)]) for i in range(30)]
    segment = segment_of(batches)
    for candidate in (segment, dataclasses.replace(segment, record_count=1)):
        assert segment_key_summaries(candidate).tolist() == summarise(reference_keys(segment)).tolist()


def body(key: bytes) -> bytes:
    """A record with ``key``, a null value and no headers (timestamp and offset deltas 0)."""
    inner = b"\x00" + varint(0) + varint(0) + varint(len(key)) + key + varint(-1) + varint(0)
    return varint(len(inner)) + inner


GOOD = body(b"alice") + body(b"bob")
HEAD = b"\x00\x00\x00"  # attributes, timestamp delta 0, offset delta 0
KEY_OVERRUNS = varint(9) + HEAD + varint(40) + b"k" * 5
SIX_BYTE_VARINT = varint(9) + HEAD + b"\x81\x80\x80\x80\x80\x00" + b"\x00"  # Kafka's varints have 5
KEY_LENGTH_MINUS_TWO = varint(6) + HEAD + varint(-2) + varint(-1) + varint(0)


@pytest.mark.parametrize(
    ("section", "count", "message"),
    [
        (GOOD + b"\x00", 2, "bytes after its 2 records"),
        (GOOD, 1, "bytes after its 1 records"),
        (GOOD + body(b"c")[:-2], 3, "record 2 of 3 does not frame"),
        (b"\xe8\x07" + GOOD[1:], 2, "record 0 of 2 does not frame"),  # a length past the section
        (b"\x00" + GOOD[1:], 2, "record 0 of 2 does not frame"),  # a record of length 0
        (KEY_OVERRUNS, 1, "record 0 of 1 does not frame"),
        (SIX_BYTE_VARINT, 1, "record 0 of 1 does not frame"),
        (KEY_LENGTH_MINUS_TWO, 1, "record 0 of 1 does not frame"),
        (GOOD, 5, "5 records cannot fit its 22-byte records section"),
    ],
)
def test_framing_that_does_not_check_is_refused_under_a_good_crc(
    section: bytes, count: int, message: str
) -> None:
    assert decompressed_section(batch_with_section(GOOD, 2)) == GOOD  # the helper is sound
    batch = batch_with_section(section, count)
    with pytest.raises(FormatError, match=f"segment block 0: record batch at offset 0: .*{message}"):
        segment_key_summaries(segment_of([batch]))


def test_a_batch_that_fails_its_crc_is_refused() -> None:
    flipped = bytearray(make_batch(0, [(1, b"alice", b"v", [])]))
    flipped[-3] ^= 0x01
    with pytest.raises(FormatError, match="fails its CRC-32C"):
        segment_key_summaries(segment_of([bytes(flipped)]))


def test_keys_read_before_archive_compression_make_the_same_filter() -> None:
    """The copy scheduler reads the keys before zstd archive compression; the copier then builds the
    filter from them rather than decompressing: the same filter either way."""
    batches = [
        make_batch(50 * i, [(1, b"key-%d" % (j % 13), b"v" * 90, []) for j in range(50)]) for i in range(9)
    ]
    asm = SegmentAssembler(0, 0, 4096, "zstd")
    for raw in batches:
        asm.append(parse_batch_header(raw), raw)
    sealed = asm.seal()
    salt = uuid.uuid4()
    early = compress_segment(with_key_summaries(sealed))
    late = compress_segment(sealed)
    assert early.key_summaries is not None and late.key_summaries is None
    assert early.blocks == late.blocks and early.blocks != sealed.blocks  # compressed either way
    assert segment_key_filter(early, SECRET, salt) == segment_key_filter(late, SECRET, salt)
