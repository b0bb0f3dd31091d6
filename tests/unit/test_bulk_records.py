"""The bulk block decoder (``bulk_records.decode_block_arrays``, compiled) against the per-record
column decoder (``block_columns.decode_block_columns``, aiokafka's reader): the same rows for any
batches (every Kafka codec, archive zstd, headers, null and empty keys, values and header values,
LogAppendTime, control and transactional batches, offset gaps), any offset bounds, with and
without headers; the same Arrow batch for Spark; and bad bytes refused with a FormatError."""

from __future__ import annotations

import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment.block_columns import decode_block_columns
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.bulk_records import decode_block_arrays
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler, compress_segment
from processor.spark.arrow_records import arrays_to_batch, columns_to_batch
from tests.batch_samples import CODECS, Rec, batch_with_section, control_batch, make_batch, varint
from tests.support.segment_v1_writer import SegmentBuilder

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
header_st = st.lists(st.tuples(st.text(max_size=6), maybe_bytes), max_size=3)
record_st = st.tuples(st.integers(-(2**40), 2**40), maybe_bytes, maybe_bytes, header_st)
bound_st = st.one_of(st.none(), st.integers(0, 150))
# (records, codec, offset gap, kind): kind 0 plain, 1 LogAppendTime, 2 transactional, 3 a control
# batch (a commit or abort marker) before the batch
batch_st = st.tuples(
    st.lists(record_st, min_size=1, max_size=8),
    st.sampled_from(list(CODECS)),
    st.integers(0, 3),
    st.integers(0, 3),
)


def assemble(batches: list[bytes], block_bytes: int = 1 << 20, compression: str = "keep") -> SealedSegment:
    asm = SegmentAssembler(3, parse_batch_header(batches[0]).base_offset, block_bytes, compression)
    for raw in batches:
        asm.append(parse_batch_header(raw), raw)
    return compress_segment(asm.seal())


def build(spec: list[tuple[list[Rec], str, int, int]]) -> list[bytes]:
    batches, offset = [], 5
    for recs, codec, gap, kind in spec:
        if kind == 3:
            batches.append(control_batch(offset, producer_id=9, commit=gap % 2 == 0))
            offset += 1
        deltas = [i * (gap + 1) for i in range(len(recs))]
        batches.append(
            make_batch(
                offset,
                recs,
                codec,
                offset_deltas=deltas,
                log_append_time=777 + offset if kind == 1 else None,
                producer_id=9 if kind == 2 else -1,
                transactional=kind == 2,
            )
        )
        offset += deltas[-1] + 1 + gap
    return batches


@settings(max_examples=100, deadline=None)
@given(
    st.lists(batch_st, min_size=1, max_size=8),
    st.integers(BLOCK_HEADER_LEN + 1, 4000),
    st.sampled_from(["keep", "zstd"]),
    bound_st,
    bound_st,
    st.booleans(),
)
def test_same_rows_and_arrow_batches_as_the_per_record_decoder(
    spec: list[tuple[list[Rec], str, int, int]],
    block_bytes: int,
    compression: str,
    lo: int | None,
    hi: int | None,
    with_headers: bool,
) -> None:
    for block in assemble(build(spec), block_bytes, compression).blocks:
        expected = decode_block_columns(block, min_offset=lo, max_offset=hi, with_headers=with_headers)
        got = decode_block_arrays(block, min_offset=lo, max_offset=hi, with_headers=with_headers)
        assert got.columns() == expected
        assert arrays_to_batch("t", 1, got, with_headers).equals(
            columns_to_batch("t", 1, expected, with_headers)
        )


def test_nulls_empties_headers_and_timestamp_types_as_spark_shows_them() -> None:
    recs: list[Rec] = [
        (1000, None, b"", [("h", None), ("h", b"")]),
        (1001, b"", None, []),
        (999, b"k" * 50, b"v" * 500, [("n\u00e9", b"\x00\xff")]),
    ]
    batches = [make_batch(10, recs, "lz4"), make_batch(13, recs, log_append_time=4242)]
    block = assemble(batches).blocks[0]
    rows = arrays_to_batch("t", 3, decode_block_arrays(block)).to_pylist()
    assert [r["offset"] for r in rows] == list(range(10, 16))
    assert [r["timestampType"] for r in rows] == [0, 0, 0, 1, 1, 1]
    assert (rows[0]["key"], rows[0]["value"], rows[1]["key"], rows[1]["value"]) == (None, b"", b"", None)
    assert rows[0]["headers"] == [{"key": "h", "value": None}, {"key": "h", "value": b""}]
    assert rows[1]["headers"] is None  # no headers: null, as in Spark's Kafka source
    assert rows[2]["headers"] == [{"key": "n\u00e9", "value": b"\x00\xff"}]
    stamps = pa.array([r["timestamp"] for r in rows]).cast(pa.int64()).to_pylist()
    assert stamps == [1000_000, 1001_000, 999_000] + [4242_000] * 3


def test_version_1_blocks_decode_to_the_same_rows() -> None:
    builder = SegmentBuilder(0, 0, 300)
    for i in range(30):
        builder.append(
            i * 2, 1 + i % 2, 5 + i, None if i % 3 else b"k", b"v" * (i % 5), [("h", None)] * (i % 3)
        )
    for block in builder.seal().blocks:
        for lo, hi in ((None, None), (4, 9)):
            expected = decode_block_columns(block, min_offset=lo, max_offset=hi)
            assert decode_block_arrays(block, min_offset=lo, max_offset=hi).columns() == expected


def _block_of(batch: bytes) -> bytes:
    return bytes(assemble([batch]).blocks[0])


@pytest.mark.parametrize("compression", ["keep", "zstd"])
def test_a_flipped_byte_is_refused_as_the_per_record_decoder_refuses_it(compression: str) -> None:
    recs: list[Rec] = [(i, b"k", b"value " * 20, [("h", b"x")]) for i in range(20)]
    block = bytes(
        assemble([make_batch(0, recs), make_batch(20, recs, "zstd")], compression=compression).blocks[0]
    )
    for pos in range(0, len(block), 7):
        damaged = bytearray(block)
        damaged[pos] ^= 0x55
        with pytest.raises(FormatError) as expected:
            decode_block_columns(damaged)
        with pytest.raises(FormatError) as got:
            decode_block_arrays(damaged)
        assert str(got.value) == str(expected.value)


def test_a_batch_crc32c_mismatch_behind_a_valid_block_crc_is_refused() -> None:
    raw = bytearray(make_batch(0, [(1, None, b"abc", []), (2, None, b"def", [])]))
    raw[-1] ^= 1  # record bytes changed, batch CRC-32C not updated; the block CRC covers the change
    block = _block_of(bytes(raw))
    with pytest.raises(FormatError, match="CRC-32C"):
        decode_block_arrays(block, min_offset=1, max_offset=1)


def _record(body: bytes) -> bytes:
    return varint(len(body)) + body


def _header_record(key_len: int, key: bytes) -> bytes:
    # attributes, timestamp delta 0, offset delta 0, key null, value "v", one header
    return _record(
        b"\x00"
        + varint(0)
        + varint(0)
        + varint(-1)
        + varint(1)
        + b"v"
        + varint(1)
        + varint(key_len)
        + key
        + varint(-1)
    )


@pytest.mark.parametrize(
    ("section", "count", "message"),
    [
        (_record(b"\x00" + varint(0) + varint(0) + varint(50) + b"short"), 1, "record 0 of 1 does not frame"),
        (_header_record(1, b"k") + b"\x00", 1, "bytes after its 1 records"),
        (_header_record(1, b"k"), 2, "claims 2 records"),
        (_header_record(-3, b""), 1, "record 0 of 1 does not frame"),
        (_header_record(2, b"\xff\xfe"), 1, "header key is not UTF-8"),
        (
            _record(b"\x00" + varint(0) + varint(0) + varint(-1) + varint(-1) + varint(-2)),
            1,
            "does not frame",
        ),
    ],
)
def test_records_that_do_not_frame_are_refused_naming_the_batch(
    section: bytes, count: int, message: str
) -> None:
    block = _block_of(batch_with_section(section, count, last_delta=0))
    with pytest.raises(FormatError, match=message):
        decode_block_arrays(block, where="blk")
    with pytest.raises(FormatError):  # the per-record decoder refuses it too
        decode_block_columns(block).records()


def test_a_well_framed_hand_made_record_decodes() -> None:
    block = _block_of(batch_with_section(_header_record(1, b"k"), 1, last_delta=0))
    (record,) = decode_block_arrays(block).columns().records()
    assert (record.key, record.value, record.headers) == (None, b"v", (("k", None),))
    assert struct.unpack(">q", block[BLOCK_HEADER_LEN + 12 : BLOCK_HEADER_LEN + 20]) == (0,)
