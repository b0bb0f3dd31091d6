"""Kafka record batches for tests, built with aiokafka's record builder (what a producer sends),
then given the fields a broker sets (base offset, leader epoch, timestamp type, control flag)."""

from __future__ import annotations

import struct
from collections.abc import Sequence

from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.util import calc_crc32c

from processor.segment.records import KafkaRecord, TimestampType

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
Rec = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes | None]]]  # ts, key, value, headers


def make_batch(
    base_offset: int,
    records: Sequence[Rec],
    codec: str = "none",
    *,
    offset_deltas: Sequence[int] | None = None,
    log_append_time: int | None = None,
    producer_id: int = -1,
    transactional: bool = False,
    control: bool = False,
    leader_epoch: int = 0,
) -> bytes:
    builder = DefaultRecordBatchBuilder(2, CODECS[codec], int(transactional), producer_id, 0, 0, 1 << 30)
    for i, (ts, key, value, headers) in enumerate(records):
        delta = offset_deltas[i] if offset_deltas is not None else i
        builder.append(delta, ts, key, value, list(headers))
    buf = builder.build()
    struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">i", buf, 12, leader_epoch)
    attrs = struct.unpack_from(">h", buf, 21)[0]
    if log_append_time is not None:
        attrs |= 0x08
        struct.pack_into(">q", buf, 35, log_append_time)  # maxTimestamp = the append time
    if control:
        attrs |= 0x20
    struct.pack_into(">h", buf, 21, attrs)
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    return bytes(buf)


def control_batch(offset: int, producer_id: int, commit: bool) -> bytes:
    """A transaction marker as the broker writes it (key: version 0, type 0 abort / 1 commit)."""
    key = struct.pack(">hh", 0, 1 if commit else 0)
    return make_batch(
        offset,
        [(0, key, b"\x00\x00\x00\x00\x00\x00", ())],
        producer_id=producer_id,
        transactional=True,
        control=True,
    )


def expected_records(
    base_offset: int,
    records: Sequence[Rec],
    offset_deltas: Sequence[int] | None = None,
    log_append_time: int | None = None,
) -> list[KafkaRecord]:
    out = []
    for i, (ts, key, value, headers) in enumerate(records):
        delta = offset_deltas[i] if offset_deltas is not None else i
        if log_append_time is None:
            out.append(
                KafkaRecord(base_offset + delta, ts, TimestampType.CREATE_TIME, key, value, tuple(headers))
            )
        else:
            out.append(
                KafkaRecord(
                    base_offset + delta,
                    log_append_time,
                    TimestampType.LOG_APPEND_TIME,
                    key,
                    value,
                    tuple(headers),
                )
            )
    return out


def resigned(buf: bytearray) -> bytes:
    """The batch with its CRC-32C computed again (a forged batch a CRC check lets through)."""
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(memoryview(buf)[21:])))
    return bytes(buf)


def varint(value: int) -> bytes:
    """Kafka's zigzag varint of ``value``."""
    zigzag, out = (value << 1) ^ (value >> 63), bytearray()
    while zigzag > 0x7F:
        out.append(zigzag & 0x7F | 0x80)
        zigzag >>= 7
    return bytes([*out, zigzag])


def batch_with_section(records_section: bytes, count: int, last_delta: int = 5) -> bytes:
    """An uncompressed batch at offset 0 holding ``records_section`` as its records, saying it has
    ``count`` of them, with a good CRC: records framed any way a test wants."""
    buf = bytearray(make_batch(0, [(1000, b"k", b"v", [])])[:61] + records_section)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    struct.pack_into(">i", buf, 23, last_delta)
    struct.pack_into(">i", buf, 57, count)
    return resigned(buf)
