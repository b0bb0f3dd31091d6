"""Where a newly assigned partition resumes, and with which writer epoch.

On every assignment the worker

1. asks the broker for the current topic ids (a topic deleted and re-created under the same name has
   a new id, so it is a new partition history: the old id's segments do not count);
2. builds each partition's remote state from its own follower cache when the follower is caught up
   with the metadata partitions involved (their high watermarks as of now), and otherwise by reading
   those metadata partitions from the start (the slow path of a worker without a follower);
3. picks the writer epoch: the group generation, or newer than any epoch seen for the partitions
   (a group that emptied restarts its generations, an epoch must never go back);
4. stamps the cleanup records (dangling copies and deletes, superseded segments) with that epoch.

The offload engine calls the planner as its ``RemoteStateLoader``; ``prepare`` runs first (from the
rebalance callback) so the epoch is known before the engine is told to lead.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from processor.leader.ports import CachedRemoteState
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState

log = logging.getLogger(__name__)

TopicIdSource = Callable[[list[str]], dict[str, str]]
MetadataLoader = Callable[[list[TopicPartition]], dict[TopicPartition, PartitionRemoteState]]


class ResumePlanner:
    def __init__(
        self,
        worker_id: str,
        metadata_partitions: int,
        load_from_topic: MetadataLoader,
        topic_id_source: TopicIdSource,
        follower: CachedRemoteState | None = None,
        catch_up_timeout_s: float = 10.0,
    ) -> None:
        self.worker_id = worker_id
        self.metadata_partitions = metadata_partitions
        self._load_from_topic = load_from_topic
        self._topic_id_source = topic_id_source
        self.follower = follower
        self._catch_up_timeout_s = catch_up_timeout_s
        self.topic_ids: dict[str, str] = {}  # shared with the copier, which names objects by it
        self._prepared: dict[TopicPartition, PartitionRemoteState] = {}
        self._lock = threading.Lock()
        self.resumed_from_cache = 0
        self.resumed_from_topic = 0

    def refresh_topic_ids(self, topics: list[str]) -> None:
        found = self._topic_id_source(sorted(set(topics)))
        for topic in topics:
            new = found.get(topic)
            old = self.topic_ids.get(topic)
            if new is None:
                self.topic_ids.pop(topic, None)
            elif new != old:
                if old is not None:
                    log.warning(
                        "topic %s was re-created (id %s, was %s): a new history begins", topic, new, old
                    )
                self.topic_ids[topic] = new

    def _states(self, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        parts = sorted({metadata_partition_for(tp, self.metadata_partitions) for tp in tps})
        f = self.follower
        follows_topics = f is not None and (
            f.source_topics is None or {tp.topic for tp in tps} <= set(f.source_topics)
        )
        if f is not None and follows_topics and f.wait_caught_up(parts, self._catch_up_timeout_s):
            self.resumed_from_cache += len(tps)
            log.info("resuming %d partitions from the follower cache", len(tps))
            return {tp: f.remote_state(tp) for tp in tps}
        self.resumed_from_topic += len(tps)
        log.info("resuming %d partitions from the metadata topic (metadata partitions %s)", len(tps), parts)
        return self._load_from_topic(tps)

    def prepare(self, tps: list[TopicPartition], generation: int) -> int:
        """Load the partitions' remote state and return the writer epoch to lead them with."""
        if not tps:
            return max(generation, 0)
        self.refresh_topic_ids([tp.topic for tp in tps])
        states = self._states(tps)
        epoch = max([max(generation, 0)] + [s.next_writer_epoch(generation) for s in states.values()])
        for tp, state in states.items():
            state.current_topic_id = self.topic_ids.get(tp.topic)
            state.cleanup_epoch = epoch
            state.cleanup_writer = self.worker_id
        with self._lock:
            self._prepared.update(states)
        return epoch

    def __call__(self, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        """The engine's RemoteStateLoader: what ``prepare`` loaded, or a fresh load."""
        with self._lock:
            out = {tp: self._prepared.pop(tp) for tp in tps if tp in self._prepared}
        missing = [tp for tp in tps if tp not in out]
        if missing:
            self.refresh_topic_ids([tp.topic for tp in missing])
            for tp, state in self._states(missing).items():
                state.current_topic_id = self.topic_ids.get(tp.topic)
                out[tp] = state
        return out
