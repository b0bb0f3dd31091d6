"""Blocks decoded column by column, for bulk readers (Spark): no ``KafkaRecord`` per record.

``decode_block_columns`` returns the same rows as ``blocks.decode_block`` (same checks, same
errors: header CRC, payload CRC, zstd payload, entry framing and count, first/last ids, and each
record batch's CRC-32C before any of its rows is returned), as parallel lists:

    offsets[i], timestamps[i], timestamp_types[i], keys[i], values[i]   row i
    header_counts[i]                                                   headers of row i
    header_keys / header_values                                        all rows' headers, flat, in order

``timestamp_types`` use the archive's numbering (``TimestampType``: 1 CreateTime, 2 LogAppendTime).
Null stays distinct from empty for keys, values and header values; a record without headers has a
count of 0. Decoded ``with_headers=False``, the three header lists stay empty.

Why it is faster: format version 2 batches are decoded by aiokafka's C reader, and its records are
turned into row tuples by ``map(attrgetter(...))`` and into columns by ``zip(*rows)``, loops that run
in C, once per block; the only Python-level work is per batch, not per record. The CRCs are
computed with hardware help (``checksums``). Format version 1 blocks (still readable, no longer
written) go through ``decode_block`` and are converted.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field
from typing import Any

from aiokafka.record.default_records import DefaultRecordBatch

from processor.errors import FormatError
from processor.segment.block_header import BLOCK_FORMAT_V1
from processor.segment.blocks import block_payload, decode_block, decode_block_header
from processor.segment.blocks_v2 import block_batches
from processor.segment.checksums import batch_crc_ok
from processor.segment.records import Header, KafkaRecord, TimestampType

_ROW = operator.attrgetter("offset", "timestamp", "key", "value", "headers")
_ROW_NO_HEADERS = operator.attrgetter("offset", "timestamp", "key", "value")
_CREATE_TIME = int(TimestampType.CREATE_TIME)
_LOG_APPEND_TIME = int(TimestampType.LOG_APPEND_TIME)
_I64_MAX = 2**63 - 1

Row = tuple[int, int, bytes | None, bytes | None, list[Header]]
RowNoHeaders = tuple[int, int, bytes | None, bytes | None]


@dataclass(slots=True)
class RecordColumns:
    """Rows as parallel lists (see the module docstring). ``payload_bytes`` is the decoded payload
    size of the blocks they came from: a cheap bound on the keys and values they hold."""

    offsets: list[int] = field(default_factory=list)
    timestamps: list[int] = field(default_factory=list)
    timestamp_types: list[int] = field(default_factory=list)
    keys: list[bytes | None] = field(default_factory=list)
    values: list[bytes | None] = field(default_factory=list)
    header_counts: list[int] = field(default_factory=list)
    header_keys: list[str] = field(default_factory=list)
    header_values: list[bytes | None] = field(default_factory=list)
    payload_bytes: int = 0
    with_headers: bool = True  # False: decoded without headers (the header lists stay empty)

    def __len__(self) -> int:
        return len(self.offsets)

    def extend(self, other: RecordColumns) -> None:
        self.offsets.extend(other.offsets)
        self.timestamps.extend(other.timestamps)
        self.timestamp_types.extend(other.timestamp_types)
        self.keys.extend(other.keys)
        self.values.extend(other.values)
        self.header_counts.extend(other.header_counts)
        self.header_keys.extend(other.header_keys)
        self.header_values.extend(other.header_values)
        self.payload_bytes += other.payload_bytes

    def add_rows(self, rows: list[Row] | list[RowNoHeaders], timestamp_types: list[int]) -> None:
        """Append row tuples ``(offset, timestamp, key, value[, headers])`` (C-level loops only;
        without headers when the columns are ``with_headers=False``)."""
        if not rows:
            return
        columns = list(zip(*rows, strict=True))
        self.offsets.extend(columns[0])
        self.timestamps.extend(columns[1])
        self.timestamp_types.extend(timestamp_types)
        self.keys.extend(columns[2])
        self.values.extend(columns[3])
        if not self.with_headers:
            return
        headers = columns[4]
        counts = list(map(len, headers))
        self.header_counts.extend(counts)
        if any(counts):
            flat: list[Header] = list(itertools.chain.from_iterable(headers))
            names, hvalues = zip(*flat, strict=True)
            self.header_keys.extend(names)
            self.header_values.extend(hvalues)

    def records(self) -> list[KafkaRecord]:
        """The rows as ``KafkaRecord``s (tests and tools; the point of this class is not to)."""
        out: list[KafkaRecord] = []
        pos = 0
        for i, count in enumerate(self.header_counts):
            headers = tuple(
                zip(self.header_keys[pos : pos + count], self.header_values[pos : pos + count], strict=True)
            )
            pos += count
            out.append(
                KafkaRecord(
                    self.offsets[i],
                    self.timestamps[i],
                    TimestampType(self.timestamp_types[i]),
                    self.keys[i],
                    self.values[i],
                    headers,
                )
            )
        return out


def columns_from_records(records: list[KafkaRecord], with_headers: bool = True) -> RecordColumns:
    out = RecordColumns(with_headers=with_headers)
    out.add_rows(
        [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in records],
        [int(r.timestamp_type) for r in records],
    )
    return out


def _batch_rows(
    batch: memoryview, where: str, with_headers: bool = True
) -> tuple[list[Row] | list[RowNoHeaders], int]:
    """One batch's rows (CRC-32C verified first) and its timestamp type; control batches: none."""
    try:
        if not batch_crc_ok(batch):
            raise FormatError(f"{where}: record batch CRC-32C mismatch")
        decoded = DefaultRecordBatch(batch)  # the C reader takes any buffer: no copy of the batch
        if decoded.is_control_batch:
            return [], _CREATE_TIME
        ts_type = _LOG_APPEND_TIME if decoded.timestamp_type else _CREATE_TIME
        return list(map(_ROW if with_headers else _ROW_NO_HEADERS, decoded)), ts_type
    except FormatError:
        raise
    except Exception as exc:  # aiokafka raises its own errors (and struct/zstd ones) for bad bytes
        raise FormatError(f"{where}: record batch does not decode: {exc!r}") from exc


def decode_block_columns(
    data: bytes | bytearray | memoryview,
    *,
    where: str = "block",
    min_offset: int | None = None,
    max_offset: int | None = None,
    with_headers: bool = True,
) -> RecordColumns:
    """Verify and decode one whole block (format version 1 or 2) into columns: the rows of
    ``decode_block(data, where=where, min_offset=min_offset)`` with offsets ``<= max_offset``.

    Batches wholly outside ``[min_offset, max_offset]`` are not decoded (their framing and the
    payload CRC are still checked, as in ``decode_block``); only batches that straddle a bound are
    filtered row by row. ``with_headers=False`` leaves the headers out (a reader that does not
    return them saves their decoding). The block's rows become columns in one go.
    """
    lo = -1 if min_offset is None else min_offset
    hi = _I64_MAX if max_offset is None else max_offset
    if decode_block_header(data, where=where).format_version == BLOCK_FORMAT_V1:
        records = decode_block(data, where=where, min_offset=min_offset)
        out = columns_from_records([r for r in records if r.offset <= hi], with_headers)
        out.payload_bytes = len(data)
        return out
    header, payload = block_payload(data, where=where)
    rows: list[Any] = []
    types: list[int] = []
    for batch in block_batches(header, payload, where=where):
        base = int.from_bytes(batch[:8], "big", signed=True)
        last = base + int.from_bytes(batch[23:27], "big", signed=True)
        if last < lo or base > hi:
            continue
        batch_rows: list[Any]
        batch_rows, ts_type = _batch_rows(batch, where, with_headers)
        if base < lo or last > hi:
            batch_rows = [r for r in batch_rows if lo <= r[0] <= hi]
        rows.extend(batch_rows)
        types.extend([ts_type] * len(batch_rows))
    out = RecordColumns(payload_bytes=len(payload), with_headers=with_headers)
    out.add_rows(rows, types)
    return out
