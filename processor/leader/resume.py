"""Where newly assigned partitions resume, under which claim.

On every assignment the worker

1. asks the broker for the current topic ids (a topic deleted and re-created under the same name has
   a new id, so it is a new partition history: the old id's segments do not count). A topic whose id
   cannot be read (the lookup keeps failing: a timeout, the connection, authorization) is never taken
   for a topic without one: the id already known stays in the map shared with the copier, and the
   topic's new partitions are neither claimed nor led (``topic_ids`` health problem) until a later
   lookup works (the leadership claims them again: processor/leader/leadership.py);
2. **claims** each new partition: appends a ``PartitionClaim`` to its metadata partition; the claim's
   offset there is the worker's epoch for the partition (processor/metadata/fold_rules.py);
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
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from processor.errors import MetadataBehindBucketError, TopicIdUnknownError
from processor.health import HEALTH
from processor.kafka.partition import TopicPartition
from processor.leader.ports import CachedRemoteState
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import ClaimKind, PartitionClaim
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.sink import MetadataSink

log = logging.getLogger(__name__)

# the ids of the existing topics asked (absent: no such topic, or no id); raises TopicIdUnknownError
TopicIdSource = Callable[[list[str]], dict[str, str]]
HEALTH_COMPONENT = "topic_ids"
MetadataLoader = Callable[[list[TopicPartition]], dict[TopicPartition, PartitionRemoteState]]
# Whether the bucket holds segment manifests of a partition (in its folder of the given topic id):
# acknowledged data, whatever the metadata topic says.
ArchivedManifests = Callable[[TopicPartition, str | None], bool]
BEHIND_COMPONENT = "metadata_behind_bucket"
# Claims published and manifest folders listed at once on an assignment. Each is a round trip (a
# durable produce, an S3 LIST) and the assignment callback must end within the group's session
# timeout: one at a time, 2,000 new partitions took 10 s of claims and 16 s of LISTs and the worker
# was dropped from its group (10 s session) and rejoined. Below PARALLEL_MIN they run in turn. 8: the
# S3 client's connection pool holds 12 by default (PROCESSOR_S3_UPLOAD_CONCURRENCY + 4); 32 at once
# overflowed it ("Connection pool is full, discarding connection").
PARALLELISM = 8
PARALLEL_MIN = 8
K = TypeVar("K")
V = TypeVar("V")


def _each(fn: Callable[[K], V], items: Iterable[K]) -> dict[K, V]:
    """``fn`` of every item, several at a time when there are many; raises the first error."""
    todo = list(items)
    if len(todo) < PARALLEL_MIN:
        return {item: fn(item) for item in todo}
    with ThreadPoolExecutor(min(PARALLELISM, len(todo)), thread_name_prefix="claims") as pool:
        return dict(zip(todo, pool.map(fn, todo), strict=True))


def knows_nothing(state: PartitionRemoteState) -> bool:
    """Whether the metadata holds nothing of a partition's archive: no segment in any state, no
    remote log start offset, no partition deletion (its own claim aside)."""
    return not state.segments and state.log_start_offset == 0 and state.delete_state is None


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
        archived_manifests: ArchivedManifests | None = None,
    ) -> None:
        self.claims = claims
        self._archived_manifests = archived_manifests
        self.behind: set[TopicPartition] = set()  # refused: the bucket is ahead of the metadata
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

    def refresh_topic_ids(self, topics: list[str]) -> set[str]:
        """Ask the broker for the ids of ``topics`` and update the shared map; returns the topics
        whose id could not be read (their known id, if any, stays in the map)."""
        wanted = sorted(set(topics))
        unknown: set[str] = set()
        try:
            found = self._topic_id_source(wanted)
        except TopicIdUnknownError as exc:
            found, unknown = exc.found, set(exc.topics) & set(wanted)
            HEALTH.report(HEALTH_COMPONENT, str(exc))
        else:
            HEALTH.clear(HEALTH_COMPONENT)
        for topic in wanted:
            if topic in unknown:
                continue
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
        return unknown

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
        this worker now holds (partitions another claim took meanwhile are left out, and so are,
        unclaimed, the partitions of topics whose id could not be read)."""
        unknown = self.refresh_topic_ids([tp.topic for tp in tps]) if tps else set()
        if unknown:
            log.warning(
                "not claiming %s: the topic id of %s could not be read; claimed again once it can be",
                [str(tp) for tp in tps if tp.topic in unknown],
                sorted(unknown),
            )
            tps = [tp for tp in tps if tp.topic not in unknown]
        if not tps:
            return {}

        def claim(tp: TopicPartition) -> int:
            return self.claims.publish(
                PartitionClaim(
                    tp,
                    uuid.uuid4(),
                    ClaimKind.LEAD,
                    self.worker_id,
                    int(time.time() * 1000),
                    self.topic_ids.get(tp.topic),
                )
            )

        # Each partition's claim is its own record, its epoch the offset it got: publishing several
        # at once changes no partition's claim, only how long the assignment takes.
        offsets = _each(claim, tps)
        states = self._states(tps)
        mine: dict[TopicPartition, PartitionRemoteState] = {}
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
            mine[tp] = state
        archived = self._archived(mine)
        held = {
            tp: offsets[tp] for tp, state in mine.items() if not self._behind_the_bucket(tp, state, archived)
        }
        self._report_behind()
        with self._lock:
            self._prepared.update({tp: states[tp] for tp in held})
        return held

    def _archived(self, states: dict[TopicPartition, PartitionRemoteState]) -> dict[TopicPartition, bool]:
        """Whether the bucket holds manifests of each partition whose metadata knows nothing (one
        LIST each, several at once); the others are not asked."""
        ask = self._archived_manifests
        if ask is None:
            return {}
        unknown = {tp: state.current_topic_id for tp, state in states.items() if knows_nothing(state)}
        return _each(lambda tp: ask(tp, unknown[tp]), unknown)

    def _behind_the_bucket(
        self, tp: TopicPartition, state: PartitionRemoteState, archived: dict[TopicPartition, bool]
    ) -> bool:
        """A partition whose metadata knows nothing while the bucket holds manifests of it (the
        metadata topic was lost and re-created empty, a misspelt PROCESSOR_METADATA_TOPIC, another
        deployment's metadata): leading it would copy over the archive and clean up by a view that
        does not know it. It is refused (not led, nothing deleted) until ``rebuild-metadata`` ran.
        ``archived``: :meth:`_archived` of the partitions asked about."""
        if self._archived_manifests is None or not knows_nothing(state):
            self.behind.discard(tp)
            return False
        if not archived[tp]:
            self.behind.discard(tp)
            return False
        log.error(
            "%s: not leading it: the bucket holds segment manifests of this partition that the metadata "
            "topic does not know (a lost or re-created metadata topic, a misspelt "
            "PROCESSOR_METADATA_TOPIC, or another deployment writing the same bucket and prefix); run "
            "`processor rebuild-metadata`, or point this worker at its own metadata topic or prefix",
            tp,
        )
        self.behind.add(tp)
        return True

    def _report_behind(self) -> None:
        if self.behind:
            names = ", ".join(str(tp) for tp in sorted(self.behind)[:5])
            HEALTH.report(
                BEHIND_COMPONENT,
                f"the bucket holds archived segments of {len(self.behind)} partitions ({names}) that the "
                "metadata topic does not know: not leading them; run `processor rebuild-metadata`",
            )
        else:
            HEALTH.clear(BEHIND_COMPONENT)

    def __call__(self, tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        """The engine's RemoteStateLoader: what ``prepare`` loaded, or a fresh load. Raises
        TopicIdUnknownError (and hands out nothing) when a fresh load's topic id cannot be read:
        the engine would lead a partition it is given no state for from its first offset, with no
        id, so the whole assignment fails instead and nothing of it is led."""
        with self._lock:
            out = {tp: self._prepared.pop(tp) for tp in tps if tp in self._prepared}
        missing = [tp for tp in tps if tp not in out]
        if missing:
            unknown = self.refresh_topic_ids([tp.topic for tp in missing])
            if unknown:
                with self._lock:  # kept for the next try of the same assignment
                    self._prepared.update(out)
                unled = [str(tp) for tp in missing if tp.topic in unknown]
                raise TopicIdUnknownError(
                    sorted(unknown), f"the lookup failed; not leading {unled} without it"
                )
            behind = []
            loaded = self._states(missing)
            for tp, state in loaded.items():
                state.current_topic_id = self.topic_ids.get(tp.topic)
            archived = self._archived(loaded)
            for tp, state in loaded.items():
                if self._behind_the_bucket(tp, state, archived):
                    behind.append(str(tp))
                out[tp] = state
            self._report_behind()
            if behind:
                with self._lock:
                    self._prepared.update({tp: st for tp, st in out.items() if str(tp) not in behind})
                raise MetadataBehindBucketError(
                    f"not leading {behind}: the bucket holds archived segments the metadata topic does "
                    "not know; run `processor rebuild-metadata`"
                )
        return out
