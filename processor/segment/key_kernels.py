"""The key filter's compiled code (numba): the public summary of a key (``key_filter``'s module
docstring defines it) and the walk that summarises every key of a segment from its batches. Pure.

Why compiled: the copier builds a filter for every segment it uploads. Read through aiokafka's C
reader, a key costs a Python object for every record (offset, timestamp, key, value, headers):
130 ns a record at best, with the interpreter lock held, on the offload path of a worker whose own
thread is its bottleneck at small records (measured: filters built that way ran a 100-byte-value
offload at 0.75x the rate without them). The walk reads only the framing and the key, summarises
the key on the spot (a chain of 64-bit mixes over its words), and releases the interpreter lock
while it runs (``nogil``): ~20 ns a record, while the worker's other threads go on.

Each batch's header, framing and CRC-32C are checked in Python first (``batch_rewrite.data_section``,
which also decompresses the records section with the batch's codec; control batches hold no keys).
Then :func:`_walk` reads ``recordCount`` records from the section (Kafka's layout, varints zigzag
encoded, as in ``batch_rewrite``)::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value | headerCount varint | headers

and writes each non-null key's summary, in order. Checked on the way, as Kafka's own reader does
(``ByteUtils.readVarint``): a varint has at most 5 bytes, a varlong 10; a record's length is at
least 1 and ends inside the section, a key inside its record, the last record at the section's
end. A check that fails ends the walk with the failing record's number, and the caller raises a
``FormatError`` naming the batch: never a partial key list (a filter missing a key would let an
erasure skip a segment that holds it). Array accesses are bounds-checked besides (``boundscheck``).

numba is imported, and the kernels compiled for their one signature each, with this module, which
``key_filter_builder`` and ``key_filter.summarise`` import where they need it (importing numba
takes ~0.5 s, compiling the kernels ~1 s, once a process): commands and workers that neither build
nor look up a filter never load it.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
from numba import types

from processor.errors import FormatError
from processor.segment.batch_rewrite import data_section
from processor.segment.blocks import block_payload
from processor.segment.entries_v2 import iter_batch_entries
from processor.segment.sealed_segment import SealedSegment

# The smallest record: its length varint and the 6 bytes it counts at least (attributes, and one
# byte each for the timestamp delta, offset delta, key length, value length and header count). A
# header's record count above section bytes / MIN_RECORD is refused before anything is allocated.
MIN_RECORD = 7
MIN_WORDS = 4  # a key's summary mixes at least 4 words: a key of up to 32 bytes, zero-padded
_VARINT_BYTES = 5
_VARLONG_BYTES = 10
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
# Each kernel is compiled for these types only, when this module is imported (numba's eager
# compilation): a call with other types is a TypeError, never a compile in the middle of a copy
# (a writable byte array, a view of a block's bytearray, converts to the read-only type).
_BYTES = types.Array(types.uint8, 1, "C", readonly=True)
_INTS = types.Array(types.int64, 1, "C", readonly=True)
_SUMMARIES = types.Array(types.uint64, 2, "C")
_DIGESTS = types.Array(types.uint64, 2, "C", readonly=True)
_BITS = types.Array(types.uint8, 1, "C")
# numba's type constructors carry no annotations
_INT_PAIR = types.UniTuple(types.int64, 2)  # type: ignore[no-untyped-call]
_SEED_A, _SEED_B = np.uint64(0x243F6A8885A308D3), np.uint64(0x13198A2E03707344)


@numba.njit(types.uint64(types.uint64), nogil=True, cache=False)
def _mix(x: Any) -> Any:
    """splitmix64's finaliser (wrapping u64 arithmetic)."""
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    return x ^ (x >> np.uint64(31))


@numba.njit(
    types.none(_BYTES, types.int64, types.int64, types.int64, _SUMMARIES, types.int64),
    nogil=True,
    boundscheck=True,
    cache=False,
)
def _summarise(data: Any, start: int, size: int, length: int, out: Any, row: int) -> None:
    """Write to ``out[row]`` the summary (a, b) of the ``size`` bytes at ``data[start:]`` standing
    for a key of ``length`` bytes: a = mix(... mix(w1 ^ mix(w0 ^ mix(length ^ SEED_A)))) over the
    bytes' little-endian u64 words, zero-padded to at least MIN_WORDS; b = mix(a ^ SEED_B)."""
    h = _mix(np.uint64(length) ^ _SEED_A)
    words = max(MIN_WORDS, (size + 7) // 8)
    for w in range(words):
        word = np.uint64(0)
        for j in range(8):
            at = 8 * w + j
            if at < size:
                word |= np.uint64(data[start + at]) << np.uint64(8 * j)
        h = _mix(word ^ h)
    out[row, 0] = h
    out[row, 1] = _mix(h ^ _SEED_B)


@numba.njit(types.none(_BYTES, _INTS, _INTS, _INTS, _SUMMARIES), nogil=True, boundscheck=True, cache=False)
def _summarise_spans(data: Any, starts: Any, sizes: Any, lengths: Any, out: Any) -> None:
    for row in range(len(starts)):
        _summarise(data, starts[row], sizes[row], lengths[row], out, row)


@numba.njit(
    _INT_PAIR(_BYTES, types.int64, types.int64, types.int64),
    nogil=True,
    boundscheck=True,
    cache=False,
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
    types.int64(_BYTES, types.int64, _SUMMARIES, types.int64), nogil=True, boundscheck=True, cache=False
)
def _walk(section: Any, count: int, out: Any, at: int) -> int:
    """Read ``count`` records of a records section, writing each non-null key's summary to the
    next row of ``out`` from row ``at``. Returns the number of keys written, or -(i + 1) for a
    record i that fails a check (i == count: bytes after the last record)."""
    end = len(section)
    pos = 0
    keys = 0
    for i in range(count):
        length, body = _varint(section, pos, end, _VARINT_BYTES)
        if body < 0 or length < 1 or length > end - body:
            return -(i + 1)
        record_end = body + length
        p = body + 1  # past the attributes byte
        _ts, p = _varint(section, p, record_end, _VARLONG_BYTES)
        if p < 0:
            return -(i + 1)
        _delta, p = _varint(section, p, record_end, _VARINT_BYTES)
        if p < 0:
            return -(i + 1)
        key_length, p = _varint(section, p, record_end, _VARINT_BYTES)
        if p < 0 or key_length < -1 or key_length > record_end - p:
            return -(i + 1)
        if key_length >= 0:
            _summarise(section, p, key_length, key_length, out, at + keys)
            keys += 1
        pos = record_end
    if pos != end:
        return -(count + 1)
    return keys


@numba.njit(types.none(_DIGESTS, types.int64, types.int64, _BITS), nogil=True, boundscheck=True, cache=False)
def _set_bits(digests: Any, m: int, k: int, bits: Any) -> None:
    """Set in ``bits`` (m / 8 bytes) the k bits of each key whose (h1, h2) is a row of ``digests``:
    (h1 + j * h2) mod m for j = 0 .. k-1, h1 = h1 mod m, h2 = (h2 | 1) mod m, as a running sum
    (``key_filter``'s module docstring; its lookup computes the same indices with numpy)."""
    mm = np.uint64(m)
    for row in range(digests.shape[0]):
        index = digests[row, 0] % mm
        step = (digests[row, 1] | np.uint64(1)) % mm
        for _ in range(k):
            bits[index >> np.uint64(3)] |= np.uint8(1 << (index & np.uint64(7)))
            index += step
            if index >= mm:
                index -= mm


def filter_bits(digests: np.ndarray, m: int, k: int) -> bytes:
    """The m bits (m / 8 bytes, bit i = bit (i & 7) of byte (i >> 3)) of a filter of k hashes
    holding the keys whose digests are the rows of ``digests``. One pass a key, in machine code,
    writing straight into the packed bytes: numpy's bool array of m flags was 5 MB for half a
    million keys, written at random (measured: 36 ns a key, here ~10)."""
    bits = np.zeros(m // 8, dtype=np.uint8)
    _set_bits(digests, m, k, bits)
    return bits.tobytes()


def summarise_spans(data: bytes, starts: np.ndarray, sizes: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The summaries (n x 2 u64) of the byte spans ``data[starts[i] : starts[i] + sizes[i]]``, each
    standing for a key of ``lengths[i]`` bytes (``key_filter.summarise`` lays the keys out)."""
    out = np.empty((len(starts), 2), dtype=np.uint64)
    _summarise_spans(np.frombuffer(data, dtype=np.uint8), starts, sizes, lengths, out)
    return out


def segment_key_summaries(segment: SealedSegment) -> np.ndarray:
    """The summary (n x 2 u64, ``key_filter``'s current version) of every non-null key of the
    segment's data records, in offset order. Raises FormatError naming the block and batch of
    anything that does not check."""
    found = _Summaries(max(segment.record_count, 1))
    for number, block in enumerate(segment.blocks):
        where = f"segment block {number}"
        _header, payload = block_payload(block, where=where)
        for batch in iter_batch_entries(payload, where=where):
            data = data_section(batch, where=where)
            if data is not None:  # None: a control batch (a transaction marker), no record key
                base_offset, count, section = data
                found.read(section, count, where=f"{where}: record batch at offset {base_offset}")
    return found.out[: found.count]


class _Summaries:
    """The summaries of a segment's keys as they are read, grown by doubling (a segment's record
    count sizes them first; batches claiming more records than it vouches for grow them)."""

    def __init__(self, capacity: int) -> None:
        self.count = 0
        self.out = np.empty((capacity, 2), dtype=np.uint64)

    def read(self, section: bytes | memoryview, count: int, *, where: str) -> None:
        if count > len(section) // MIN_RECORD:
            raise FormatError(f"{where}: {count} records cannot fit its {len(section)}-byte records section")
        if self.count + count > len(self.out):
            grown = np.empty((max(2 * len(self.out), self.count + count), 2), dtype=np.uint64)
            grown[: self.count] = self.out[: self.count]
            self.out = grown
        keys = int(_walk(np.frombuffer(section, dtype=np.uint8), count, self.out, self.count))
        if keys < 0:
            failed = -keys - 1
            raise FormatError(
                f"{where}: bytes after its {count} records"
                if failed == count
                else f"{where}: record {failed} of {count} does not frame (a length, varint or key overruns)"
            )
        self.count += keys
