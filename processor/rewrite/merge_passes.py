"""Merging under a claim, written once for both callers: ``processor merge`` (an operator claim it
takes and releases around :func:`merge_claimed`) and the worker (the claims it holds on the
partitions it leads, :class:`WorkerMerges`, a few runs per partition and pass).

A lost claim (FencedWriterError) ends that partition's merge and is reported as a failure of it;
the worker then hands the partition to ``on_fenced`` (it stops writing it) when the fold shows
another claim. Built from the settings in processor/wiring/rewrite.py.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from processor.errors import FencedWriterError, ProcessorError
from processor.kafka.partition import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.rewrite.merge_plan import MergeLimits, MergeRun
from processor.rewrite.merge_runner import MergeReport, merge_partition
from processor.rewrite.ports import Copier, DeleteSuperseded
from processor.segment.sealed_segment import SealedSegment

log = logging.getLogger(__name__)

# At most this many runs per partition and pass: a worker merges between its retention passes, and a
# partition with a year of small segments is merged over many passes, not in one that blocks the rest.
MERGE_RUNS_PER_PASS = 4


@dataclass
class MergeTools:
    """What a merge writes with: the run's sources sealed as one segment, the copier that publishes it
    naming them, and the deleter of the sources it supersedes."""

    build: Callable[[MergeRun], SealedSegment]
    copier: Copier
    delete: DeleteSuperseded


def merge_claimed(
    tp: TopicPartition,
    state: Callable[[], PartitionRemoteState],
    epoch: int,
    limits: MergeLimits,
    now_ms: int,
    tools: MergeTools,
    max_runs: int | None = None,
) -> tuple[MergeReport, list[MergeRun], bool]:
    """Merge ``tp``'s runs under the claim ``epoch`` the caller holds: (the report, the runs merged,
    whether the claim was lost). A lost claim stops the merge; the report names it as failed."""
    try:
        report, merged = merge_partition(
            tp, state, epoch, limits, now_ms, tools.build, tools.copier, tools.delete, max_runs=max_runs
        )
    except FencedWriterError as exc:
        log.warning("merging %s stopped: %s", tp, exc)
        return MergeReport(tp, segments_before=len(state().finished()), failed=[str(exc)]), [], True
    return report, merged, False


class WorkerMerges:
    """The worker's automatic merges (PROCESSOR_MERGE_CHECK_MS > 0): the partitions it leads, under
    the claims it holds, with the leader's own copier (its copies in flight are known to retention)
    and the retention pass's deleter. Run on the retention timer after the pass, never beside it."""

    def __init__(
        self,
        limits: MergeLimits,
        every_s: float,
        tools: MergeTools,
        state: Callable[[TopicPartition], PartitionRemoteState],
        on_fenced: Callable[[list[TopicPartition]], None],
    ) -> None:
        self.limits, self.every_s, self.tools = limits, every_s, tools
        self.state, self.on_fenced = state, on_fenced
        self._last = time.monotonic()  # the first merges one interval after the start

    def due(self) -> bool:
        return self.every_s > 0 and time.monotonic() - self._last >= self.every_s

    def run_once(self, led: Mapping[TopicPartition, int]) -> list[MergeReport]:
        self._last = time.monotonic()
        reports = []
        for tp, epoch in sorted(led.items()):
            if self.state(tp).current_epoch != epoch:
                continue  # not (or no longer) this worker's: the retention pass says so
            state = functools.partial(self.state, tp)
            try:
                now = int(time.time() * 1000)
                report, _runs, fenced = merge_claimed(
                    tp, state, epoch, self.limits, now, self.tools, MERGE_RUNS_PER_PASS
                )
            except ProcessorError as exc:  # S3 or Kafka: the next pass tries again
                log.warning("merging %s failed: %s", tp, exc)
                continue
            if fenced:
                if self.state(tp).current_epoch != epoch:
                    self.on_fenced([tp])
                continue
            if report.runs or report.failed:
                log.info(
                    "%s: %d segments merged into %d (%d failed)",
                    tp,
                    report.merged_segments,
                    report.runs,
                    len(report.failed),
                )
            reports.append(report)
        return reports
