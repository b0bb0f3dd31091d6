"""The batches a restore sends for a chunk of the archive, with the source offsets of their records.
Pure: no I/O (the producer, :mod:`processor.restore.batch_producer`, restamps and sends them).

An archived batch goes out byte for byte (keys, values, headers, timestamps, codec; the producer
only rewrites its producer fields and CRC) when the target can take it as it is:

- it is a data batch (transaction markers are the target's own business, never copied);
- all of its records are in the restore's range ``[low, high)``;
- its offsets have no gaps (``recordCount == lastOffsetDelta + 1``: the records' offset deltas are
  then 0..n-1, as the broker expects from a producer; a compacted source leaves gaps);
- its timestamps are CreateTime (a LogAppendTime batch carries the append time only in its header;
  its records are written anew with that time, which is what a consumer of the source saw);
- it fits ``max_batch_bytes`` (the target's ``max.message.bytes``).

Any other batch (or a chunk of decoded format 1 records) has its records in range written into new
batches of at most ``max_batch_bytes``, with the source batch's codec, by aiokafka's C builder.
Either way a batch's records land at ``base offset + i`` in the target, so its base offset, which
the broker answers, places every record (:func:`processor.restore.delivery.landed`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from processor.restore.archive import Chunk
from processor.restore.state import DEFAULT_MAX_BATCH_BYTES
from processor.segment.entries_v2 import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    BATCH_HEADER,
    batch_record_views,
    new_batch_builder,
)


@dataclass(frozen=True, slots=True)
class Outgoing:
    """A record batch for the target, and the source offsets of its records in order."""

    batch: bytes | bytearray | memoryview
    count: int
    sources: range | list[int]
    archived: bool  # the archived batch itself (else written anew)


# (offset, timestamp, key, value, headers as a list of (name, value))
RecordTuple = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def outgoing_batches(chunk: Chunk, max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES) -> list[Outgoing]:
    """The batches that restore the chunk's records in ``[chunk.low, chunk.high)``, in order."""
    low, high = chunk.low, chunk.high
    out: list[Outgoing] = []
    for batch in chunk.batches:
        (base, _len, _epoch, _magic, _crc, attributes, delta, *_rest, count) = BATCH_HEADER.unpack_from(batch)
        if attributes & ATTR_CONTROL or count == 0:
            continue
        last = base + delta
        if last < low or base >= high:
            continue
        if (
            low <= base
            and last < high
            and count == delta + 1
            and not attributes & ATTR_LOG_APPEND_TIME
            and len(batch) <= max_batch_bytes
        ):
            out.append(Outgoing(batch, count, range(base, last + 1), True))
            continue
        records: list[RecordTuple] = [
            (r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in batch_record_views(batch)  # the archive reader checked the CRC
            if low <= r.offset < high
        ]
        out += encode_batches(records, attributes & ATTR_CODEC_MASK, max_batch_bytes)
    if chunk.records:  # decoded from format 1 blocks, in range already
        records = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in chunk.records]
        out += encode_batches(records, 0, max_batch_bytes)
    return out


def encode_batches(records: Sequence[RecordTuple], codec: int, max_batch_bytes: int) -> list[Outgoing]:
    """``records`` written into new batches of at most ``max_batch_bytes`` each (a single record
    larger than that gets a batch of its own; the target decides whether it takes it)."""
    out: list[Outgoing] = []
    builder: Any = None
    sources: list[int] = []
    for offset, timestamp, key, value, headers in records:
        if builder is not None and builder.append(len(sources), timestamp, key, value, headers) is not None:
            sources.append(offset)
            continue
        if builder is not None:
            out.append(_built(builder, sources))
        builder, sources = new_batch_builder(codec, max_batch_bytes), [offset]
        builder.append(0, timestamp, key, value, headers)
    if builder is not None:
        out.append(_built(builder, sources))
    return out


def _built(builder: Any, sources: list[int]) -> Outgoing:
    contiguous = sources[-1] - sources[0] + 1 == len(sources)
    return Outgoing(
        builder.build(), len(sources), range(sources[0], sources[-1] + 1) if contiguous else sources, False
    )
