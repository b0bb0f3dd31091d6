"""Planning reads of the archive: which segments, which blocks, which offsets. Driver side.

The catalog is the metadata topic folded into finished segments (the project's own fold, through
the KIP-405 state machine). Each finished segment's index object tells which blocks hold an offset
or time range, so a query over a range fetches only those blocks; one input partition per segment,
split into runs of consecutive blocks of at most ``partition_bytes`` for large segments.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from processor.errors import ProcessorError
from processor.metadata.model import RemoteLogSegmentMetadata, TopicPartition
from processor.metadata.topic_io import load_remote_state
from processor.reader.segment_blocks import read_block_range, read_segment_index
from processor.segment.block_header import BlockInfo
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.options import EARLIEST, LATEST, Connection, OffsetSpec, RecordOptions
from processor.storage.chunk_storage import ChunkStorage

Catalog = dict[TopicPartition, list[RemoteLogSegmentMetadata]]  # finished segments in offset order


class DataLossError(ProcessorError):
    """Offsets a read asked for are not in the archive (failOnDataLoss=true)."""


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


@dataclass(frozen=True, slots=True)
class LiveSlice:
    """Offsets ``[from_offset, until_offset)`` of a partition read from the live topic (tail=live)."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int


def load_catalog(conn: Connection, options: RecordOptions) -> Catalog:
    state, _skipped = load_remote_state(conn.kafka, conn.metadata_topic)
    catalog: Catalog = {}
    for tp, part in state.partitions.items():
        if options.wants(tp.topic, tp.partition):
            finished = part.finished()
            if finished:
                catalog[tp] = finished
    return dict(sorted(catalog.items()))


def archive_bounds(segments: list[RemoteLogSegmentMetadata]) -> tuple[int, int]:
    """(earliest offset, next offset after the archive's end)."""
    return segments[0].start_offset, max(s.end_offset for s in segments) + 1


def resolve_offsets(
    spec: OffsetSpec,
    catalog: Catalog,
    default: str,
    live_ends: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, int]:
    """Offsets per partition for ``earliest``/``latest``/JSON (-2/-1 inside JSON mean the same)."""
    out: dict[TopicPartition, int] = {}
    for tp, segments in catalog.items():
        first, end = archive_bounds(segments)
        if live_ends is not None and tp in live_ends:
            end = max(end, live_ends[tp])
        wanted: int = EARLIEST if default == "earliest" else LATEST
        if isinstance(spec, str):
            wanted = EARLIEST if spec == "earliest" else LATEST
        elif tp.topic in spec:
            if tp.partition not in spec[tp.topic]:
                continue  # a JSON spec names the partitions it reads
            wanted = spec[tp.topic][tp.partition]
        elif isinstance(spec, dict) and spec:
            continue
        out[tp] = first if wanted == EARLIEST else end if wanted == LATEST else wanted
    return out


def read_indexes(
    storage: ChunkStorage, keys: ObjectKeyFactory, segments: Iterable[RemoteLogSegmentMetadata]
) -> dict[str, SegmentIndex]:
    """Indexes of many segments, fetched in parallel (small objects: latency, not bandwidth, bound)."""
    todo = list(segments)
    with ThreadPoolExecutor(max_workers=8, thread_name_prefix="index-read") as pool:
        indexes = list(pool.map(lambda s: read_segment_index(storage, keys, s), todo))
    return {str(s.segment_id.id): idx for s, idx in zip(todo, indexes, strict=True)}


def offset_for_timestamp(
    storage: ChunkStorage, keys: ObjectKeyFactory, segments: list[RemoteLogSegmentMetadata], timestamp: int
) -> int | None:
    """The first offset whose record timestamp is >= ``timestamp`` (Kafka's offsetsForTimes)."""
    for segment in segments:
        if segment.max_timestamp_ms < timestamp:
            continue
        index = read_segment_index(storage, keys, segment)
        number = index.block_for_timestamp(timestamp)
        if number is None:
            continue
        block = index.blocks[number]
        for records in read_block_range(
            storage, segment.data_object_key, str(segment.segment_id), [block], number
        ):
            for record in records:
                if record.timestamp >= timestamp:
                    return record.offset
    return None


def _check_coverage(
    tp: TopicPartition, segments: list[RemoteLogSegmentMetadata], lo: int, hi: int, fail: bool
) -> None:
    if not fail or lo >= hi:
        return
    expected = lo
    for s in segments:
        if s.end_offset < expected:
            continue
        if s.start_offset > expected and expected < hi:
            raise DataLossError(
                f"offsets {expected}..{min(s.start_offset, hi) - 1} of {tp} are not in the archive "
                "(set failOnDataLoss=false to skip them)"
            )
        expected = s.end_offset + 1
        if expected >= hi:
            return
    if expected < hi:
        raise DataLossError(
            f"offsets {expected}..{hi - 1} of {tp} are not in the archive "
            "(set failOnDataLoss=false to skip them)"
        )


def plan_partition(
    tp: TopicPartition,
    segments: list[RemoteLogSegmentMetadata],
    indexes: Mapping[str, SegmentIndex],
    lo: int,
    hi: int,
    *,
    min_ts: int | None = None,
    max_ts: int | None = None,
    partition_bytes: int,
    fail_on_data_loss: bool = True,
) -> list[SegmentSlice]:
    """Slices reading offsets ``[lo, hi)`` of one partition (each offset from one segment only)."""
    _check_coverage(tp, segments, lo, hi, fail_on_data_loss)
    slices: list[SegmentSlice] = []
    covered = lo  # offsets below this are already planned (guards against overlapping segments)
    for segment in segments:
        seg_lo, seg_hi = max(covered, segment.start_offset), min(hi, segment.end_offset + 1)
        if seg_lo >= seg_hi:
            continue
        covered = seg_hi
        if min_ts is not None and segment.max_timestamp_ms < min_ts:
            continue
        index = indexes[str(segment.segment_id.id)]
        chosen = [
            (n, b)
            for n, b in enumerate(index.blocks)
            if b.last_offset >= seg_lo
            and b.first_offset < seg_hi
            and (min_ts is None or b.max_timestamp >= min_ts)
            and (max_ts is None or b.min_timestamp <= max_ts)
        ]
        # runs of consecutive block numbers, each cut at partition_bytes
        for _, run_iter in itertools.groupby(enumerate(chosen), key=lambda x: x[1][0] - x[0]):
            run = [nb for _, nb in run_iter]
            start = 0
            size = 0
            for i, (_, block) in enumerate(run):
                if size and size + block.length > partition_bytes:
                    slices.append(_slice(tp, segment, run[start:i], seg_lo, seg_hi, min_ts, max_ts))
                    start, size = i, 0
                size += block.length
            slices.append(_slice(tp, segment, run[start:], seg_lo, seg_hi, min_ts, max_ts))
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
        from_offset=lo,
        until_offset=hi,
        min_timestamp=min_ts,
        max_timestamp=max_ts,
    )
