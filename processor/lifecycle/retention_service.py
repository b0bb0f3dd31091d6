"""The leader's retention pass: for each partition this worker leads, plan (pure) and delete (edge).

One pass: retry the deletion topic's pending entries of the led partitions, then for each led
partition plan with :func:`plan_retention` over the segments the view shows and carry the plan out.
A pass that cannot reach Kafka or whose deletions keep failing reports HEALTH "retention" (not fatal:
the data path is unaffected); a clean pass clears it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from processor.errors import ProcessorError
from processor.health import HEALTH
from processor.lifecycle.deletion_topic import DeletionTopic
from processor.lifecycle.remote_log_gauges import RemoteLogGauges
from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import plan_retention
from processor.lifecycle.segment_deleter import DeletionOutcome, SegmentDeleter
from processor.metadata.model import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState

log = logging.getLogger(__name__)

HEALTH_COMPONENT = "retention"
FAILED_PASSES_BEFORE_UNHEALTHY = 3
# Segments this worker finished deleting are skipped for a while: the follower cache may not show
# their DELETE_SEGMENT_FINISHED yet, and deleting them again would only add illegal records.
RECENTLY_DELETED_S = 600.0


class SegmentView(Protocol):
    """A partition's remote state: its segments (every state but DELETE_SEGMENT_FINISHED), the
    finished ones served, its remote log start offset and newest writer epoch."""

    def state(self, tp: TopicPartition) -> PartitionRemoteState: ...


class RemoteStateSource(Protocol):
    """The follower cache (processor/follower/metadata_cache.py), as the retention pass reads it."""

    def remote_state(self, tp: TopicPartition) -> PartitionRemoteState: ...


class CacheView:
    """The follower cache's view (the worker's own RocksDB materialization of the metadata topic)."""

    def __init__(self, cache: RemoteStateSource) -> None:
        self.cache = cache

    def state(self, tp: TopicPartition) -> PartitionRemoteState:
        return self.cache.remote_state(tp)


class StateView:
    """A folded snapshot of the metadata topic (the CLI, or a worker without a follower)."""

    def __init__(self, partitions: Mapping[TopicPartition, PartitionRemoteState]) -> None:
        self.partitions = partitions

    def state(self, tp: TopicPartition) -> PartitionRemoteState:
        return self.partitions.get(tp) or PartitionRemoteState()


@dataclass
class PassResult:
    outcome: DeletionOutcome = field(default_factory=DeletionOutcome)
    partitions: int = 0

    @property
    def ok(self) -> bool:
        return not self.outcome.failed


class RetentionService:
    def __init__(
        self,
        config: RetentionConfig,
        view: SegmentView,
        deleter: SegmentDeleter,
        deletion_topic: DeletionTopic | None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.config = config
        self.view = view
        self.deleter = deleter
        self.deletion_topic = deletion_topic
        self.clock_ms = clock_ms
        self.failed_passes = 0
        self._recently_deleted: dict[uuid.UUID, float] = {}
        self.gauges = RemoteLogGauges()

    def run_pass(self, led: Mapping[TopicPartition, int]) -> PassResult:
        """One pass over the led partitions (partition -> the writer epoch this worker holds)."""
        result = PassResult(partitions=len(led))
        try:
            if self.deletion_topic is not None and led:
                pending = self.deletion_topic.pending(set(led))
                for segment in pending:
                    tp = segment.topic_partition
                    epoch = max(led.get(tp, 0), self.view.state(tp).max_epoch)
                    result.outcome.merge(self.deleter.retry_failed([segment], epoch))
            now = self.clock_ms()
            self._forget_old(time.monotonic())
            for tp, led_epoch in sorted(led.items()):
                part = self.view.state(tp)
                segments = [
                    s for s in part.segments.values() if s.segment_id.id not in self._recently_deleted
                ]
                plan = plan_retention(
                    segments, self.config.limits(tp.topic), now, part.log_start_offset, served=part.served
                )
                if plan.empty:
                    self.gauges.partition(tp, part, None, None)
                    continue
                # the newest epoch seen for the partition: records of an older one would be fenced
                outcome = self.deleter.execute(tp, plan, max(led_epoch, part.max_epoch))
                for s in outcome.deleted:
                    self._recently_deleted[s.segment_id.id] = time.monotonic()
                result.outcome.merge(outcome)
                self.gauges.partition(tp, part, plan, outcome)
            self.gauges.publish()
        except ProcessorError as exc:
            self._failed(f"retention pass failed: {exc}")
            raise
        if result.ok:
            self.failed_passes = 0
            HEALTH.clear(HEALTH_COMPONENT)
        else:
            self._failed(f"{len(result.outcome.failed)} segment deletions failed; queued for retry")
        return result

    def _failed(self, reason: str) -> None:
        self.failed_passes += 1
        if self.failed_passes >= FAILED_PASSES_BEFORE_UNHEALTHY:
            HEALTH.report(HEALTH_COMPONENT, f"{reason} ({self.failed_passes} passes in a row)")

    def _forget_old(self, now: float) -> None:
        for sid, at in list(self._recently_deleted.items()):
            if now - at > RECENTLY_DELETED_S:
                del self._recently_deleted[sid]
