"""Merges one partition's planned runs, under the claim its caller holds (the worker's own, or an
operator command's ``ADMIN`` claim). Per run, in this order:

1. read the sources and seal them into one segment (:mod:`processor.rewrite.merged_segment`);
2. copy it like any segment: COPY_SEGMENT_STARTED, data and index objects, COPY_SEGMENT_FINISHED
   naming the sources in ``supersedes``, confirmed accepted by the readers (from that record on
   they read the merged segment, in one step), then its manifest;
3. delete the sources by the proof anyone deletes them by: in the view read after that FINISHED, a
   served merge names them and its index, read back and verified, covers each of them
   (:meth:`~processor.lifecycle.segment_deleter.SegmentDeleter.proven_superseded`); then, for all
   of the run's proven sources together, a conditional DELETE_SEGMENT_STARTED each (published at
   once, each confirmed), their manifests, their other objects, their FINISHED records
   (:meth:`~processor.lifecycle.segment_deleter.SegmentDeleter.delete_segments`). A source the
   view serves again (the merge's deletion started meanwhile: retention, or a forged record its
   holder undoes) is kept.

Killed anywhere: before 2's FINISHED is accepted, the sources are still served and the attempt is a
dangling copy the owner removes; after it, the merged segment is served and the sources are
garbage the owner's next pass deletes (``PartitionRemoteState.rewritten``), which is also what a
run of the command does first. Nothing acknowledged is unserved at any point.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from processor.errors import ProcessorError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.rewrite.merge_plan import MergeLimits, MergeRun, plan_merges
from processor.rewrite.ports import Copier, DeleteSuperseded, delete_leftovers
from processor.segment.sealed_segment import SealedSegment

log = logging.getLogger(__name__)


@dataclass
class MergeReport:
    tp: TopicPartition
    segments_before: int = 0  # served segments before
    runs: int = 0  # runs merged
    merged_segments: int = 0  # sources merged away
    merged_bytes: int = 0
    leftovers_deleted: int = 0  # sources an earlier merge superseded, deleted now
    failed: list[str] = field(default_factory=list)

    @property
    def segments_after(self) -> int:
        return self.segments_before - self.merged_segments + self.runs


def merge_candidates(part: PartitionRemoteState) -> list[RemoteLogSegmentMetadata]:
    """A partition's served segments a merge may take: not the sources of a rewrite being deleted (a
    forged delete's holder serves that rewrite again, which takes them over once more), nor those
    wholly below the remote log start offset (expired: retention deletes them; merged, their records
    would live on in a segment of their own)."""
    waiting = part.named_by_deleting_rewrites()
    start = part.log_start_offset
    return [s for s in part.finished() if s.segment_id.id not in waiting and s.end_offset >= start]


def planned_runs(part: PartitionRemoteState, limits: MergeLimits, now_ms: int) -> list[MergeRun]:
    """The runs to merge of a partition's :func:`merge_candidates`."""
    return plan_merges(merge_candidates(part), limits, now_ms)


def merge_partition(
    tp: TopicPartition,
    state: Callable[[], PartitionRemoteState],
    epoch: int,
    limits: MergeLimits,
    now_ms: int,
    build: Callable[[MergeRun], SealedSegment],
    copier: Copier,
    delete: DeleteSuperseded,
    dry_run: bool = False,
    max_runs: int | None = None,
) -> tuple[MergeReport, list[MergeRun]]:
    """Merge ``tp``'s runs under claim ``epoch``; ``state`` is the fold's view of the partition,
    current (it is asked again after each run); ``max_runs``: at most that many runs now (a worker
    merges a few at a time, between its other work). Raises FencedWriterError when the claim is lost."""
    part = state()
    report = MergeReport(tp, segments_before=len(part.finished()))
    runs = planned_runs(part, limits, now_ms)[:max_runs]
    if dry_run:
        return report, runs
    report.leftovers_deleted, errors = delete_leftovers(tp, part, epoch, delete)
    report.failed += errors
    for run in runs:
        try:
            sealed = build(run)
        except ProcessorError as exc:  # a source that does not read back: left as it is, reported
            log.error("%s: not merging %d..%d: %s", tp, run.start_offset, run.end_offset, exc)
            report.failed.append(f"{run.start_offset}..{run.end_offset}: {exc}")
            continue
        ids = tuple(s.segment_id.id for s in run.segments)
        merged = copier.copy(tp, sealed, epoch, supersedes=ids)
        log.info(
            "%s: merged %d segments (%d..%d, %d bytes) into %s",
            tp,
            len(run.segments),
            run.start_offset,
            run.end_offset,
            run.size_bytes,
            merged.segment_id,
        )
        report.runs += 1
        report.merged_segments += len(run.segments)
        report.merged_bytes += run.size_bytes
        # its own sources, by the same proof as anyone's: the view after its FINISHED was confirmed
        # (a source the view serves again, its merge's deletion started meanwhile, is no garbage) and
        # the merged segment's content read back from the bucket
        report.failed += delete(tp, run.segments, epoch, state())
    return report, runs
