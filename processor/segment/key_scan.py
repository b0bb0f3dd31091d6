"""A segment's record keys as the key filter summarises them, read by a compiled walk over each
batch's records (numba). Pure.

What the copier's key filter needs from a segment is every data record's key, and nothing else of
it. aiokafka's C reader builds a Python object for every record (offset, timestamp, key, value,
headers) to hand one key on: 130 ns a record at best, with the interpreter lock held all along, on
the offload path of a worker whose own thread is the bottleneck at small records (measured: with
filters built that way, a 100-byte-value offload ran at 0.75x the rate without them). This walk
reads only the framing and the key, in machine code, and releases the interpreter lock while it
runs (``nogil``): ~20 ns a record, while the worker's other threads go on.

Each batch's header, framing and CRC-32C are checked in Python first (``batch_rewrite.data_section``,
which also decompresses the records section with the batch's codec; control batches hold no keys).
Then :func:`_walk` reads ``recordCount`` records from the section (Kafka's layout, varints zigzag
encoded, as in ``batch_rewrite``)::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value | headerCount varint | headers

and writes, for record i, the key's length (-1: a null key) and its first 32 bytes zero-padded: the
row ``key_filter.summarise_rows`` takes. A key longer than 32 bytes gets its ``long_key_row``
afterwards, in Python, from the offset the walk records. Checked on the way, as Kafka's own reader
does (``ByteUtils.readVarint``): a varint has at most 5 bytes, a varlong 10; a record's length is at
least 1 and ends inside the section, a key inside its record, the last record at the section's
end. A check that fails ends the walk with the failing record's number, and the caller raises a
``FormatError`` naming the batch: never a partial key list (a filter missing a key would let an
erasure skip a segment that holds it). Array accesses are bounds-checked besides (``boundscheck``).

numba is imported with this module, which ``segment_key_filter`` imports only when it builds the
first filter of a process (importing numba takes ~0.5 s, compiling the walk ~1 s, once): commands
and workers without an erasure secret never load it.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from processor.errors import FormatError
from processor.segment.batch_rewrite import data_section
from processor.segment.blocks import block_payload
from processor.segment.entries_v2 import iter_batch_entries
from processor.segment.key_filter import ROW_BYTES, long_key_row
from processor.segment.sealed_segment import SealedSegment

# The smallest record: its length varint and the 6 bytes it counts at least (attributes, and one
# byte each for the timestamp delta, offset delta, key length, value length and header count). A
# header's record count above section bytes / MIN_RECORD is refused before anything is allocated.
MIN_RECORD = 7
_VARINT_BYTES = 5
_VARLONG_BYTES = 10


@numba.njit(nogil=True, boundscheck=True, cache=False)
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
            value = np.int64(raw >> np.uint64(1)) ^ -np.int64(raw & np.uint64(1))
            return int(value), pos + used + 1
        shift += np.uint64(7)
    return 0, -1


@numba.njit(nogil=True, boundscheck=True, cache=False)
def _walk(section: Any, count: int, rows: Any, lengths: Any, offsets: Any, at: int) -> int:
    """Read ``count`` records of a records section, writing each non-null key's first 32 bytes,
    length and offset in the section to the next free places of ``rows`` (zeroed, n x 32),
    ``lengths`` and ``offsets`` from index ``at``. Returns the number of keys written, or -(i + 1)
    for a record i that fails a check (i == count: bytes after the last record)."""
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
            lengths[at + keys] = key_length
            offsets[at + keys] = p
            for j in range(min(key_length, ROW_BYTES)):
                rows[at + keys, j] = section[p + j]
            keys += 1
        pos = record_end
    if pos != end:
        return -(count + 1)
    return keys


class _KeyRows:
    """The rows, lengths and offsets of a segment's keys as they are read, grown by doubling."""

    def __init__(self, capacity: int) -> None:
        self.count = 0
        self.rows = np.zeros((capacity, ROW_BYTES), dtype=np.uint8)  # rows stay zero-padded
        self.lengths = np.empty(capacity, dtype=np.int64)
        self.offsets = np.empty(capacity, dtype=np.int64)

    def make_room(self, more: int) -> None:
        if self.count + more <= len(self.lengths):
            return
        capacity = max(2 * len(self.lengths), self.count + more)
        rows = np.zeros((capacity, ROW_BYTES), dtype=np.uint8)
        rows[: self.count] = self.rows[: self.count]
        self.rows = rows
        self.lengths = np.concatenate([self.lengths[: self.count], np.empty(capacity - self.count, np.int64)])
        self.offsets = np.concatenate([self.offsets[: self.count], np.empty(capacity - self.count, np.int64)])


def segment_key_rows(segment: SealedSegment) -> tuple[np.ndarray, np.ndarray]:
    """(rows, lengths) of every non-null key of the segment's data records, in offset order:
    ``rows`` n x 32 bytes as ``key_filter.summarise_rows`` takes them, ``lengths`` n (u64).
    Raises FormatError naming the block and batch of anything that does not check."""
    found = _KeyRows(max(segment.record_count, 1))
    for number, block in enumerate(segment.blocks):
        where = f"segment block {number}"
        _header, payload = block_payload(block, where=where)
        for batch in iter_batch_entries(payload, where=where):
            data = data_section(batch, where=where)
            if data is not None:  # None: a control batch (a transaction marker), no record key
                _read_batch(found, *data, where=where)
    return found.rows[: found.count], found.lengths[: found.count].view(np.uint64)


def _read_batch(
    found: _KeyRows, base_offset: int, count: int, section: bytes | memoryview, *, where: str
) -> None:
    at = f"{where}: record batch at offset {base_offset}"
    if count > len(section) // MIN_RECORD:
        raise FormatError(f"{at}: {count} records cannot fit its {len(section)}-byte records section")
    found.make_room(count)
    start = found.count
    keys = int(
        _walk(np.frombuffer(section, dtype=np.uint8), count, found.rows, found.lengths, found.offsets, start)
    )
    if keys < 0:
        failed = -keys - 1
        raise FormatError(
            f"{at}: bytes after its {count} records"
            if failed == count
            else f"{at}: record {failed} of {count} does not frame (a length, varint or key overruns)"
        )
    found.count += keys
    for i in start + np.flatnonzero(found.lengths[start : found.count] > ROW_BYTES):
        key = bytes(section[int(found.offsets[i]) : int(found.offsets[i]) + int(found.lengths[i])])
        found.rows[i] = np.frombuffer(long_key_row(key), dtype=np.uint8)
