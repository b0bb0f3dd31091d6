"""Format version 1 entries: one Kafka record = one PIP-76 entry (read only; no longer written).

Byte layout (format version 1, big-endian, lengths of -1 mean null)::

    entry      := [entry_len u32][entry_id i64][entry_data]
                  entry_len  length of entry_data in bytes (the two fields before it not included)
                  entry_id   the record's Kafka offset
    entry_data := [timestamp_type u8][timestamp i64]
                  [key_len i32][key bytes]            key_len -1: null key, 0: empty key
                  [value_len i32][value bytes]        value_len -1: null value (a tombstone)
                  [header_count i32]
                  header_count x ([name_len i32][name utf-8][hvalue_len i32][hvalue bytes])
                                                      hvalue_len -1: null header value

Headers keep their order and duplicates, exactly as the producer sent them. ``timestamp_type`` is
Kafka's: 0 not available, 1 CreateTime, 2 LogAppendTime (the values confluent-kafka reports).

Decoding is :func:`iter_entries`. The leader writes format version 2 (``entries_v2``); the version 1
writer lives in the test support (tests/support/segment_v1_writer.py), which writes this layout for
the tests that prove old archives stay readable.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

from processor.errors import FormatError
from processor.segment.records import Header, KafkaRecord, TimestampType

_I32 = struct.Struct(">i")
ENTRY_HEAD = struct.Struct(">Iq")  # entry_len, entry_id
DATA_HEAD = struct.Struct(">Bqi")  # timestamp_type, timestamp, key_len
NULL_LENGTH = -1


def _take(view: memoryview, pos: int, length: int, end: int, what: str) -> tuple[bytes | None, int]:
    if length == NULL_LENGTH:
        return None, pos
    if length < 0 or pos + length > end:
        raise FormatError(f"{what} length {length} runs past the entry at byte {pos}")
    return bytes(view[pos : pos + length]), pos + length


def decode_entry_data(view: memoryview, offset: int, pos: int, end: int) -> KafkaRecord:
    """Decode ``entry_data`` occupying ``view[pos:end]`` for the record at ``offset``."""
    if end - pos < DATA_HEAD.size + 8:
        raise FormatError(f"entry for offset {offset} is too short ({end - pos} bytes)")
    ts_type, timestamp, key_len = DATA_HEAD.unpack_from(view, pos)
    if ts_type > 2:
        raise FormatError(f"entry for offset {offset} has unknown timestamp type {ts_type}")
    pos += DATA_HEAD.size
    key, pos = _take(view, pos, key_len, end, "key")
    if pos + 4 > end:
        raise FormatError(f"entry for offset {offset} ends before its value length")
    (value_len,) = _I32.unpack_from(view, pos)
    value, pos = _take(view, pos + 4, value_len, end, "value")
    if pos + 4 > end:
        raise FormatError(f"entry for offset {offset} ends before its header count")
    (count,) = _I32.unpack_from(view, pos)
    pos += 4
    if count < 0 or count > (end - pos) // 8:
        raise FormatError(f"entry for offset {offset} has an impossible header count {count}")
    headers: list[Header] = []
    for _ in range(count):
        if pos + 4 > end:
            raise FormatError(f"entry for offset {offset}: header runs past the entry")
        (name_len,) = _I32.unpack_from(view, pos)
        raw_name, pos = _take(view, pos + 4, name_len, end, "header name")
        if raw_name is None or pos + 4 > end:
            raise FormatError(f"entry for offset {offset}: malformed header")
        (hvalue_len,) = _I32.unpack_from(view, pos)
        hvalue, pos = _take(view, pos + 4, hvalue_len, end, "header value")
        try:
            name = raw_name.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"entry for offset {offset}: header name is not UTF-8") from exc
        headers.append((name, hvalue))
    if pos != end:
        raise FormatError(f"entry for offset {offset} has {end - pos} trailing bytes")
    return KafkaRecord(offset, timestamp, TimestampType(ts_type), key, value, tuple(headers))


def iter_entries(payload: bytes | bytearray | memoryview) -> Iterator[KafkaRecord]:
    """Decode every entry of a block payload, in order."""
    view = memoryview(payload)
    pos, end = 0, len(view)
    while pos < end:
        if pos + ENTRY_HEAD.size > end:
            raise FormatError(f"truncated entry header at payload byte {pos}")
        entry_len, entry_id = ENTRY_HEAD.unpack_from(view, pos)
        data_start = pos + ENTRY_HEAD.size
        data_end = data_start + entry_len
        if data_end > end:
            raise FormatError(
                f"entry at payload byte {pos} claims {entry_len} bytes, only {end - data_start} left"
            )
        yield decode_entry_data(view, entry_id, data_start, data_end)
        pos = data_end
