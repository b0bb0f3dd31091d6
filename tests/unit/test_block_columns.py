"""The columnar block decoder (``decode_block_columns``) against ``decode_block``: same rows for
version 1 and 2 blocks, every Kafka codec, archive zstd, any offset bounds; same errors for bad
bytes; and the Arrow batches Spark gets from those columns."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment.block_columns import RecordColumns, decode_block_columns
from processor.segment.block_header import BLOCK_HEADER_LEN, BlockHeader
from processor.segment.blocks import decode_block, decode_block_header
from processor.segment.blocks_v2 import encode_header_v2
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.records import KafkaRecord, TimestampType
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler, compress_segment
from processor.spark import arrow_records
from processor.spark.arrow_records import ARROW_SCHEMA, ARROW_SCHEMA_NO_HEADERS, columns_to_batch
from processor.storage.filesystem import FilesystemChunkStorage
from tests.batch_samples import CODECS, Rec, control_batch, make_batch
from tests.support.segment_v1_writer import SegmentBuilder

maybe_bytes = st.one_of(st.none(), st.binary(max_size=200))
header_st = st.lists(st.tuples(st.text(max_size=6), maybe_bytes), max_size=3)
record_st = st.tuples(st.integers(0, 2**40), maybe_bytes, maybe_bytes, header_st)
bound_st = st.one_of(st.none(), st.integers(0, 120))


def assemble(batches: list[bytes], block_bytes: int = 1 << 20, compression: str = "keep") -> SealedSegment:
    asm = SegmentAssembler(3, parse_batch_header(batches[0]).base_offset, block_bytes, compression)
    for raw in batches:
        asm.append(parse_batch_header(raw), raw)
    return compress_segment(asm.seal())


def reference(block: bytes | bytearray, lo: int | None, hi: int | None) -> list[KafkaRecord]:
    return [r for r in decode_block(block, min_offset=lo) if hi is None or r.offset <= hi]


RECS: list[Rec] = [
    (1000, None, b"", [("h", None), ("h", b"")]),
    (1001, b"", None, []),
    (999, b"k" * 50, b"v" * 500, [("n\u00e9", b"\x00\xff")]),
]


@pytest.mark.parametrize("compression", ["keep", "zstd"])
@pytest.mark.parametrize("codec", list(CODECS))
def test_version_2_blocks_decode_to_the_same_rows_for_every_codec(codec: str, compression: str) -> None:
    batches = [
        make_batch(10, RECS, codec),
        make_batch(13, RECS, codec, offset_deltas=[0, 2, 5], log_append_time=4242),
        control_batch(19, producer_id=7, commit=True),
        make_batch(20, RECS, codec),
    ]
    segment = assemble(batches, compression=compression)
    for block in segment.blocks:
        cols = decode_block_columns(block)
        assert cols.records() == decode_block(block)
        assert len(cols) == 9 and cols.header_counts == [2, 0, 1] * 3
        assert cols.timestamp_types == [1, 1, 1, 2, 2, 2, 1, 1, 1]
        assert cols.keys[:2] == [None, b""] and cols.values[:2] == [b"", None]  # null is not empty
        assert cols.header_values[:2] == [None, b""]


def test_version_1_blocks_decode_to_the_same_rows() -> None:
    builder = SegmentBuilder(0, 0, 300)
    for i in range(30):
        builder.append(
            i * 2, 1 + i % 2, 5 + i, None if i % 3 else b"k", b"v" * (i % 5), [("h", None)] * (i % 3)
        )
    for block in builder.seal().blocks:
        assert decode_block_header(block).format_version == 1
        cols = decode_block_columns(block)
        assert cols.records() == decode_block(block)
        first = decode_block(block)[1].offset
        assert decode_block_columns(block, min_offset=first, max_offset=first).records() == [
            decode_block(block)[1]
        ]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.lists(record_st, min_size=1, max_size=6), st.sampled_from(list(CODECS)), st.integers(0, 3)
        ),
        min_size=1,
        max_size=8,
    ),
    st.integers(BLOCK_HEADER_LEN + 1, 3000),
    st.sampled_from(["keep", "zstd"]),
    bound_st,
    bound_st,
)
def test_same_rows_as_decode_block_for_any_offset_bounds(
    spec: list[tuple[list[Rec], str, int]],
    block_bytes: int,
    compression: str,
    lo: int | None,
    hi: int | None,
) -> None:
    batches, offset = [], 5
    for recs, codec, gap in spec:
        deltas = [i * (gap + 1) for i in range(len(recs))]
        batches.append(make_batch(offset, recs, codec, offset_deltas=deltas))
        offset += deltas[-1] + 1 + gap
    for block in assemble(batches, block_bytes, compression).blocks:
        assert decode_block_columns(block, min_offset=lo, max_offset=hi).records() == reference(block, lo, hi)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(list(TimestampType)), st.integers(0, 2**40), maybe_bytes, maybe_bytes, header_st
        ),
        min_size=1,
        max_size=30,
    ),
    st.integers(BLOCK_HEADER_LEN + 1, 2000),
    bound_st,
    bound_st,
)
def test_version_1_same_rows_for_any_offset_bounds(
    recs: list[tuple[TimestampType, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
    block_bytes: int,
    lo: int | None,
    hi: int | None,
) -> None:
    builder = SegmentBuilder(0, 0, block_bytes)
    for i, (ts_type, ts, key, value, headers) in enumerate(recs):
        builder.append(i * 3, int(ts_type), ts, key, value, headers)
    for block in builder.seal().blocks:
        assert decode_block_columns(block, min_offset=lo, max_offset=hi).records() == reference(block, lo, hi)


def _error(block: bytes | bytearray) -> str:
    with pytest.raises(FormatError) as info:
        decode_block(block)
    return str(info.value)


@pytest.mark.parametrize("compression", ["keep", "zstd"])
def test_a_flipped_byte_raises_the_same_error_as_decode_block(compression: str) -> None:
    recs: list[Rec] = [(i, b"k", b"value " * 20, [("h", b"x")]) for i in range(20)]
    segment = assemble([make_batch(0, recs), make_batch(20, recs, "zstd")], compression=compression)
    block = bytes(segment.blocks[0])
    for pos in range(0, len(block), 5):
        damaged = bytearray(block)
        damaged[pos] ^= 0x55
        expected = _error(damaged)
        with pytest.raises(FormatError) as info:
            decode_block_columns(damaged)
        assert str(info.value) == expected
    with pytest.raises(FormatError, match="expected"):
        decode_block_columns(block[:-1])


def test_a_batch_crc32c_mismatch_is_caught_behind_a_valid_block_crc() -> None:
    raw = bytearray(make_batch(0, [(1, None, b"abc", []), (2, None, b"def", [])]))
    raw[-1] ^= 1  # record bytes changed, batch CRC-32C not updated; the block CRC covers the change
    block = assemble([bytes(raw)]).blocks[0]
    with pytest.raises(FormatError, match="CRC-32C"):
        decode_block_columns(block)
    with pytest.raises(FormatError, match="CRC-32C"):
        decode_block_columns(block, min_offset=1, max_offset=1)  # a row of it is wanted: checked


def test_a_lying_entry_count_is_caught() -> None:
    block = bytearray(assemble([make_batch(4, [(1, None, b"abc", [])])]).blocks[0])
    h = decode_block_header(block)
    block[:BLOCK_HEADER_LEN] = encode_header_v2(
        BlockHeader(
            h.block_len,
            h.first_entry_id,
            h.ledger_id,
            2,
            h.last_entry_id,
            zlib.crc32(block[BLOCK_HEADER_LEN:]),
            2,
            h.payload_codec,
            h.raw_payload_len,
        )
    )
    with pytest.raises(FormatError, match="header says 2 entries"):
        decode_block_columns(block)
    assert struct.unpack_from(">I", block, 38) == (2,)


def test_columns_become_the_spark_kafka_schema() -> None:
    segment = assemble([make_batch(10, RECS), make_batch(13, RECS, log_append_time=4242)])
    cols = RecordColumns()
    for block in segment.blocks:
        cols.extend(decode_block_columns(block))
    batch = columns_to_batch("t", 3, cols)
    assert batch.schema == ARROW_SCHEMA
    rows = batch.to_pylist()
    assert [r["offset"] for r in rows] == list(range(10, 16))
    assert [r["timestampType"] for r in rows] == [0, 0, 0, 1, 1, 1]
    assert rows[0]["key"] is None and rows[0]["value"] == b""
    assert rows[1]["key"] == b"" and rows[1]["value"] is None
    assert rows[0]["headers"] == [{"key": "h", "value": None}, {"key": "h", "value": b""}]
    assert rows[1]["headers"] is None  # no headers: null, as in Spark's Kafka source
    assert rows[2]["headers"] == [{"key": "n\u00e9", "value": b"\x00\xff"}]
    assert batch.column(5).cast(pa.int64()).to_pylist() == [1000_000, 1001_000, 999_000] + [4242_000] * 3
    assert {r["topic"] for r in rows} == {"t"} and {r["partition"] for r in rows} == {3}
    assert batch.column("headers").null_count == sum(1 for r in rows if r["headers"] is None)
    plain = columns_to_batch("t", 3, cols, include_headers=False)  # includeHeaders=false: 7 columns
    assert plain.schema == ARROW_SCHEMA_NO_HEADERS and plain.column("offset") == batch.column("offset")


def test_a_slice_reads_as_arrow_batches_with_offset_and_time_bounds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(arrow_records, "BATCH_ROWS", 7)  # several Arrow batches, cut across blocks
    recs: list[Rec] = [(100 + i % 9, b"k%d" % i, b"v" * i, [("h", b"%d" % i)] * (i % 2)) for i in range(10)]
    batches = [make_batch(base, recs, codec) for base, codec in ((0, "none"), (10, "zstd"), (20, "lz4"))]
    segment = assemble(batches, block_bytes=200)
    storage = FilesystemChunkStorage(tmp_path)
    storage.create("t/0/seg.log", segment.blocks)
    everything = [r for block in segment.blocks for r in decode_block(block)]

    def read(lo: int, until: int, min_ts: int | None, max_ts: int | None) -> list[pa.RecordBatch]:
        return list(
            arrow_records.read_slice_as_arrow(
                storage,
                topic="t",
                partition=0,
                data_object_key="t/0/seg.log",
                segment_name="seg",
                blocks=segment.block_infos,
                first_block=0,
                from_offset=lo,
                until_offset=until,
                min_timestamp=min_ts,
                max_timestamp=max_ts,
            )
        )

    got = read(3, 27, None, None)
    assert len(got) > 1 and all(b.num_rows <= 7 + 10 for b in got)
    rows = [r for b in got for r in b.to_pylist()]
    wanted = [r for r in everything if 3 <= r.offset < 27]
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(r.offset, r.key, r.value) for r in wanted]
    assert [[(h["key"], h["value"]) for h in r["headers"] or []] for r in rows] == [
        list(r.headers) for r in wanted
    ]
    timed = [r["offset"] for b in read(0, 30, 102, 104) for r in b.to_pylist()]
    assert timed == [r.offset for r in everything if 102 <= r.timestamp <= 104]
