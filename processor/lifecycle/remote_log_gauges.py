"""The remote log's size and delete lag, as gauges, from what each retention pass saw.

Kafka reports these per topic (KIP-963 ``RemoteLogSizeBytes``, ``RemoteLogMetadataCount``) and per
partition (``RemoteDeleteLagBytes``/``Segments``). Here only the leader of a partition runs its
retention pass, so each worker sets the figures of the partitions it leads: the per-topic gauges
hold this worker's share (sum them over the workers for the topic), and a partition (or a whole
topic) this worker stopped leading is dropped at the end of the next pass.

Size and count are the served finished segments (what a remote read can return); the delete lag is
what the pass planned to delete (expired, dangling, queued retries) and did not delete.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict

from processor import metrics
from processor.kafka.partition import TopicPartition
from processor.lifecycle.ports import DeletionOutcome
from processor.lifecycle.retention_policy import RetentionPlan
from processor.metadata.remote_log_state import PartitionRemoteState


class RemoteLogGauges:
    def __init__(self) -> None:
        self._topics: set[str] = set()
        self._partitions: set[TopicPartition] = set()
        self._pass_sizes: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self._pass_partitions: set[TopicPartition] = set()

    def partition(
        self,
        tp: TopicPartition,
        state: PartitionRemoteState,
        plan: RetentionPlan | None,
        outcome: DeletionOutcome | None,
    ) -> None:
        """Record one led partition of the current pass (``plan`` None: nothing to delete)."""
        deleted = set() if outcome is None else {s.segment_id.id for s in outcome.deleted}
        served = [state.segments[sid] for sid in state.served if sid in state.segments and sid not in deleted]
        size = self._pass_sizes[tp.topic]
        size[0] += sum(s.segment_size_in_bytes for s in served)
        size[1] += len(served)
        eligible = {} if plan is None else {s.segment_id.id: s for s, _ in plan.expired}
        if plan is not None:
            eligible.update({s.segment_id.id: s for s in (*plan.dangling, *plan.requeue)})
        for sid in deleted:
            eligible.pop(sid, None)
        labels = (tp.topic, str(tp.partition))
        metrics.DELETE_LAG_BYTES.labels(*labels).set(sum(s.segment_size_in_bytes for s in eligible.values()))
        metrics.DELETE_LAG_SEGMENTS.labels(*labels).set(len(eligible))
        self._pass_partitions.add(tp)

    def publish(self) -> None:
        """End of a pass: set the per-topic figures, drop what this worker no longer leads."""
        for topic, (size_bytes, segments) in self._pass_sizes.items():
            metrics.REMOTE_LOG_SIZE_BYTES.labels(topic).set(size_bytes)
            metrics.REMOTE_LOG_SEGMENTS.labels(topic).set(segments)
        for topic in self._topics - set(self._pass_sizes):
            for gauge in (metrics.REMOTE_LOG_SIZE_BYTES, metrics.REMOTE_LOG_SEGMENTS):
                with contextlib.suppress(KeyError):
                    gauge.remove(topic)
        for tp in self._partitions - self._pass_partitions:
            for gauge in (metrics.DELETE_LAG_BYTES, metrics.DELETE_LAG_SEGMENTS):
                with contextlib.suppress(KeyError):
                    gauge.remove(tp.topic, str(tp.partition))
        self._topics = set(self._pass_sizes)
        self._partitions = self._pass_partitions
        self._pass_sizes = defaultdict(lambda: [0, 0])
        self._pass_partitions = set()
