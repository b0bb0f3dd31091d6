"""Format version 2: whole Kafka record batches as PIP-76 entries (every codec), archive zstd,
index from batch headers, mid-batch reads, corruption, and version 1 objects still decoding."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment.block_header import BLOCK_FORMAT_V2, BLOCK_HEADER_LEN, CODEC_NONE, CODEC_ZSTD
from processor.segment.blocks import decode_block, decode_block_header, iter_blocks
from processor.segment.entries_v2 import (
    batch_records,
    count_records,
    parse_batch_header,
    records_as_batches,
    split_batches,
)
from processor.segment.index_format import decode_index, encode_index
from processor.segment.records import KafkaRecord, TimestampType
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler, compress_segment
from tests.batch_samples import CODECS, Rec, control_batch, expected_records, make_batch
from tests.support.segment_v1_writer import SegmentBuilder

maybe_bytes = st.one_of(st.none(), st.binary(max_size=300))
header_st = st.lists(st.tuples(st.text(max_size=6), maybe_bytes), max_size=3)
record_st = st.tuples(st.integers(0, 2**40), maybe_bytes, maybe_bytes, header_st)


def assemble(
    batches: list[bytes], block_bytes: int = 4096, start: int | None = None, compression: str = "keep"
) -> SealedSegment:
    first = parse_batch_header(batches[0]).base_offset
    asm = SegmentAssembler(3, first if start is None else start, block_bytes, compression)
    for raw in batches:
        asm.append(parse_batch_header(raw), raw)
    return compress_segment(asm.seal())


def decoded(segment: SealedSegment) -> list[KafkaRecord]:
    return [r for block in iter_blocks(b"".join(segment.blocks)) for r in block]


@pytest.mark.parametrize("codec", list(CODECS))
def test_every_codec_round_trips_byte_exact(codec: str) -> None:
    recs: list[Rec] = [
        (1000, None, b"", [("h", None), ("h", b"")]),
        (1001, b"", None, []),
        (999, b"k" * 50, b"v" * 500, [("n\u00e9", b"\x00\xff")]),
    ]
    batches = [make_batch(10, recs, codec), make_batch(13, recs, codec, offset_deltas=[0, 2, 5])]
    segment = assemble(batches, block_bytes=BLOCK_HEADER_LEN + 1)
    assert decoded(segment) == expected_records(10, recs) + expected_records(13, recs, [0, 2, 5])
    assert (segment.start_offset, segment.end_offset, segment.format_version) == (10, 18, BLOCK_FORMAT_V2)
    assert len(segment.blocks) == 2  # the tiny block size closes a block after each batch
    # The stored entry is the batch exactly as fetched.
    payload = bytes(segment.blocks[0][BLOCK_HEADER_LEN:])
    assert payload[12:] == batches[0]
    assert struct.unpack_from(">Iq", payload) == (len(batches[0]), 10)


def test_index_entries_come_from_batch_headers() -> None:
    batches = [
        make_batch(0, [(50, None, b"a", []), (40, None, b"b", [])], "zstd"),
        make_batch(2, [(70, None, b"c", [])], "gzip", offset_deltas=[4]),
        make_batch(7, [(60, None, b"d", [])]),
    ]
    segment = assemble(batches, block_bytes=400)
    infos = segment.block_infos
    assert [(i.first_offset, i.last_offset) for i in infos] == [(0, 6), (7, 7)]
    assert [i.max_timestamp for i in infos] == [70, 60]
    assert segment.max_timestamp == 70 and segment.record_count == 4
    raw = encode_index(
        topic="t",
        partition=3,
        segment_id=uuid.uuid4(),
        start_offset=0,
        end_offset=7,
        record_count=4,
        max_timestamp=70,
        data_object_length=segment.size_bytes,
        blocks=infos,
    )
    index = decode_index(raw)
    assert index.block_for_offset(5) == 0 and index.block_for_offset(7) == 1
    assert index.block_for_timestamp(65) == 0 and index.block_for_timestamp(71) is None


def test_log_append_time_batches_report_the_append_time() -> None:
    segment = assemble([make_batch(0, [(5, None, b"x", []), (6, None, b"y", [])], log_append_time=77)])
    assert decoded(segment) == expected_records(
        0, [(5, None, b"x", []), (6, None, b"y", [])], log_append_time=77
    )
    assert segment.max_timestamp == 77


def test_mid_batch_offsets_skip_the_leading_records() -> None:
    recs: list[Rec] = [(i, None, bytes([i]), []) for i in range(10)]
    segment = assemble([make_batch(0, recs, "lz4"), make_batch(10, recs, "snappy")], block_bytes=1 << 20)
    block = segment.blocks[0]
    got = decode_block(block, min_offset=13)
    assert [r.offset for r in got] == list(range(13, 20))
    assert [r.offset for r in decode_block(block, min_offset=4)] == list(range(4, 20))


@settings(max_examples=60, deadline=None)
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
)
def test_segments_round_trip_any_batches(
    spec: list[tuple[list[Rec], str, int]], block_bytes: int, compression: str
) -> None:
    batches, expected, offset = [], [], 5
    for recs, codec, gap in spec:
        deltas = [i * (gap + 1) for i in range(len(recs))]
        batches.append(make_batch(offset, recs, codec, offset_deltas=deltas))
        expected += expected_records(offset, recs, deltas)
        offset += deltas[-1] + 1 + gap
    segment = assemble(batches, block_bytes, compression=compression)
    assert decoded(segment) == expected
    assert sum(len(b) for b in segment.blocks) == segment.size_bytes
    assert segment.held_bytes >= segment.size_bytes
    pos = 0
    for block, info in zip(segment.blocks, segment.block_infos, strict=True):
        header = decode_block_header(block)
        assert (info.position, info.length) == (pos, len(block))
        assert (header.first_entry_id, header.last_entry_id) == (info.first_offset, info.last_offset)
        pos += len(block)


def test_archive_zstd_compresses_uncompressed_batches_only() -> None:
    recs: list[Rec] = [(i, None, b"the same text again " * 10, []) for i in range(50)]
    plain = assemble([make_batch(0, recs)], block_bytes=1 << 20, compression="zstd")
    assert decode_block_header(plain.blocks[0]).payload_codec == CODEC_ZSTD
    assert plain.size_bytes < plain.held_bytes / 5
    assert decoded(plain) == expected_records(0, recs)
    already = assemble([make_batch(0, recs, "zstd")], block_bytes=1 << 20, compression="zstd")
    assert decode_block_header(already.blocks[0]).payload_codec == CODEC_NONE


def test_dropped_ranges_stay_covered() -> None:
    asm = SegmentAssembler(0, 0, 4096)
    raw = make_batch(0, [(1, None, b"a", [])])
    asm.append(parse_batch_header(raw), raw)
    asm.cover(5)  # an aborted batch and its marker, dropped by the batch source
    segment = asm.seal()
    assert (segment.start_offset, segment.end_offset) == (0, 5)
    with pytest.raises(ValueError):
        SegmentAssembler(0, 0, 4096).seal()


def test_batches_must_follow_each_other() -> None:
    asm = SegmentAssembler(0, 0, 4096)
    raw = make_batch(0, [(1, None, b"a", []), (1, None, b"b", [])])
    asm.append(parse_batch_header(raw), raw)
    with pytest.raises(ValueError):
        asm.append(parse_batch_header(raw), raw)


def test_fetched_record_sets_split_into_whole_batches() -> None:
    a, b = make_batch(0, [(1, None, b"a", [])]), make_batch(1, [(1, None, b"b", [])], "gzip")
    got = [(h.base_offset, bytes(v)) for h, v in split_batches(a + b + b[:30])]
    assert got == [(0, a), (1, b)]  # the partial batch at the end waits for the next fetch
    legacy = bytearray(a)
    legacy[16] = 1
    with pytest.raises(FormatError, match="magic 1"):
        list(split_batches(bytes(legacy)))


def test_records_of_a_fetched_record_set_are_counted_from_batch_headers() -> None:
    """Whole batches' record counts, compressed or not; transaction markers and a trailing partial
    batch are not records a consumer gets; bytes that do not frame a batch end the count."""
    three = make_batch(0, [(1, None, b"a", []), (1, None, b"b", []), (1, None, b"c", [])], "zstd")
    one = make_batch(3, [(1, b"k", b"d", [("h", b"v")])], producer_id=7, transactional=True)
    marker = control_batch(4, 7, commit=True)
    tail = make_batch(5, [(1, None, b"e", [])] * 2)
    assert count_records(three + one + marker + tail) == 6
    assert count_records(three + one + marker + tail[:40]) == 4  # cut at the fetch's byte limit
    assert count_records(three + bytes(70)) == 3  # zeros: no batch length, nothing more counted
    assert count_records(b"") == 0


@given(st.binary(max_size=300))
@settings(max_examples=200, deadline=None)
def test_counting_records_of_any_bytes_never_fails(junk: bytes) -> None:
    assert count_records(junk) >= 0


def test_version_1_objects_still_decode() -> None:
    builder = SegmentBuilder(0, 0, 1024)
    builder.append(0, 1, 5, None, b"v", [("h", None)])
    block = builder.seal().blocks[0]
    assert decode_block_header(block).format_version == 1
    assert [r.value for r in decode_block(block)] == [b"v"]


@pytest.mark.parametrize("compression", ["keep", "zstd"])
def test_any_flipped_byte_is_caught(compression: str) -> None:
    recs: list[Rec] = [(i, b"k", b"value " * 20, [("h", b"x")]) for i in range(20)]
    segment = assemble([make_batch(0, recs), make_batch(20, recs, "zstd")], 1 << 20, compression=compression)
    block = bytes(segment.blocks[0])
    for pos in range(0, len(block), 7):
        damaged = bytearray(block)
        damaged[pos] ^= 0x55
        with pytest.raises(FormatError):
            decode_block(damaged)
    with pytest.raises(FormatError):
        decode_block(block[:-1])


def test_a_batch_with_a_bad_crc32c_is_caught_even_with_a_matching_block_crc() -> None:
    raw = bytearray(make_batch(0, [(1, None, b"abc", [])]))
    raw[-1] ^= 1  # record bytes changed, batch CRC-32C not updated
    asm = SegmentAssembler(0, 0, 4096)
    asm.append(parse_batch_header(raw), raw)
    with pytest.raises(FormatError, match="CRC-32C"):
        decode_block(asm.seal().blocks[0])


def test_an_entry_that_does_not_frame_its_batch_is_caught() -> None:
    raw = make_batch(4, [(1, None, b"abc", [])])
    asm = SegmentAssembler(0, 4, 4096)
    asm.append(parse_batch_header(raw), raw)
    block = bytearray(asm.seal().blocks[0])
    struct.pack_into(">q", block, BLOCK_HEADER_LEN + 4, 5)  # entry_id no longer the base offset
    import zlib

    from processor.segment.block_header import BlockHeader
    from processor.segment.blocks_v2 import encode_header_v2

    h = decode_block_header(block)
    crc = zlib.crc32(block[BLOCK_HEADER_LEN:])
    block[:BLOCK_HEADER_LEN] = encode_header_v2(
        BlockHeader(
            h.block_len,
            h.first_entry_id,
            h.ledger_id,
            h.entry_count,
            h.last_entry_id,
            crc,
            2,
            h.payload_codec,
            h.raw_payload_len,
        )
    )
    with pytest.raises(FormatError, match="does not frame"):
        decode_block(block)


_TS_TYPES = st.sampled_from([TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME])


@st.composite
def _record_runs(draw: st.DrawFn) -> list[KafkaRecord]:
    """Records at increasing offsets (gaps: compaction), mixed timestamp types, log-append times
    shared by runs (as a broker stamps a batch), any keys, values and headers."""
    offset = draw(st.integers(0, 10**12))
    header = st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5))
    out: list[KafkaRecord] = []
    append_time = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 40))):
        offset += draw(st.sampled_from([1, 1, 1, 2, 7]))
        kind = draw(_TS_TYPES)
        if kind is TimestampType.LOG_APPEND_TIME:
            append_time += draw(st.sampled_from([0, 0, 0, 5]))
            ts = append_time
        else:
            ts = draw(st.integers(0, 2**41))
        out.append(
            KafkaRecord(
                offset, ts, kind,
                draw(st.none() | st.binary(max_size=20)),
                draw(st.none() | st.binary(max_size=3000)),
                tuple(draw(st.lists(header, max_size=2))),
            )
        )  # fmt: skip
    return out


@given(_record_runs(), st.sampled_from([200, 4096, 1 << 20]))
@settings(max_examples=80, deadline=None)
def test_format_1_records_become_batches_at_their_own_offsets(records: list[KafkaRecord], limit: int) -> None:
    """What a Kafka client decodes from the built batches is the records, each at its own offset with
    its own timestamp and type, keys, values and headers; every batch starts at its first record's
    offset and carries a valid CRC-32C."""
    batches = records_as_batches(records, max_batch_bytes=limit)
    decoded = [r for b in batches for r in batch_records(b)]
    assert decoded == records
    for batch in batches:
        header = parse_batch_header(batch)
        assert header.base_offset == batch_records(batch)[0].offset
        assert header.last_offset == batch_records(batch)[-1].offset
