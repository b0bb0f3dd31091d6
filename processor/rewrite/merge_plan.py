"""Which runs of a partition's served segments to merge. Pure.

A quiet partition rolls by time into many small segments; each costs objects, requests and metadata
records, not bytes. A *run* is two or more served segments, adjacent in offsets (each starts where
the previous one ends + 1), each smaller than ``small_bytes``, each old enough (its upload at least
``min_age_ms`` ago, so the newest segments, which readers of the live tail may still be fetching, are
left alone), whose sizes add up to at most ``target_bytes``. Segments are taken greedily in offset
order: a segment that cannot join the current run (too big, too young, not adjacent, another format,
with transaction markers to index) ends it.

Only segments of block format 2 (whole Kafka record batches, sealed or not) are merged: a merge
carries the batches as stored. Format 1 segments (records re-encoded by earlier versions) and
segments with a transaction index are left as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from processor.metadata.model import RemoteLogSegmentMetadata

BATCH_FORMAT = 2  # segment_format_version of segments that store whole record batches


@dataclass(frozen=True, slots=True)
class MergeLimits:
    target_bytes: int  # a merged segment's size at most (the sum of its sources' sizes)
    small_bytes: int  # a segment at least this big is not merged
    min_age_ms: int  # a segment uploaded less than this long ago is not merged

    def __post_init__(self) -> None:
        if not 0 < self.small_bytes <= self.target_bytes:
            raise ValueError(
                f"merge sizes: need 0 < small ({self.small_bytes}) <= target ({self.target_bytes})"
            )
        if self.min_age_ms < 0:
            raise ValueError(f"merge minimum age {self.min_age_ms} ms is negative")


@dataclass(frozen=True, slots=True)
class MergeRun:
    segments: tuple[RemoteLogSegmentMetadata, ...]

    @property
    def start_offset(self) -> int:
        return self.segments[0].start_offset

    @property
    def end_offset(self) -> int:
        return self.segments[-1].end_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.segment_size_in_bytes for s in self.segments)

    @property
    def record_count(self) -> int:
        return sum(s.record_count for s in self.segments)


def mergeable(segment: RemoteLogSegmentMetadata, limits: MergeLimits, now_ms: int) -> bool:
    return (
        segment.segment_format_version == BATCH_FORMAT
        and segment.txn_index_empty
        and segment.segment_size_in_bytes < limits.small_bytes
        and now_ms - segment.event_timestamp_ms >= limits.min_age_ms
    )


def plan_merges(
    served: Iterable[RemoteLogSegmentMetadata], limits: MergeLimits, now_ms: int
) -> list[MergeRun]:
    """The runs to merge among a partition's served segments (any order; each id once)."""
    ordered = sorted({s.segment_id.id: s for s in served}.values(), key=lambda s: s.start_offset)
    runs: list[MergeRun] = []
    current: list[RemoteLogSegmentMetadata] = []
    size = 0

    def close() -> None:
        if len(current) >= 2:
            runs.append(MergeRun(tuple(current)))
        current.clear()

    for segment in ordered:
        if not mergeable(segment, limits, now_ms):
            close()
            size = 0
            continue
        adjacent = bool(current) and segment.start_offset == current[-1].end_offset + 1
        if current and (not adjacent or size + segment.segment_size_in_bytes > limits.target_bytes):
            close()
            size = 0
        current.append(segment)
        size += segment.segment_size_in_bytes
    close()
    return runs


@dataclass(frozen=True, slots=True)
class LeftAlone:
    """Why a partition's served segments are in no run, by reason (each segment counted once, under
    the first of these that keeps it out): what a dry run that merges little tells its user."""

    other_format: int = 0  # block format 1 (records re-encoded by earlier versions): never merged
    transactional: int = 0  # with a transaction index: never merged
    big: int = 0  # at least ``small_bytes``: big enough already
    young: int = 0  # small, but uploaded less than ``min_age_ms`` ago
    single: int = 0  # mergeable, but no mergeable neighbour to merge with (a run needs two)
    # how long ago the oldest of the young ones was uploaded (None: no young one)
    oldest_young_age_ms: int | None = field(default=None)

    @property
    def total(self) -> int:
        return self.other_format + self.transactional + self.big + self.young + self.single


def left_alone(
    served: Iterable[RemoteLogSegmentMetadata], runs: Iterable[MergeRun], limits: MergeLimits, now_ms: int
) -> LeftAlone:
    """Why each of ``served`` that is in none of ``runs`` (as :func:`plan_merges` made them) stays."""
    planned = {s.segment_id.id for run in runs for s in run.segments}
    counts = dict.fromkeys(("other_format", "transactional", "big", "young", "single"), 0)
    oldest: int | None = None
    for segment in {s.segment_id.id: s for s in served}.values():
        if segment.segment_id.id in planned:
            continue
        age = now_ms - segment.event_timestamp_ms
        if segment.segment_format_version != BATCH_FORMAT:
            counts["other_format"] += 1
        elif not segment.txn_index_empty:
            counts["transactional"] += 1
        elif segment.segment_size_in_bytes >= limits.small_bytes:
            counts["big"] += 1
        elif age < limits.min_age_ms:
            counts["young"] += 1
            oldest = age if oldest is None else max(oldest, age)
        else:
            counts["single"] += 1
    return LeftAlone(**counts, oldest_young_age_ms=oldest)
