"""The compiled part of the batched segment-record reader (numba): walks the Avro bodies of a whole
consumed batch of RemoteLogSegmentMetadata values in one call and writes, per record, its numbers and
where each of its strings lies. Pure; :func:`processor.metadata.segment_batch_decoder.read_segments`
turns the rows into records.

Why compiled: read one by one in Python, a segment record's varints and strings were about half of
the follower's CPU per record (~20 us of ~50 on this machine: a bytecode loop per varint byte); the
walk here costs well under a microsecond a record. It accepts exactly the plain encoding the Python
fast path (:func:`processor.metadata.segment_metadata_decoder.read_segment_metadata`) accepts, of the
same layout (``EXPECTED_LAYOUT`` there) and is stricter in one place only: a record naming superseded
segments (a rewrite's, rare) is left to the Python path. A record it does not accept gets
``OK = 0`` and is decoded one by one as before (that path, or fastavro, decides it and raises its
error); what it accepts is still checked afterwards by the same Python code (UTF-8 of every string,
the UUID's text, the model's own checks), so the batch reader and the one-record reader give the
same record or the same error (tests compare both on generated and corrupted records).

One row of ``out`` (int64) per value, columns below; positions are relative to the value's first
byte (its framing), spans are [a, b); -1 where a field is absent. ``epochs`` receives the
segment-leader-epoch pairs of every record, each record's at ``EPOCHS_FIRST`` (``EPOCHS_COUNT`` of
them). numba is imported with this module only: the codec imports it for a batch large enough to pay
numba's import (~0.5-1 s) and, the first time on a machine, the compilation (~1-3 s; then cached,
see :func:`_compiled`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import numba
import numpy as np
from numba import types

OK = 0
PARTITION = 1
START = 2
END = 3
MAX_TS = 4
EVENT_TS = 5
WRITER_EPOCH = 6
SIZE = 7
STATE = 8  # index into the schema's enum symbols
FORMAT = 9
COUNT = 10
CRC = 11
INDEX_SIZE = 12
TXN = 13  # 0 or 1
REPLACES = 14  # -1: null, else an index into the enum symbols
ID_END = 15  # the segment id's bytes are [BODY, ID_END)
TOPIC_A, TOPIC_B = 16, 17
TID_A, TID_B = 18, 19  # -1, -1: a null topic id
SID_A, SID_B = 20, 21
WRITER_A, WRITER_B = 22, 23
EPOCHS_FIRST, EPOCHS_COUNT = 24, 25
TAIL = 26  # where the fields after the state start
CUSTOM_A, CUSTOM_B = 27, 28  # -1, -1: null custom metadata
DATA_A, DATA_B = 29, 30
INDEX_A, INDEX_B = 31, 32
COLUMNS = 33
BODY = 2  # the framing's two bytes (version, record type) come first: the caller checks them

_STATES = 4  # symbols of the state enum
_BYTES = types.Array(types.uint8, 1, "C", readonly=True)
_INTS = types.Array(types.int64, 1, "C", readonly=True)
_ROWS = types.Array(types.int64, 2, "C")
_PAIR = types.UniTuple(types.int64, 2)  # type: ignore[no-untyped-call]

log = logging.getLogger(__name__)


def _compiled(signature: Any, **options: Any) -> Callable[[Any], Any]:
    """numba.njit for one signature, its machine code kept in numba's cache (``__pycache__`` beside
    this file, or the user's cache folder where that is read-only): compiling costs ~1-3 s of CPU,
    loading it again ~0.1 s, in every later process. Where no cache folder is writable, numba
    refuses to cache: the kernel is then compiled in memory (said once in the log)."""

    def wrap(function: Any) -> Any:
        try:
            return numba.njit(signature, nogil=True, cache=True, **options)(function)
        except RuntimeError as exc:  # numba: "cannot cache function ...: no locator available"
            log.info("%s compiled without numba's cache: %s", function.__name__, exc)
            return numba.njit(signature, nogil=True, cache=False, **options)(function)

    return wrap


@_compiled(_PAIR(_BYTES, types.int64, types.int64))
def _varint(buf: Any, p: Any, end: Any) -> Any:
    """(zig-zag value, next position) of the varint at ``buf[p:end]``, or (0, -1): cut short, or more
    than 64 bits (a 10th byte above 1, as the Python reader and fastavro's C reader refuse)."""
    if p >= end:
        return 0, -1
    b = buf[p]
    p += 1
    n = np.uint64(b & 0x7F)
    if b >= 0x80:
        shift = 7
        while True:
            if p >= end:
                return 0, -1
            b = buf[p]
            p += 1
            n |= np.uint64(b & 0x7F) << np.uint64(shift)
            if b < 0x80:
                break
            shift += 7
            if shift == 63:
                if p >= end:
                    return 0, -1
                b = buf[p]
                if b > 1:
                    return 0, -1
                n |= np.uint64(b) << np.uint64(63)
                p += 1
                break
    return np.int64(n >> np.uint64(1)) ^ -np.int64(n & np.uint64(1)), p


@_compiled(_PAIR(_BYTES, types.int64, types.int64))
def _string(buf: Any, p: Any, end: Any) -> Any:
    """(first byte, end) of the Avro string or bytes at ``buf[p:end]``, or (0, -1)."""
    n, p = _varint(buf, p, end)
    if p < 0 or n < 0 or p + n > end:
        return 0, -1
    return p, p + n


@_compiled(types.int64(_BYTES, _INTS, _INTS, _ROWS, _ROWS), boundscheck=True)
def read_rows(buf: Any, starts: Any, ends: Any, out: Any, epochs: Any) -> Any:
    """Fill ``out[i]`` for the value at ``buf[starts[i]:ends[i]]``; returns the epoch pairs written.
    ``epochs`` has room for every pair the bytes could hold (a pair takes two bytes at least)."""
    used = 0
    for i in range(starts.shape[0]):
        row = out[i]
        row[OK] = 0
        base = starts[i]
        end = ends[i]
        p = base + BODY
        # segment_id: topic, topic_id (union null|string), partition, id (uuid string)
        a, p = _string(buf, p, end)
        if p < 0:
            continue
        row[TOPIC_A], row[TOPIC_B] = a - base, p - base
        if p >= end:
            continue
        b = buf[p]
        p += 1
        if b == 0:
            row[TID_A], row[TID_B] = -1, -1
        elif b == 2:
            a, p = _string(buf, p, end)
            if p < 0:
                continue
            row[TID_A], row[TID_B] = a - base, p - base
        else:
            continue
        row[PARTITION], p = _varint(buf, p, end)
        if p < 0:
            continue
        a, p = _string(buf, p, end)
        if p < 0:
            continue
        row[SID_A], row[SID_B] = a - base, p - base
        row[ID_END] = p - base
        fail = False
        for column in (START, END, MAX_TS, EVENT_TS):
            row[column], p = _varint(buf, p, end)
            if p < 0:
                fail = True
                break
        if fail:
            continue
        a, p = _string(buf, p, end)
        if p < 0:
            continue
        row[WRITER_A], row[WRITER_B] = a - base, p - base
        row[WRITER_EPOCH], p = _varint(buf, p, end)
        if p < 0:
            continue
        # segment_leader_epochs: one positive block of (epoch int, start_offset long), then a 0
        count, p = _varint(buf, p, end)
        if p < 0 or count <= 0 or count > (end - p) // 2:
            continue
        row[EPOCHS_FIRST], row[EPOCHS_COUNT] = used, count
        for k in range(count):
            epochs[used + k, 0], p = _varint(buf, p, end)
            if p < 0:
                break
            epochs[used + k, 1], p = _varint(buf, p, end)
            if p < 0:
                break
        if p < 0 or p >= end or buf[p] != 0:
            continue
        p += 1
        row[SIZE], p = _varint(buf, p, end)
        if p < 0 or p >= end:
            continue
        b = buf[p]
        p += 1
        if b & 1 or b >= 2 * _STATES:
            continue
        row[STATE] = b >> 1
        row[TAIL] = p - base
        # custom_metadata (union null|bytes)
        if p >= end:
            continue
        b = buf[p]
        p += 1
        if b == 0:
            row[CUSTOM_A], row[CUSTOM_B] = -1, -1
        elif b == 2:
            a, p = _string(buf, p, end)
            if p < 0:
                continue
            row[CUSTOM_A], row[CUSTOM_B] = a - base, p - base
        else:
            continue
        if p >= end or buf[p] > 1:
            continue
        row[TXN] = buf[p]
        p += 1
        a, p = _string(buf, p, end)
        if p < 0:
            continue
        row[DATA_A], row[DATA_B] = a - base, p - base
        a, p = _string(buf, p, end)
        if p < 0:
            continue
        row[INDEX_A], row[INDEX_B] = a - base, p - base
        for column in (FORMAT, COUNT, CRC, INDEX_SIZE):
            row[column], p = _varint(buf, p, end)
            if p < 0:
                fail = True
                break
        if fail:
            continue
        # replaces_state (union null|enum) and supersedes (array of uuid strings), each absent from
        # records written before it was added (schemas/history/)
        row[REPLACES] = -1
        if p < end:
            if buf[p] == 0:
                p += 1
            elif p + 1 < end and buf[p] == 2 and buf[p + 1] < 2 * _STATES and not buf[p + 1] & 1:
                row[REPLACES] = buf[p + 1] >> 1
                p += 2
            else:
                continue
            if p < end:
                if buf[p] != 0:
                    continue  # superseded segments named: the Python path reads them
                p += 1
        if p != end:
            continue
        used += count
        row[OK] = 1
    return used
