"""Planning reads of the archive: which offsets come from which segment blocks, which from the live
topic, which are lost. Driver side; pure except ``read_indexes`` and ``archive_offset_for_timestamp``
(they take the storage).

A partition's range ``[lo, hi)`` is cut by ``cover`` into archived pieces (served segments, cut at
the remote log start offset), live pieces (with ``tail=live``: a hole in the archive, or the part
past its end, that the topic still holds) and lost pieces (neither has them). Archived pieces become
``SegmentSlice``s of consecutive blocks (the index says which blocks hold the offsets and times
asked for), at most ``partition_bytes`` each; ``divvy`` then applies Spark's ``maxRecordsPerPartition``
and ``minPartitions`` to the slices' offset ranges (``KafkaOffsetRangeCalculator``'s arithmetic).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from processor.errors import ProcessorError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata
from processor.reader.segment_blocks import fetch_index, read_block_range_columns
from processor.reader.segment_keys import NO_DECRYPTION, SegmentDecryption
from processor.segment.block_header import BlockInfo
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.fold_adapter import PartitionArchive
from processor.storage.chunk_storage import ChunkStorage

FAIL_ON_DATA_LOSS_HINT = (
    "Some data may have been lost because they are not available any more: retention removed them "
    "or the topic was deleted before all of it was processed. If you want your query to go on "
    'with a warning in such cases, set the source option "failOnDataLoss" to "false".'
)


class DataLossError(ProcessorError):
    """Offsets a read asked for are in neither the archive nor the topic (failOnDataLoss=true)."""


@dataclass(frozen=True, slots=True)
class SegmentSlice:
    """Consecutive blocks of one segment, and the offsets and times wanted from them."""

    topic: str
    partition: int
    segment_name: str
    data_object_key: str
    first_block: int
    blocks: tuple[BlockInfo, ...]
    from_offset: int
    until_offset: int  # exclusive
    min_timestamp: int | None = None
    max_timestamp: int | None = None
    # an encrypted segment's id and wrapped data key (its custom metadata), for the task to open it
    segment_id: RemoteLogSegmentId | None = None
    custom_metadata: bytes | None = None

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


@dataclass(frozen=True, slots=True)
class LiveSlice:
    """Offsets ``[from_offset, until_offset)`` of a partition read from the live topic (tail=live)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def tp(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)


Slice = SegmentSlice | LiveSlice


@dataclass(frozen=True, slots=True)
class Coverage:
    """Where the offsets of one range are: archived ``(lo, hi, segment)``, live ``(lo, hi)``, lost."""

    archived: tuple[tuple[int, int, RemoteLogSegmentMetadata], ...] = ()
    live: tuple[tuple[int, int], ...] = ()
    lost: tuple[tuple[int, int], ...] = ()


def cover(archive: PartitionArchive | None, lo: int, hi: int, live_low: int | None = None) -> Coverage:
    """Cut ``[lo, hi)`` into archived, live and lost pieces. ``live_low`` is the topic's log start
    offset with ``tail=live`` (None: the live topic is not read)."""
    archived: list[tuple[int, int, RemoteLogSegmentMetadata]] = []
    live: list[tuple[int, int]] = []
    lost: list[tuple[int, int]] = []

    def hole(a: int, b: int) -> None:
        if a >= b:
            return
        if live_low is None:
            lost.append((a, b))
            return
        if a < live_low:
            lost.append((a, min(b, live_low)))
        if max(a, live_low) < b:
            live.append((max(a, live_low), b))

    pos = lo
    for first, nxt, seg in archive.intervals() if archive is not None else ():
        if pos >= hi:
            break
        if nxt <= pos:
            continue
        hole(pos, min(first, hi))
        a, b = max(first, pos), min(nxt, hi)
        if a < b:
            archived.append((a, b, seg))
        pos = max(pos, b)
    hole(pos, hi)
    return Coverage(tuple(archived), tuple(live), tuple(lost))


def read_indexes(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    segments: Iterable[RemoteLogSegmentMetadata],
    decryption: SegmentDecryption = NO_DECRYPTION,
) -> dict[str, SegmentIndex]:
    """Indexes of many segments, fetched in parallel (small objects: latency, not bandwidth, bound)."""
    todo = list({str(s.segment_id.id): s for s in segments}.values())
    if not todo:
        return {}
    with ThreadPoolExecutor(max_workers=min(8, len(todo)), thread_name_prefix="index-read") as pool:
        indexes = list(pool.map(lambda s: fetch_index(storage, keys, s, cipher=decryption.cipher(s)), todo))
    return {str(s.segment_id.id): idx for s, idx in zip(todo, indexes, strict=True)}


def archive_offset_for_timestamp(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    archive: PartitionArchive,
    timestamp: int,
    decryption: SegmentDecryption = NO_DECRYPTION,
) -> int | None:
    """The first served offset whose record timestamp is >= ``timestamp`` (Kafka's offsetsForTimes:
    the earliest offset, in log order, at or after the time), or None."""
    for first, nxt, segment in archive.intervals():
        if segment.max_timestamp_ms < timestamp:
            continue
        cipher = decryption.cipher(segment)
        index = fetch_index(storage, keys, segment, cipher=cipher)
        start = index.block_for_timestamp(timestamp)
        if start is None:
            continue
        for number in range(start, len(index.blocks)):
            block = index.blocks[number]
            if block.max_timestamp < timestamp or block.last_offset < first:
                continue
            for cols in read_block_range_columns(
                storage,
                segment.data_object_key,
                str(segment.segment_id),
                [block],
                number,
                min_offset=first,
                max_offset=nxt - 1,
                cipher=cipher,
            ):
                for offset, ts in zip(cols.offsets, cols.timestamps, strict=True):
                    if ts >= timestamp:
                        return offset
    return None


def plan_archived(
    tp: TopicPartition,
    pieces: Sequence[tuple[int, int, RemoteLogSegmentMetadata]],
    indexes: dict[str, SegmentIndex],
    *,
    partition_bytes: int,
    min_ts: int | None = None,
    max_ts: int | None = None,
) -> list[SegmentSlice]:
    """Slices reading the archived pieces of one partition: runs of consecutive blocks holding the
    offsets (and, when pushed, the times) asked for, each at most ``partition_bytes``."""
    slices: list[SegmentSlice] = []
    for lo, hi, segment in pieces:
        if min_ts is not None and segment.max_timestamp_ms < min_ts:
            continue
        index = indexes[str(segment.segment_id.id)]
        chosen = [
            (n, b)
            for n, b in enumerate(index.blocks)
            if b.last_offset >= lo
            and b.first_offset < hi
            and (min_ts is None or b.max_timestamp >= min_ts)
            and (max_ts is None or b.min_timestamp <= max_ts)
        ]
        for _, run_iter in itertools.groupby(enumerate(chosen), key=lambda x: x[1][0] - x[0]):
            run = [nb for _, nb in run_iter]
            start = 0
            size = 0
            for i, (_, block) in enumerate(run):
                if size and size + block.length > partition_bytes:
                    slices.append(_slice(tp, segment, run[start:i], lo, hi, min_ts, max_ts))
                    start, size = i, 0
                size += block.length
            slices.append(_slice(tp, segment, run[start:], lo, hi, min_ts, max_ts))
    return slices


def _slice(
    tp: TopicPartition,
    segment: RemoteLogSegmentMetadata,
    run: list[tuple[int, BlockInfo]],
    lo: int,
    hi: int,
    min_ts: int | None,
    max_ts: int | None,
) -> SegmentSlice:
    return SegmentSlice(
        topic=tp.topic,
        partition=tp.partition,
        segment_name=str(segment.segment_id),
        data_object_key=segment.data_object_key,
        first_block=run[0][0],
        blocks=tuple(b for _, b in run),
        from_offset=max(lo, run[0][1].first_offset),
        until_offset=min(hi, run[-1][1].last_offset + 1),
        min_timestamp=min_ts,
        max_timestamp=max_ts,
        segment_id=segment.segment_id if segment.custom_metadata is not None else None,
        custom_metadata=segment.custom_metadata,
    )


def _size(piece: Slice) -> int:
    return piece.until_offset - piece.from_offset


def split_slice(piece: Slice, parts: int) -> list[Slice]:
    """``piece`` cut into ``parts`` offset ranges of (nearly) equal size; a segment slice's parts
    keep only the blocks their range needs."""
    size = _size(piece)
    parts = max(1, min(parts, size))
    out: list[Slice] = []
    remaining, start = size, piece.from_offset
    for part in range(parts):
        this = remaining // (parts - part)  # the last part takes the rounding, as Spark's does
        remaining -= this
        end = start + this
        if isinstance(piece, LiveSlice):
            out.append(replace(piece, from_offset=start, until_offset=end))
        else:
            keep = [i for i, b in enumerate(piece.blocks) if b.last_offset >= start and b.first_offset < end]
            if keep:
                out.append(
                    replace(
                        piece,
                        first_block=piece.first_block + keep[0],
                        blocks=piece.blocks[keep[0] : keep[-1] + 1],
                        from_offset=start,
                        until_offset=end,
                    )
                )
        start = end
    return out


def divvy(slices: Sequence[Slice], min_partitions: int | None, max_records: int | None) -> list[Slice]:
    """Spark's ``maxRecordsPerPartition`` (no task reads more offsets) then ``minPartitions`` (about
    that many tasks: large ranges are split in proportion to their share, as Spark's
    ``KafkaOffsetRangeCalculator`` does). Empty slices are dropped."""
    out: list[Slice] = [s for s in slices if _size(s) > 0]
    if max_records is not None:
        out = [p for s in out for p in split_slice(s, -(-_size(s) // max_records))]
    if min_partitions is None or len(out) >= min_partitions:
        return out
    total = sum(_size(s) for s in out)

    def part_count(size: int, of_total: int, parts: int) -> int:
        return max(round(size / of_total * parts), 1) if of_total else 1

    unsplit = [s for s in out if part_count(_size(s), total, min_partitions) == 1]
    split_total = total - sum(_size(s) for s in unsplit)
    split_parts = max(min_partitions - len(unsplit), 1)
    result: list[Slice] = []
    for s in out:
        if any(s is u for u in unsplit):
            result.append(s)
        else:
            result.extend(split_slice(s, part_count(_size(s), split_total, split_parts)))
    return [s for s in result if _size(s) > 0]


def describe_lost(tp: TopicPartition, lo: int, hi: int, why: str) -> str:
    return f"offsets {lo}..{hi - 1} of {tp} are {why}"
