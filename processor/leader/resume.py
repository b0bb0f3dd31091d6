"""Where newly assigned partitions resume, under which claim.

On every assignment the worker

1. asks the broker for the current topic ids (a topic deleted and re-created under the same name has
   a new id, so it is a new partition history: the old id's segments do not count);
2. **claims** each new partition: appends a ``PartitionClaim`` to its metadata partition; the claim's
   offset there is the worker's epoch for the partition (processor/metadata/fold.py);
3. reads back to its claims: from its own follower cache once the follower has applied them (the
   metadata partitions' high watermarks as of now), or, without a follower, by folding those
   metadata partitions from the start;
4. keeps the partitions whose current claim is its own at that point (a claim made after it by
   another worker wins, and this worker does not lead that partition), and resumes each after the
   highest offset the fold serves, the cleanup records (dangling copies and deletes) stamped with
   the partition's claim epoch.

The offload engine calls the planner as its ``RemoteStateLoader``; ``prepare`` runs first (from the
rebalance callback) so the claims are known before the engine is told to lead.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable

from processor.leader.ports import CachedRemoteState
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import ClaimKind, PartitionClaim, TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.sink import MetadataSink

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
        claims: MetadataSink,
        follower: CachedRemoteState | None = None,
        catch_up_timeout_s: float = 10.0,
    ) -> None:
        self.claims = claims
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

    def prepare(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        """Claim ``tps``, read back to the claims, and return the claim epoch of each partition
        this worker now holds (partitions another claim took meanwhile are left out)."""
        if not tps:
            return {}
        self.refresh_topic_ids([tp.topic for tp in tps])
        offsets = {
            tp: self.claims.publish(
                PartitionClaim(
                    tp,
                    uuid.uuid4(),
                    ClaimKind.LEAD,
                    self.worker_id,
                    int(time.time() * 1000),
                    self.topic_ids.get(tp.topic),
                )
            )
            for tp in tps
        }
        states = self._states(tps)
        held: dict[TopicPartition, int] = {}
        for tp, state in states.items():
            if state.current_epoch != offsets[tp]:
                log.warning(
                    "%s: claimed at %d, but the current claim is %s: another worker leads it",
                    tp,
                    offsets[tp],
                    state.current_epoch,
                )
                continue
            state.current_topic_id = self.topic_ids.get(tp.topic)
            held[tp] = offsets[tp]
        with self._lock:
            self._prepared.update({tp: states[tp] for tp in held})
        return held

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
