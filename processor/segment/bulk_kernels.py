"""The compiled walk of :mod:`processor.segment.bulk_records` (numba): each records section's Kafka
framing walked once, every key, value and header copied straight into Arrow-shaped column buffers,
with the framing checks of Kafka's own reader (the record layout and the checks are in
bulk_records' docstring). Pure. numba is imported, and the kernel compiled for its one signature,
with this module (~1 s of CPU once a process): only the bulk readers import it."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types

MIN_RECORD = 7  # a record's length varint and the 6 bytes it counts at least
MIN_HEADER = 2  # a header's key length and value length varints, one byte each at least
_VARINT_BYTES = 5
_VARLONG_BYTES = 10

_BYTES = types.Array(types.uint8, 1, "C", readonly=True)
_I64_IN = types.Array(types.int64, 1, "C", readonly=True)
_I64 = types.Array(types.int64, 1, "C")
_I32 = types.Array(types.int32, 1, "C")
_I8 = types.Array(types.int8, 1, "C")
_U8 = types.Array(types.uint8, 1, "C")
_RESULT = types.UniTuple(types.int64, 4)  # type: ignore[no-untyped-call]
_INT_PAIR = types.UniTuple(types.int64, 2)  # type: ignore[no-untyped-call]


@numba.njit(
    _INT_PAIR(_BYTES, types.int64, types.int64, types.int64), nogil=True, boundscheck=True, cache=False
)
def _varint(data: Any, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """(value, position after it) of the zigzag varint at ``data[pos:end]``; position -1 if it
    runs past ``end`` or is longer than ``max_bytes``."""
    raw = np.uint64(0)
    shift = np.uint64(0)
    for used in range(max_bytes):
        if pos + used >= end:
            return 0, -1
        byte = np.uint64(data[pos + used])
        raw |= (byte & np.uint64(0x7F)) << shift
        if byte < np.uint64(0x80):
            return int(np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))), pos + used + 1
        shift += np.uint64(7)
    return 0, -1


@numba.njit(
    types.none(_U8, types.int64, _BYTES, types.int64, types.int64), nogil=True, boundscheck=False, cache=False
)
def _copy(dst: Any, at: int, src: Any, start: int, size: int) -> None:
    """``dst[at:at + size] = src[start:start + size]`` as a loop over two views, which LLVM
    vectorises (measured per KiB: ~65 ns; numba's slice assignment, its general broadcasting,
    ~1,100 ns; a loop indexing the whole arrays, whose indices may wrap around, ~1,700 ns)."""
    to = dst[at : at + size]
    frm = src[start : start + size]
    for j in range(size):
        to[j] = frm[j]


@numba.njit(
    _RESULT(
        _BYTES,  # src: the records sections
        _I64_IN,  # batch: start, end, record count, base offset, first timestamp, max timestamp,
        _I64_IN,  # log append time (0/1): one array each
        _I64_IN,
        _I64_IN,
        _I64_IN,
        _I64_IN,
        _I64_IN,
        types.int64,  # lo
        types.int64,  # hi
        types.boolean,  # with headers
        _I64,  # offsets
        _I64,  # timestamps
        _I8,  # timestamp types
        _I32,  # key offsets (n + 1)
        _U8,  # key validity
        _U8,  # key data
        _I32,  # value offsets
        _U8,  # value validity
        _U8,  # value data
        _I32,  # header counts
        _I32,  # header key offsets
        _U8,  # header key data
        _I32,  # header value offsets
        _U8,  # header value validity
        _U8,  # header value data
    ),
    nogil=True,
    boundscheck=False,
    cache=False,
)
def decode_records(
    src: Any,
    starts: Any,
    ends: Any,
    counts: Any,
    bases: Any,
    first_ts: Any,
    max_ts: Any,
    log_append: Any,
    lo: int,
    hi: int,
    with_headers: bool,
    offsets: Any,
    timestamps: Any,
    ts_types: Any,
    key_offsets: Any,
    key_valid: Any,
    key_data: Any,
    value_offsets: Any,
    value_valid: Any,
    value_data: Any,
    header_counts: Any,
    hkey_offsets: Any,
    hkey_data: Any,
    hvalue_offsets: Any,
    hvalue_valid: Any,
    hvalue_data: Any,
) -> tuple[int, int, int, int]:
    """Walk the batches' records sections ``src[starts[b]:ends[b]]``, writing every row with an
    offset in ``[lo, hi]``. Returns (rows, headers, -1, -1), or (0, 0, b, i) for record i of batch b
    failing a check (i == counts[b]: bytes after the batch's last record)."""
    rows = 0
    headers = 0
    key_offsets[0] = 0
    value_offsets[0] = 0
    hkey_offsets[0] = 0
    hvalue_offsets[0] = 0
    kpos = 0
    vpos = 0
    hkpos = 0
    hvpos = 0
    for b in range(len(starts)):
        pos = starts[b]
        end = ends[b]
        for i in range(counts[b]):
            length, body = _varint(src, pos, end, _VARINT_BYTES)
            if body < 0 or length < 1 or length > end - body:
                return 0, 0, b, i
            record_end = body + length
            ts_delta, p = _varint(src, body + 1, record_end, _VARLONG_BYTES)  # past the attributes
            if p < 0:
                return 0, 0, b, i
            offset_delta, p = _varint(src, p, record_end, _VARINT_BYTES)
            if p < 0:
                return 0, 0, b, i
            offset = bases[b] + offset_delta
            keep = lo <= offset <= hi
            key_len, p = _varint(src, p, record_end, _VARINT_BYTES)
            if p < 0 or key_len > record_end - p:
                return 0, 0, b, i
            key_at = p
            if key_len > 0:
                p += key_len
            value_len, p = _varint(src, p, record_end, _VARINT_BYTES)
            if p < 0 or value_len > record_end - p:
                return 0, 0, b, i
            value_at = p
            if value_len > 0:
                p += value_len
            header_count, p = _varint(src, p, record_end, _VARINT_BYTES)
            if p < 0 or header_count < 0 or header_count > (record_end - p) // MIN_HEADER:
                return 0, 0, b, i
            if keep:
                offsets[rows] = offset
                if log_append[b]:
                    timestamps[rows] = max_ts[b]
                    ts_types[rows] = 2
                else:
                    timestamps[rows] = first_ts[b] + ts_delta
                    ts_types[rows] = 1
                if key_len >= 0:
                    _copy(key_data, kpos, src, key_at, key_len)
                    kpos += key_len
                    key_valid[rows] = 1
                else:
                    key_valid[rows] = 0
                key_offsets[rows + 1] = kpos
                if value_len >= 0:
                    _copy(value_data, vpos, src, value_at, value_len)
                    vpos += value_len
                    value_valid[rows] = 1
                else:
                    value_valid[rows] = 0
                value_offsets[rows + 1] = vpos
            written = 0
            for _h in range(header_count):
                hkey_len, p = _varint(src, p, record_end, _VARINT_BYTES)
                if p < 0 or hkey_len < 0 or hkey_len > record_end - p:
                    return 0, 0, b, i
                hkey_at = p
                p += hkey_len
                hvalue_len, p = _varint(src, p, record_end, _VARINT_BYTES)
                if p < 0 or hvalue_len > record_end - p:
                    return 0, 0, b, i
                hvalue_at = p
                if hvalue_len > 0:
                    p += hvalue_len
                if keep and with_headers:
                    _copy(hkey_data, hkpos, src, hkey_at, hkey_len)
                    hkpos += hkey_len
                    hkey_offsets[headers + 1] = hkpos
                    if hvalue_len >= 0:
                        _copy(hvalue_data, hvpos, src, hvalue_at, hvalue_len)
                        hvpos += hvalue_len
                        hvalue_valid[headers] = 1
                    else:
                        hvalue_valid[headers] = 0
                    hvalue_offsets[headers + 1] = hvpos
                    headers += 1
                    written += 1
            if p != record_end:
                return 0, 0, b, i
            if keep:
                if with_headers:
                    header_counts[rows] = written
                rows += 1
            pos = record_end
        if pos != end:
            return 0, 0, b, counts[b]
    return rows, headers, -1, -1
