"""Erasing records from a Kafka record batch by key (``processor.segment.batch_rewrite``): what Kafka's
log cleaner writes (offsets, lastOffsetDelta, producer fields, codec, CRC), byte-exact kept records,
control batches untouched, refused input, and two Kafka client libraries reading the result: aiokafka's
C reader (every codec) and kafka-python's consumer fetch path (offset gaps, next fetch offset)."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record._crecords.memory_records import MemoryRecords as AioMemoryRecords
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.consumer.fetcher import Fetcher
from kafka.record.default_records import DefaultRecordBatch as KafkaPythonBatch
from kafka.record.memory_records import MemoryRecords as KafkaPythonRecords
from kafka.structs import TopicPartition

from processor.errors import FormatError
from processor.segment.batch_codecs import CODEC_SNAPPY, compress_records, is_xerial
from processor.segment.batch_rewrite import (
    batch_keys,
    decompressed_section,
    erasing,
    record_spans,
    rewrite_batch,
)
from processor.segment.checksums import batch_crc_ok, crc32c_of
from processor.segment.entries_v2 import BATCH_HEADER, batch_records
from processor.segment.records import KafkaRecord
from tests.batch_samples import (
    CODECS,
    Rec,
    batch_with_section,
    control_batch,
    expected_records,
    make_batch,
    resigned,
    varint,
)

KAFKA_PYTHON_CODECS = ("none", "gzip")  # kafka-python decodes the others only with extra packages


# base offset, leader epoch, magic, attributes, lastOffsetDelta, firstTimestamp, producer id, epoch,
# base sequence: the header fields a rewrite keeps (BATCH_HEADER's order)
KEPT_FIELDS = (0, 2, 3, 5, 6, 7, 9, 10, 11)


def header(batch: bytes) -> tuple[int, ...]:
    return tuple(BATCH_HEADER.unpack_from(batch))


def set_last_offset_delta(batch: bytes, delta: int) -> bytes:
    """The batch as a broker's cleaner leaves it when it removed the batch's last records."""
    buf = bytearray(batch)
    struct.pack_into(">i", buf, 23, delta)
    struct.pack_into(">I", buf, 17, crc32c_of(memoryview(buf)[21:]))
    return bytes(buf)


RECS: list[Rec] = [
    (1000, b"alice", b"a1", [("h", b"1")]),
    (1005, b"bob", b"b1", []),
    (990, None, b"no key", [("h", None), ("h", b"")]),
    (1010, b"alice", None, []),
    (1003, b"", b"empty key", [("n\u00e9", b"\x00\xff")]),
    (1001, b"carol", b"c1" * 100, []),
]
DELTAS = [0, 1, 3, 4, 7, 8]


@pytest.mark.parametrize("codec", list(CODECS))
def test_erased_records_are_gone_and_the_rest_keep_their_offsets(codec: str) -> None:
    batch = set_last_offset_delta(make_batch(100, RECS, codec, offset_deltas=DELTAS, producer_id=42), 11)
    result = rewrite_batch(batch, erasing([b"alice"]))
    assert (result.records, result.removed, result.changed) == (6, 2, True)
    out = result.batch
    assert out is not None and batch_crc_ok(out)
    want = [r for r in expected_records(100, RECS, DELTAS) if r.key != b"alice"]
    assert batch_records(out) == want  # aiokafka's C reader, CRC-32C checked
    assert [r.offset for r in want] == [101, 103, 107, 108]
    before, after = header(batch), header(out)
    # length, CRC, maxTimestamp and count follow the records; the other fields are as they were
    assert [after[i] for i in KEPT_FIELDS] == [before[i] for i in KEPT_FIELDS]
    assert after[6] == 11 and after[12] == 4
    assert after[8] == 1005  # maxTimestamp: the largest kept (1010 belonged to an erased record)
    assert after[1] + 12 == len(out)


@pytest.mark.parametrize("codec", list(CODECS))
def test_nothing_erased_returns_the_batch_byte_for_byte(codec: str) -> None:
    batch = make_batch(7, RECS, codec)
    calls: list[bytes | None] = []

    def never(key: bytes | None) -> bool:
        calls.append(key)
        return False

    result = rewrite_batch(batch, never)
    assert result.batch == batch and not result.changed and result.records == 6
    assert calls == [r[1] for r in RECS]  # every key asked once, null keys as None


def test_erasing_takes_a_collection_of_keys_not_one_key() -> None:
    with pytest.raises(TypeError, match="a collection of keys"):
        erasing(b"alice")  # type: ignore[arg-type]
    assert erasing([b"a"])(b"a") and not erasing([b"a"])(None)


def test_null_and_empty_keys_are_distinct() -> None:
    batch = make_batch(0, RECS)
    assert [r.key for r in batch_records(rewrite_batch(batch, lambda k: k is None).batch or b"")] == [
        b"alice",
        b"bob",
        b"alice",
        b"",
        b"carol",
    ]
    assert batch_keys(rewrite_batch(batch, erasing([b""])).batch or b"") == [
        b"alice",
        b"bob",
        None,
        b"alice",
        b"carol",
    ]


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_batch_left_empty_is_dropped_or_kept_as_kafka_writes_an_empty_batch(codec: str) -> None:
    batch = make_batch(50, RECS[:2], codec, producer_id=9, transactional=True, offset_deltas=[0, 4])
    everything = rewrite_batch(batch, lambda key: True)
    assert everything.batch is None and everything.removed == 2
    kept = rewrite_batch(batch, lambda key: True, keep_if_empty=True).batch
    assert kept is not None and len(kept) == 61 and batch_crc_ok(kept)
    (base, _len, epoch, magic, _crc, attrs, delta, first_ts, max_ts, pid, pepoch, seq, count) = header(kept)
    assert (base, magic, delta, first_ts, max_ts, count) == (50, 2, 4, -1, 1005, 0)
    assert attrs == 0x10  # transactional, codec none (DefaultRecordBatch.writeEmptyHeader)
    assert (epoch, pid, pepoch, seq) == header(batch)[2:3] + header(batch)[9:12]
    assert batch_records(kept) == []
    python_batch = KafkaPythonBatch(kept)
    assert python_batch.validate_crc() and list(python_batch) == [] and python_batch.next_offset == 55


def test_control_batches_are_returned_untouched() -> None:
    marker = control_batch(30, producer_id=5, commit=True)
    result = rewrite_batch(marker, lambda key: pytest.fail("a marker's key is not a record key"))
    assert result.batch == marker and not result.changed and result.records == 0
    assert batch_keys(marker) == []


def test_log_append_time_keeps_the_append_time_and_the_create_times_inside() -> None:
    batch = make_batch(0, RECS, "lz4", log_append_time=5_000)
    out = rewrite_batch(batch, erasing([b"bob"])).batch
    assert out is not None and header(out)[8] == 5_000
    assert batch_records(out) == [
        r for r in expected_records(0, RECS, log_append_time=5_000) if r.key != b"bob"
    ]
    # the producer's create times stay in the records (a consumer sees the append time)
    assert [s.timestamp_delta for s in record_spans(out)] == [
        s.timestamp_delta for s in record_spans(batch) if s.key != b"bob"
    ]


def test_a_timestamp_delta_base_that_is_no_record_of_the_batch_decodes() -> None:
    """The first record erased: firstTimestamp stays, so the kept records' deltas stay as stored."""
    batch = make_batch(0, RECS, "gzip")
    out = rewrite_batch(batch, erasing([b"alice"])).batch
    assert out is not None and header(out)[7] == 1000  # the erased first record's timestamp
    assert [r.timestamp for r in KafkaPythonBatch(out)] == [1005, 990, 1003, 1001]


def raw_snappy_batch() -> bytes:
    """A snappy batch in one raw snappy block (what librdkafka writes), not xerial's framing."""
    plain = make_batch(0, RECS)
    section = compress_records(CODEC_SNAPPY, plain[61:], xerial=False)
    buf = bytearray(plain[:61] + section)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">h", buf, 21, CODEC_SNAPPY)
    return resigned(buf)


def test_snappy_keeps_its_framing() -> None:
    xerial = make_batch(0, RECS, "snappy")
    assert is_xerial(xerial[61:])
    out = rewrite_batch(xerial, erasing([b"bob"])).batch
    assert out is not None and is_xerial(out[61:])
    raw = raw_snappy_batch()
    assert not is_xerial(raw[61:]) and batch_records(raw) == expected_records(0, RECS)
    out = rewrite_batch(raw, erasing([b"bob"])).batch
    assert out is not None and not is_xerial(out[61:])
    assert batch_records(out) == [r for r in expected_records(0, RECS) if r.key != b"bob"]


def test_xerial_snappy_of_many_blocks_round_trips() -> None:
    big: list[Rec] = [(i, b"k%d" % (i % 5), bytes([i % 251]) * 3000, []) for i in range(40)]
    batch = make_batch(0, big, "snappy")
    out = rewrite_batch(batch, erasing([b"k1", b"k3"])).batch
    assert out is not None
    assert batch_records(out) == [r for r in expected_records(0, big) if r.key not in (b"k1", b"k3")]


@pytest.mark.parametrize("magic", [0, 1])
def test_message_format_v0_and_v1_are_refused_naming_the_batch(magic: int) -> None:
    # a v0/v1 message: offset i64, size i32, crc u32, magic i8, attributes i8, [timestamp], key, value
    body = (
        struct.pack(">Ib", 0, magic) + b"\x00" + (b"\x00" * 8 if magic else b"") + struct.pack(">ii", -1, 1)
    )
    legacy = struct.pack(">qi", 77, len(body) + 1) + body + b"x"
    with pytest.raises(
        FormatError, match=f"segment s: record batch at offset 77 has message format magic {magic}"
    ):
        rewrite_batch(legacy, lambda key: True, where="segment s")


def test_corrupt_batches_are_refused_never_resigned() -> None:
    batch = make_batch(3, RECS, "zstd")
    flipped = bytearray(batch)
    flipped[-5] ^= 0x01
    with pytest.raises(FormatError, match="at offset 3 fails its CRC-32C"):
        rewrite_batch(bytes(flipped), lambda key: True)
    with pytest.raises(FormatError, match="claims"):
        rewrite_batch(batch[:-1], lambda key: True)
    with pytest.raises(FormatError, match="claims"):
        rewrite_batch(batch + b"\x00", lambda key: True)
    with pytest.raises(FormatError, match="truncated"):
        rewrite_batch(batch[:40], lambda key: True)


def record(timestamp_delta: int) -> bytes:
    """A record with a null key and value and no headers (offset delta 0)."""
    body = b"\x00" + varint(timestamp_delta) + varint(0) + varint(-1) + varint(-1) + varint(0)
    return varint(len(body)) + body


def test_bad_record_framing_is_refused_even_under_a_good_crc() -> None:
    assert (
        rewrite_batch(batch_with_section(record(-5), 1), lambda key: False).records == 1
    )  # the helper is sound
    good = decompressed_section(make_batch(0, RECS[:2]))
    first_len = good[0] >> 1  # zigzag varint, small: one byte
    cases = {
        "overruns the section": batch_with_section(b"\xe8\x07" + good[1:], 2),  # length 500
        "after its 1 records": batch_with_section(good, 1),
        "varint at byte": batch_with_section(good, 3),
        "offset delta 1 after -1": batch_with_section(good[first_len + 1 :], 1, last_delta=0),
        "longer than 10 bytes": batch_with_section(b"\xff" * 11, 1),
        "leaves the int64 range": batch_with_section(record(2**63 - 1), 1),
    }
    for message, batch in cases.items():
        assert batch_crc_ok(batch)
        with pytest.raises(FormatError, match=message):
            rewrite_batch(batch, lambda key: False)
        if message not in ("offset delta 1 after -1", "leaves the int64 range"):  # framing: keys too
            with pytest.raises(FormatError, match="records do not decode"):
                batch_keys(batch)
    with pytest.raises(FormatError, match="gzip records section does not decompress"):
        buf = bytearray(batch_with_section(good, 2))
        struct.pack_into(">h", buf, 21, 1)
        rewrite_batch(resigned(buf), lambda key: False)


def fetch(batches: list[bytes], fetch_offset: int) -> tuple[list[int], int]:
    """kafka-python's consumer on a fetch response holding ``batches``: the offsets it returns and
    the offset it fetches next (Fetcher.PartitionRecords is what its poll runs on each response)."""
    part = Fetcher.PartitionRecords(
        fetch_offset, TopicPartition("t", 0), KafkaPythonRecords(b"".join(batches)), check_crcs=True
    )
    offsets = [r.offset for r in part.take()]
    return offsets, part.next_fetch_offset


@pytest.mark.parametrize("codec", KAFKA_PYTHON_CODECS)
def test_kafka_python_consumer_steps_over_the_gaps(codec: str) -> None:
    recs: list[Rec] = [(1000 + i, b"k%d" % (i % 4), b"v%d" % i, [("i", b"%d" % i)]) for i in range(8)]
    batches = [make_batch(0, recs, codec), make_batch(8, recs, codec), make_batch(16, recs, codec)]
    rewritten = [rewrite_batch(b, erasing([b"k3", b"k0"])).batch for b in batches]
    assert all(b is not None for b in rewritten)
    kept = [b for b in rewritten if b is not None]
    assert fetch(kept, 0) == ([1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22], 24)
    # a fetch inside a gap starts at the next kept record; the last batch's erased tail (23) is
    # stepped over with lastOffsetDelta: the next fetch is 24, not 23
    assert fetch(kept, 11) == ([13, 14, 17, 18, 21, 22], 24)
    # a batch left empty and dropped: the consumer goes on to the next batch
    emptied = rewrite_batch(make_batch(24, recs[:1] + recs[4:5], codec), erasing([b"k0"])).batch
    assert emptied is None
    assert fetch([kept[2], make_batch(26, recs[1:2], codec)], 20) == ([21, 22, 26], 27)
    python_batch = KafkaPythonBatch(kept[0])
    assert python_batch.validate_crc() and python_batch.last_offset == 7 and python_batch.next_offset == 8


@pytest.mark.parametrize("codec", list(CODECS))
def test_aiokafka_reads_a_fetch_of_rewritten_batches(codec: str) -> None:
    recs: list[Rec] = [(1000 + i, b"k%d" % (i % 3), b"v%d" % i, []) for i in range(6)]
    kept = [rewrite_batch(make_batch(b, recs, codec), erasing([b"k1"])).batch or b"" for b in (0, 6)]
    records = AioMemoryRecords(b"".join(kept))
    seen = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        seen.append((batch.next_offset, [r.offset for r in batch]))
    assert seen == [(6, [0, 2, 3, 5]), (12, [6, 8, 9, 11])]


maybe_bytes = st.one_of(st.none(), st.binary(max_size=40))
record_st = st.tuples(
    st.integers(0, 2**41),
    st.one_of(st.none(), st.sampled_from([b"", b"a", b"b", b"c"]), st.binary(max_size=8)),
    maybe_bytes,
    st.lists(st.tuples(st.text(max_size=4), maybe_bytes), max_size=2),
)


@st.composite
def batches(draw: st.DrawFn) -> tuple[bytes, str, list[Rec], list[int], int | None]:
    recs: list[Rec] = draw(st.lists(record_st, min_size=1, max_size=12))
    gaps = draw(st.lists(st.integers(0, 3), min_size=len(recs), max_size=len(recs)))
    deltas = [sum(gaps[: i + 1]) + i for i in range(len(recs))]
    codec = draw(st.sampled_from(list(CODECS)))
    log_append = draw(st.one_of(st.none(), st.integers(0, 2**41)))
    batch = make_batch(
        draw(st.integers(0, 2**40)), recs, codec, offset_deltas=deltas, log_append_time=log_append
    )
    tail = draw(st.integers(0, 3))
    if tail:
        batch = set_last_offset_delta(batch, deltas[-1] + tail)
    return batch, codec, recs, deltas, log_append


@settings(max_examples=150, deadline=None)
@given(batches(), st.sets(st.one_of(st.none(), st.sampled_from([b"", b"a", b"b", b"c"]))))
def test_property_kept_records_are_byte_identical_at_their_offsets(
    drawn: tuple[bytes, str, list[Rec], list[int], int | None], erased: set[bytes | None]
) -> None:
    batch, codec, recs, deltas, log_append = drawn
    base = header(batch)[0]
    result = rewrite_batch(batch, lambda key: key in erased)
    assert batch_keys(batch) == [span.key for span in record_spans(batch)] == [r[1] for r in recs]
    want: list[KafkaRecord] = [
        r for r in expected_records(base, recs, deltas, log_append) if r.key not in erased
    ]
    assert result.records == len(recs) and result.removed == len(recs) - len(want)
    if not want:
        assert result.batch is None
        return
    out = result.batch
    assert out is not None and batch_crc_ok(out)
    if not result.changed:
        assert out == batch
    assert batch_records(out) == want  # keys, values, headers, timestamps, offsets
    before, after = header(batch), header(out)
    assert [after[i] for i in KEPT_FIELDS] == [before[i] for i in KEPT_FIELDS]
    assert after[12] == len(want)
    assert after[8] == (log_append if log_append is not None else max(r.timestamp for r in want))
    # the kept records' bytes are the stored ones, varints and all
    old_section, new_section = decompressed_section(batch), decompressed_section(out)
    old = {s.offset_delta: old_section[s.start : s.end] for s in record_spans(batch)}
    assert [new_section[s.start : s.end] for s in record_spans(out)] == [old[r.offset - base] for r in want]
    if codec in KAFKA_PYTHON_CODECS:
        python_batch = KafkaPythonBatch(out)
        assert python_batch.validate_crc()
        assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in python_batch] == [
            (r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in want
        ]
