"""Remote retention: which segments of a partition to delete, in Kafka's order. Pure.

Kafka's RemoteLogManager expiration pass, condensed (see shared/reference/lifecycle-facts.md):

- Segments in DELETE_SEGMENT_STARTED are queued again: a delete that failed is retried every pass.
- The partition's COPY_SEGMENT_FINISHED segments are walked by start offset; the walk stops at the
  first one that breaches nothing, and at a copy still in progress.
- Breaches: the remote log start offset (the segment ends below it: retention or delete-before moved
  it), time (the segment's anchor timestamp <= now - retention.ms) and size (the data bytes of the
  finished segments, each counted once, are above retention.bytes; the oldest go first).
- The remote log start offset moves to the largest end + 1 of the segments about to go *before*
  anything is deleted, so readers never see a hole being made.

Time anchor: a segment's max record timestamp, unless that lies in the future (a producer's clock,
or a bad record): then the segment's upload time (the event timestamp of its COPY_SEGMENT_FINISHED).
Otherwise one future timestamp would keep the segment, and everything after it, forever (KAFKA-20609).

Size, unlike Kafka: Kafka counts the local log too and never deletes a segment that would take the
total below retention.bytes; here only remote data counts (the source cluster keeps its own
retention), and the oldest segments go until the remote total is at or below the limit.

Copies in progress: a COPY_SEGMENT_STARTED is in progress only if it carries the partition's current
claim epoch (the planning leader's own) and the leader has it in flight: it stops the pass. Any other
COPY_SEGMENT_STARTED can never finish (an older claim's records are rejected; the leader's own attempt
that is not in flight failed) and is deleted as "dangling" without stopping the walk (KAFKA-17062).
For partitions without claims (written by versions before claims), a COPY_SEGMENT_STARTED that starts
at or below the highest finished end is dangling and any other is taken as in progress.

Finished segments that are not served (a retired topic id's, or superseded before claims existed)
are not Kafka's "unreferenced" segments to delete here: they are acknowledged data a disaster
recovery may restore from, so the plan lists them (``unserved``) and nothing deletes them but an
operator naming their topic id (processor/metadata/deletion_proof.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Set
from dataclasses import dataclass
from enum import StrEnum

from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState

UNLIMITED = -1


class DeleteReason(StrEnum):
    """Why a segment is deleted; the ``reason`` label of processor_remote_segments_deleted_total."""

    LOG_START_OFFSET = "log_start_offset"
    TIME = "time"
    SIZE = "size"
    DANGLING = "dangling"
    RETRY = "retry"
    TOPIC_DELETED = "topic_deleted"
    REWRITTEN = "rewritten"  # superseded by a served rewrite (a merge, an erase)
    UNREADABLE = "unreadable"  # a served rewrite whose objects are not in the bucket (forged)


@dataclass(frozen=True, slots=True)
class RetentionLimits:
    """A topic's remote retention; -1 (UNLIMITED) disables a limit, like Kafka's retention.ms=-1."""

    retention_ms: int = UNLIMITED
    retention_bytes: int = UNLIMITED

    def __post_init__(self) -> None:
        if self.retention_ms < UNLIMITED or self.retention_bytes < UNLIMITED:
            raise ValueError(f"retention limits must be -1 (unlimited) or >= 0, got {self}")

    @property
    def unlimited(self) -> bool:
        return self.retention_ms == UNLIMITED and self.retention_bytes == UNLIMITED


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    """What one pass does for one partition, in this order: publish ``new_log_start_offset`` (when
    not None), retry ``requeue``, delete ``dangling``, then delete ``expired`` oldest first."""

    expired: tuple[tuple[RemoteLogSegmentMetadata, DeleteReason], ...] = ()
    requeue: tuple[RemoteLogSegmentMetadata, ...] = ()
    dangling: tuple[RemoteLogSegmentMetadata, ...] = ()
    new_log_start_offset: int | None = None
    unserved: tuple[RemoteLogSegmentMetadata, ...] = ()  # finished, not served: kept, reported

    @property
    def empty(self) -> bool:
        return not (self.expired or self.requeue or self.dangling) and self.new_log_start_offset is None


def time_anchor_ms(segment: RemoteLogSegmentMetadata, now_ms: int) -> int:
    """The timestamp time retention counts from: the max record timestamp, or the upload time when
    that is in the future (or missing)."""
    if 0 <= segment.max_timestamp_ms <= now_ms:
        return segment.max_timestamp_ms
    return segment.event_timestamp_ms


def plan_retention(
    segments: Iterable[RemoteLogSegmentMetadata],
    limits: RetentionLimits,
    now_ms: int,
    log_start_offset: int = 0,
    requested_start_offset: int | None = None,
    served: Set[uuid.UUID] | None = None,
    current_epoch: int | None = None,
    in_flight: Set[uuid.UUID] = frozenset(),
    rewritten: Set[uuid.UUID] = frozenset(),
) -> RetentionPlan:
    """Plan one retention pass over one partition's segments (any states).

    ``log_start_offset`` is the partition's current remote log start offset; ``requested_start_offset``
    a new one asked for (delete-before). Neither ever moves back. ``served``: the ids of the finished
    segments readers serve (see processor/metadata/fold_rules.py); a finished segment outside it is kept and
    listed in ``unserved``, without counting towards size. None: every finished segment is
    served. ``current_epoch``: the planning leader's claim epoch (None: the partition has no claims);
    ``in_flight``: the ids of the copies the leader has in progress. ``rewritten``: finished
    segments a served rewrite supersedes (the owner's proof, ``PartitionRemoteState.rewrite_superseded``):
    deleted (``rewritten``), not kept as unserved, and moving no start offset.
    """
    by_id = {s.segment_id.id: s for s in segments}  # each segment once
    ordered = sorted(by_id.values(), key=lambda s: (s.start_offset, s.end_offset, str(s.segment_id.id)))
    unreferenced = [
        s
        for s in ordered
        if s.state is SegmentState.COPY_SEGMENT_FINISHED
        and served is not None
        and s.segment_id.id not in served
    ]
    superseded = [s for s in unreferenced if s.segment_id.id in rewritten]
    unreferenced = [s for s in unreferenced if s.segment_id.id not in rewritten]
    ordered = [s for s in ordered if s not in unreferenced and s not in superseded]
    finished = [s for s in ordered if s.state is SegmentState.COPY_SEGMENT_FINISHED]
    highest_finished = max((s.end_offset for s in finished), default=-1)
    requeue = tuple(s for s in ordered if s.state is SegmentState.DELETE_SEGMENT_STARTED)

    target_start = max(log_start_offset, requested_start_offset or 0)
    cutoff = now_ms - limits.retention_ms if limits.retention_ms != UNLIMITED else None
    remaining_bytes = sum(s.segment_size_in_bytes for s in finished)

    expired: list[tuple[RemoteLogSegmentMetadata, DeleteReason]] = []
    dangling: list[RemoteLogSegmentMetadata] = []
    walking = True  # until the first finished segment that breaches nothing
    for s in ordered:
        if s.state is SegmentState.COPY_SEGMENT_STARTED:
            if current_epoch is not None:
                # under claims a copy can finish only if it is the claim holder's and in flight;
                # every other one is dangling wherever it lies, and none stops the walk
                if s.writer_epoch != current_epoch or s.segment_id.id not in in_flight:
                    dangling.append(s)
                continue
            if s.start_offset <= highest_finished:
                dangling.append(s)
                continue
            break  # a copy in progress: nothing after it is looked at
        if s.state is not SegmentState.COPY_SEGMENT_FINISHED:
            continue
        if walking:
            reason = breach(s, limits, now_ms, target_start, cutoff, remaining_bytes)
            if reason is None:
                walking = False
                if current_epoch is None:
                    break
                continue
            expired.append((s, reason))
            remaining_bytes -= s.segment_size_in_bytes

    new_start = max([target_start] + [s.end_offset + 1 for s, _ in expired])
    return RetentionPlan(
        # superseded first: a view that lags the owner's own deletions of them makes the first one's
        # conditional DELETE_SEGMENT_STARTED fail, which stops the pass before retention deleted any
        expired=(*((s, DeleteReason.REWRITTEN) for s in superseded), *expired),
        requeue=requeue,
        dangling=tuple(dangling),
        new_log_start_offset=new_start if new_start > log_start_offset else None,
        unserved=tuple(unreferenced),
    )


def breach(
    segment: RemoteLogSegmentMetadata,
    limits: RetentionLimits,
    now_ms: int,
    target_start: int,
    cutoff_ms: int | None,
    remaining_bytes: int,
) -> DeleteReason | None:
    """The first limit ``segment`` breaches, or None."""
    if segment.end_offset < target_start:
        return DeleteReason.LOG_START_OFFSET
    if cutoff_ms is not None and time_anchor_ms(segment, now_ms) <= cutoff_ms:
        return DeleteReason.TIME
    if limits.retention_bytes != UNLIMITED and remaining_bytes > limits.retention_bytes:
        return DeleteReason.SIZE
    return None
