"""A block's records decoded in bulk into flat arrays, in compiled code (numba). Pure.

``decode_block_arrays`` returns the rows of ``block_columns.decode_block_columns`` (the same rows,
the same checks: block header and payload CRCs, entry framing, each needed record batch's CRC-32C
before any of its rows) as numpy arrays laid out the way Arrow holds its columns, so a reader
(Spark's ``tiered_records``) wraps them into Arrow arrays without a Python object per record::

    offsets[i] i64, timestamps[i] i64 (ms), timestamp_types[i] i8    row i (types: 1 CreateTime,
                                                                      2 LogAppendTime, the archive's)
    keys / values                         Binary: offsets i32 (n + 1), validity u8 (n), data u8
    header_counts[i] i32                  headers of row i (0: none)
    header_keys                           Binary (UTF-8, never null), all rows' headers, in order
    header_values                         Binary (null where the producer sent null)

Row ``i``'s key is ``data[offsets[i]:offsets[i + 1]]`` when ``validity[i]``, else null (null is not
empty). Decoded ``with_headers=False``, the header arrays are empty.

Why compiled: through aiokafka's C reader every record becomes a Python object (offset, timestamp,
key, value, headers), then list items, then Arrow builds each column from those objects again:
several Python objects and allocations a record, with the interpreter lock held, about as much CPU
as all of Spark's work on the row. Kafka's record framing is varints, which no vectorised numpy
operation walks, hence one small loop in machine code (``bulk_kernels.decode_records``) that
walks each records section once and copies each key, value and header straight into the column buffers.

The Python part runs once a batch: its header fields, its CRC-32C (hardware, ``checksums``) and,
for a compressed batch, the decompression of its records section (``batch_codecs``, every Kafka
codec). Control batches (transaction markers) hold no rows. Batches wholly outside the offset
bounds are neither checked nor decoded (as in ``decode_block_columns``); the bounds are applied to
each row in the walk. Aborted transactions are never archived (``read_committed``): a block holds
committed and non-transactional batches only, decoded alike.

Record layout inside a (decompressed) records section (Kafka's, varints zigzag encoded)::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value | headerCount varint | headers
    header := headerKeyLength varint | headerKey | headerValueLength varint | headerValue

Checked in the walk, as Kafka's own reader does: a varint has at most 5 bytes, a varlong 10; a
record's length is at least 1 and ends inside the section; its key, value and headers end inside
it and it holds nothing after its headers; a header count and a header key length are not
negative; ``recordCount`` records fill the section exactly. A failed check is a ``FormatError``
naming the block, the batch and the record. Header keys are checked to be UTF-8 (``FormatError``
otherwise), as aiokafka's decoding of them does. Array accesses are bounds-checked besides.

Format version 1 blocks (still readable, no longer written) go through ``decode_block_columns``
and are converted. numba is imported, and the kernel compiled for its one signature, with this
module (~1 s of CPU once a process): only its readers import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from processor.errors import FormatError
from processor.segment.batch_codecs import decompress_records
from processor.segment.block_columns import RecordColumns, decode_block_columns
from processor.segment.block_header import BLOCK_FORMAT_V1
from processor.segment.blocks import block_payload, decode_block_header
from processor.segment.blocks_v2 import block_batches
from processor.segment.bulk_kernels import MIN_HEADER, MIN_RECORD, decode_records
from processor.segment.checksums import batch_crc_ok
from processor.segment.entries_v2 import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    BATCH_HEADER,
    BATCH_HEADER_LEN,
    ENTRY_HEAD,
)

_I64_MAX = 2**63 - 1
_I32_MAX = 2**31 - 1


@dataclass(frozen=True, slots=True)
class BinaryColumn:
    """A column of byte strings as Arrow lays one out (see the module docstring)."""

    offsets: np.ndarray  # i32, n + 1
    validity: np.ndarray  # u8, n: 0 where null
    data: np.ndarray  # u8

    def to_list(self) -> list[bytes | None]:
        data = self.data.tobytes()
        o = self.offsets.tolist()
        return [data[o[i] : o[i + 1]] if v else None for i, v in enumerate(self.validity.tolist())]


@dataclass(frozen=True, slots=True)
class BlockArrays:
    """One block's rows (see the module docstring). ``payload_bytes``: the block's decoded payload
    size (a cheap bound on the keys and values it holds)."""

    offsets: np.ndarray
    timestamps: np.ndarray
    timestamp_types: np.ndarray
    keys: BinaryColumn
    values: BinaryColumn
    header_counts: np.ndarray
    header_keys: BinaryColumn
    header_values: BinaryColumn
    payload_bytes: int
    with_headers: bool

    def __len__(self) -> int:
        return len(self.offsets)

    def columns(self) -> RecordColumns:
        """The rows as ``RecordColumns`` (tests and tools; the point of this class is not to)."""
        return RecordColumns(
            offsets=self.offsets.tolist(),
            timestamps=self.timestamps.tolist(),
            timestamp_types=self.timestamp_types.tolist(),
            keys=self.keys.to_list(),
            values=self.values.to_list(),
            header_counts=self.header_counts.tolist() if self.with_headers else [],
            header_keys=[k.decode() for k in self.header_keys.to_list() if k is not None],
            header_values=self.header_values.to_list(),
            payload_bytes=self.payload_bytes,
            with_headers=self.with_headers,
        )


def _binary(values: list[bytes | None]) -> BinaryColumn:
    lengths = np.fromiter((len(v) if v is not None else 0 for v in values), np.int32, len(values))
    offsets = np.zeros(len(values) + 1, np.int32)
    np.cumsum(lengths, out=offsets[1:])
    validity = np.fromiter((v is not None for v in values), np.uint8, len(values))
    data = np.frombuffer(b"".join(v for v in values if v is not None), np.uint8)
    return BinaryColumn(offsets, validity, data)


def arrays_from_columns(cols: RecordColumns) -> BlockArrays:
    """Lists of rows as arrays (format version 1 blocks, decoded the old way)."""
    return BlockArrays(
        np.asarray(cols.offsets, np.int64),
        np.asarray(cols.timestamps, np.int64),
        np.asarray(cols.timestamp_types, np.int8),
        _binary(cols.keys),
        _binary(cols.values),
        np.asarray(cols.header_counts if cols.with_headers else [0] * len(cols), np.int32),
        _binary([k.encode() for k in cols.header_keys]),
        _binary(cols.header_values),
        cols.payload_bytes,
        cols.with_headers,
    )


def _empty(payload_bytes: int, with_headers: bool) -> BlockArrays:
    return arrays_from_columns(RecordColumns(payload_bytes=payload_bytes, with_headers=with_headers))


def numpy_bytes(size: int) -> np.ndarray:
    """An uninitialised byte buffer (the default ``alloc``)."""
    return np.empty(size, np.uint8)


def decode_block_arrays(
    data: bytes | bytearray | memoryview,
    *,
    where: str = "block",
    min_offset: int | None = None,
    max_offset: int | None = None,
    with_headers: bool = True,
    alloc: Callable[[int], np.ndarray] = numpy_bytes,
) -> BlockArrays:
    """Verify and decode one whole block (format version 1 or 2) into arrays: the rows of
    ``decode_block_columns(data, where=where, min_offset=..., max_offset=..., with_headers=...)``.
    ``alloc(size)``: a writable, uninitialised u8 array for the keys', values' and headers' bytes
    (a reader passes its own pool's: Arrow's reuses its pages, where numpy's large buffers are
    fresh pages from the kernel each time, and faulting them in cost more than the decoding).
    Raises FormatError naming ``where`` for bytes that do not check."""
    lo = -1 if min_offset is None else min_offset
    hi = _I64_MAX if max_offset is None else max_offset
    if decode_block_header(data, where=where).format_version == BLOCK_FORMAT_V1:
        return arrays_from_columns(
            decode_block_columns(
                data, where=where, min_offset=min_offset, max_offset=max_offset, with_headers=with_headers
            )
        )
    header, payload = block_payload(data, where=where)
    batches = block_batches(header, payload, where=where)
    # (section start, end, record count, base offset, first timestamp, max timestamp, log append)
    fields: list[tuple[int, int, int, int, int, int, int]] = []
    parts: list[memoryview | bytes] = []
    gathered = 0
    compressed = False
    at = 0  # the batch's position in the payload: entries follow each other
    for batch in batches:
        start = at + ENTRY_HEAD.size
        at = start + len(batch)
        base = int.from_bytes(batch[:8], "big", signed=True)
        last = base + int.from_bytes(batch[23:27], "big", signed=True)
        if last < lo or base > hi:
            continue
        if not batch_crc_ok(batch):
            raise FormatError(f"{where}: record batch CRC-32C mismatch")
        (_b, _len, _epoch, _magic, _crc, attrs, _delta, first_ts, max_ts, _pid, _pe, _seq, count) = (
            BATCH_HEADER.unpack_from(batch)
        )
        if attrs & ATTR_CONTROL:
            continue  # a transaction marker: no rows
        section: memoryview | bytes = batch[BATCH_HEADER_LEN:]
        codec = attrs & ATTR_CODEC_MASK
        if codec:
            section = decompress_records(codec, section, where=f"{where}: record batch at offset {base}")
            compressed = True
        if count < 0 or count > len(section) // MIN_RECORD:
            raise FormatError(
                f"{where}: record batch at offset {base} claims {count} records in {len(section)} bytes"
            )
        log_append = 1 if attrs & ATTR_LOG_APPEND_TIME else 0
        fields.append((start + BATCH_HEADER_LEN, at, count, base, first_ts, max_ts, log_append))
        parts.append(section)
        gathered += len(section)
    if not fields:
        return _empty(len(payload), with_headers)
    if compressed:  # sections laid end to end in one buffer, in order
        src = np.frombuffer(b"".join(parts), np.uint8)
        pos = 0
        for n, part in enumerate(parts):
            fields[n] = (pos, pos + len(part), *fields[n][2:])
            pos += len(part)
    else:
        src = np.frombuffer(payload, np.uint8)
    table = np.array(fields, np.int64).T.copy()
    starts, ends, counts, bases, first_tss, max_tss, log_appends = table
    if gathered > _I32_MAX:  # the columns' offsets are i32 (Arrow's binary type)
        raise FormatError(f"{where}: {gathered} bytes of records in one block, more than a column holds")
    rows = int(counts.sum())
    data_cap = gathered
    header_cap = gathered // MIN_HEADER + 1 if with_headers else 0
    out_offsets = np.empty(rows, np.int64)
    out_ts = np.empty(rows, np.int64)
    out_types = np.empty(rows, np.int8)
    key_offsets = np.empty(rows + 1, np.int32)
    key_valid = np.empty(rows, np.uint8)
    key_data = alloc(data_cap)
    value_offsets = np.empty(rows + 1, np.int32)
    value_valid = np.empty(rows, np.uint8)
    value_data = alloc(data_cap)
    header_counts = np.zeros(rows if with_headers else 0, np.int32)
    hkey_offsets = np.empty(header_cap + 1, np.int32)
    hkey_data = alloc(data_cap if with_headers else 0)
    hvalue_offsets = np.empty(header_cap + 1, np.int32)
    hvalue_valid = np.empty(header_cap, np.uint8)
    hvalue_data = alloc(data_cap if with_headers else 0)
    got, n_headers, bad_batch, bad_record = decode_records(
        src,
        starts,
        ends,
        counts,
        bases,
        first_tss,
        max_tss,
        log_appends,
        lo,
        hi,
        with_headers,
        out_offsets,
        out_ts,
        out_types,
        key_offsets,
        key_valid,
        key_data,
        value_offsets,
        value_valid,
        value_data,
        header_counts,
        hkey_offsets,
        hkey_data,
        hvalue_offsets,
        hvalue_valid,
        hvalue_data,
    )
    if bad_batch >= 0:
        base, count = int(bases[bad_batch]), int(counts[bad_batch])
        what = (
            f"bytes after its {count} records"
            if bad_record == count
            else f"record {bad_record} of {count} does not frame (a length or varint overruns)"
        )
        raise FormatError(f"{where}: record batch at offset {base}: {what}")
    hkeys = BinaryColumn(
        hkey_offsets[: n_headers + 1], np.ones(n_headers, np.uint8), hkey_data[: hkey_offsets[n_headers]]
    )
    _check_utf8(hkeys, where)
    return BlockArrays(
        out_offsets[:got],
        out_ts[:got],
        out_types[:got],
        BinaryColumn(key_offsets[: got + 1], key_valid[:got], key_data[: key_offsets[got]]),
        BinaryColumn(value_offsets[: got + 1], value_valid[:got], value_data[: value_offsets[got]]),
        header_counts[:got] if with_headers else np.zeros(got, np.int32),
        hkeys,
        BinaryColumn(
            hvalue_offsets[: n_headers + 1],
            hvalue_valid[:n_headers],
            hvalue_data[: hvalue_offsets[n_headers]],
        ),
        len(payload),
        with_headers,
    )


def _check_utf8(keys: BinaryColumn, where: str) -> None:
    """Header keys are strings: bytes that are not UTF-8 are refused, as aiokafka's decoding does."""
    if not len(keys.data) or not keys.data.max(initial=0) & 0x80:
        return  # ASCII only
    try:
        keys.data.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{where}: a record header key is not UTF-8: {exc}") from exc
    # each key on its own: a multi-byte character must not straddle two keys
    raw = keys.data.tobytes()
    o = keys.offsets.tolist()
    for i in range(len(o) - 1):
        try:
            raw[o[i] : o[i + 1]].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise FormatError(f"{where}: a record header key is not UTF-8: {exc}") from exc
