"""The follower's consumer: metadata topic -> MetadataCache, resuming from offsets kept in the cache.

Why not a Faust agent or a Faust global table: every follower needs *all* the metadata partitions it
follows (not a group share of them), in its own key layout, at tens of thousands of records a second.
Faust's per-event path (~100 us) would cap that near 10 k/s, and a global table fixes the layout. So
Faust runs this as a service of the worker (lifecycle, health), and records move in batches: an
assign-only consumer starts at the offsets stored in the cache, and each consumed batch is applied
in one atomic RocksDB write together with the new offsets.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from processor import metrics
from processor.errors import MetadataTopicError
from processor.follower.cache_writes import ApplyResult, RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.client_types import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, KafkaTP
from processor.kafka.partition import TopicPartition
from processor.metadata.authentication import metadata_screener
from processor.metadata.read_to_end import EndSnapshot
from processor.metadata.remote_log_state import PartitionRemoteState

log = logging.getLogger(__name__)

LAG_INTERVAL_S = 2.0
VERDICTS_KEPT = 65_536  # records not accepted, most recent first, for read-your-write


class FollowerState:
    """Lag and progress of the follower, updated by the materializer and read by the readiness probe
    (processor/probes.py ``FollowerProgress``)."""

    def __init__(self) -> None:
        self.lag_records: int | None = None  # None: not measured yet
        self.caught_up_once = False
        self.progress_at = time.monotonic()
        self.stopped: str | None = None


@dataclass
class ConsumerPeek:
    """What a snapshot is checked against, asked of the metadata topic (snapshots.TopicPeek)."""

    def __init__(self, consumer: Consumer | None, factory: Callable[[], Consumer], topic: str) -> None:
        self.consumer, self.factory, self.topic = consumer, factory, topic

    def watermarks(self, partition: int) -> tuple[int, int]:
        consumer = self.consumer if self.consumer is not None else self.factory()
        try:
            low, high = consumer.get_watermark_offsets(KafkaTP(self.topic, partition), timeout=10)
        except KafkaException as exc:
            raise MetadataTopicError(f"watermarks of {self.topic} [{partition}]: {exc.args[0]}") from None
        finally:
            if consumer is not self.consumer:
                consumer.close()
        return int(low), int(high)

    def record_from(
        self, partition: int, offset: int, timeout_s: float = 15.0
    ) -> tuple[int, bytes | None, bytes | None, int] | None:
        """The first record at or after ``offset`` (None: none within ``timeout_s``)."""
        consumer = self.factory()
        try:
            consumer.assign([KafkaTP(self.topic, partition, offset)])
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                err = msg.error()
                if err is not None:
                    if err.fatal():
                        raise MetadataTopicError(f"reading {self.topic} [{partition}]: {err}")
                    continue
                _kind, timestamp_ms = msg.timestamp()
                return int(msg.offset() or 0), msg.key(), msg.value(), int(timestamp_ms)
            return None
        finally:
            consumer.close()


@dataclass
class MaterializerStats:
    consumed: int = 0  # messages read from the topic by this process
    applied: int = 0
    skipped: int = 0


class Materializer:
    def __init__(
        self,
        cache: MetadataCache,
        consumer_factory: Callable[[], Consumer],
        topic: str,
        partitions: list[int],
        source_topics: frozenset[str] | None = None,
        batch_size: int = 10_000,
    ) -> None:
        self.cache = cache
        self.topic = topic
        self.partitions = sorted(partitions)
        self.source_topics = source_topics
        self.batch_size = batch_size
        self.stats = MaterializerStats()
        self._consumer_factory = consumer_factory
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None
        self.refused: KafkaError | None = None  # the last TOPIC_AUTHORIZATION_FAILED a poll saw
        self.state = FollowerState()  # lag and progress, read by the readiness probe
        # called on the follower's thread after each applied batch (e.g. the worker revokes a
        # partition it leads when a newer writer epoch shows up); must not block
        self.listeners: list[Callable[[ApplyResult], None]] = []
        # read-your-write: the most recent records not accepted, and how far each partition is
        # applied (a writer waits on the condition for its own record); applied and not listed here
        # means accepted, as long as the list reaches back that far (``_known_from``)
        self._not_accepted: OrderedDict[tuple[int, int], bool | None] = OrderedDict()
        self._known_from: dict[int, int] = {}
        self._applied: dict[int, int] = {}
        self._applied_cv = threading.Condition()
        self._last_active: dict[TopicPartition, float] = {}
        # a new cache's start: loads snapshots of the metadata partitions it never consumed
        # (processor/follower/snapshots.py; the wiring sets it), then the topic's tail is read
        self.bootstrap: Callable[[ConsumerPeek, list[int]], object] | None = None

    def _open(self) -> Consumer:
        consumer = self._consumer_factory()
        stored = self.cache.consumed_offsets()
        never = [p for p in self.partitions if p not in stored]
        if never and self.bootstrap is not None:
            self.bootstrap(ConsumerPeek(consumer, self._consumer_factory, self.topic), never)
            stored = self.cache.consumed_offsets()
        consumer.assign(
            [
                KafkaTP(self.topic, p, stored[p] if p in stored else self._first_offset(consumer, p))
                for p in self.partitions
            ]
        )
        return consumer

    def _first_offset(self, consumer: Consumer, partition: int) -> int:
        """Where a partition never consumed starts: its low watermark, asked for directly. Left to
        librdkafka (OFFSET_BEGINNING), the first fetch came ~0.4 s later (measured against Tansu),
        a tenth of the time a fresh follower needs for 200,000 records. If the question fails, the
        consumer resolves it after all (auto.offset.reset=earliest also covers a low watermark that
        moved on since)."""
        try:
            low, _high = consumer.get_watermark_offsets(KafkaTP(self.topic, partition), timeout=2)
        except KafkaException as exc:
            log.warning(
                "metadata partition %d: low watermark unknown (%s); starting from the beginning",
                partition,
                exc,
            )
            return OFFSET_BEGINNING
        return int(low) if low is not None and low >= 0 else OFFSET_BEGINNING

    def poll_once(self, consumer: Consumer, timeout_s: float = 0.1) -> int:
        batch = consumer.consume(self.batch_size, timeout_s)
        if not batch:
            return 0
        messages: list[RawMessage] = []
        screen = metadata_screener()
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED:
                    # librdkafka looks up the coordinator of its (unused) group id; an assign-only
                    # consumer needs no group: no ACL is missing, nothing to warn about
                    log.debug("metadata consumer: %s", err)
                    continue
                if err.fatal():
                    raise MetadataTopicError(f"metadata consumer: {err}")
                if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                    self.refused = err  # catch_up stops at once; the running service keeps asking
                log.warning("metadata consumer: %s", err)
                continue
            messages.append(  # the value passes the authentication screen (refused: one the fold rejects)
                RawMessage(int(msg.partition() or 0), int(msg.offset() or 0), msg.key(), screen(msg))
            )
        result = self.cache.apply_batch(messages, self.source_topics)
        self._record(messages, result)
        self.stats.consumed += len(messages)
        self.stats.applied += result.applied
        self.stats.skipped += result.skipped
        metrics.FOLLOWER_APPLIED.inc(result.applied)
        metrics.FOLLOWER_SKIPPED.inc(result.skipped)
        if messages:
            self.state.progress_at = time.monotonic()
        for listener in self.listeners:
            listener(result)
        return len(messages)

    def measure_lag(self, consumer: Consumer) -> int | None:
        """Records not applied yet, from the high watermarks of the last fetch responses (cached by
        librdkafka: no request is sent). None while no partition's watermark is known."""
        stored = self.cache.consumed_offsets()
        total: int | None = None
        for p in self.partitions:
            _low, high = consumer.get_watermark_offsets(KafkaTP(self.topic, p), cached=True)
            if high is None or high < 0:
                continue
            lag = max(0, high - stored.get(p, 0))
            metrics.FOLLOWER_LAG.labels(str(p)).set(lag)
            total = lag + (total or 0)
        if total is not None:
            self.state.lag_records = total
            if total == 0:
                self.state.caught_up_once = True
                self.state.progress_at = time.monotonic()
        return total

    def catch_up(self, timeout_s: float = 60.0, quiet_s: float = 0.0) -> MaterializerStats:
        """Consume until every followed partition reaches the end it had when this was called (the
        high watermark, re-queried once: see :mod:`processor.metadata.read_to_end`), within one
        absolute deadline. Records others publish meanwhile do not keep it reading. ``quiet_s`` is
        accepted for old callers and ignored: there is no quiet period to wait for any more."""
        consumer = self._open()
        try:
            snapshot = EndSnapshot(consumer, self.topic, self.partitions, timeout_s)
            self.refused = None
            while not snapshot.reached(self.cache.consumed_offsets()):
                self.poll_once(consumer, 0.1)
                if self.refused is not None:  # no ACL comes by waiting out the deadline
                    raise MetadataTopicError(
                        f"reading {self.topic} was refused: {self.refused.str()} (the principal needs "
                        f"Read and Describe on topic {self.topic}: see docs/security.md)"
                    )
            return self.stats
        except KafkaException as exc:
            raise MetadataTopicError(f"reading {self.topic}: {exc.args[0]}") from None
        finally:
            consumer.close()

    def peek(self) -> ConsumerPeek:
        """The metadata topic, asked what snapshots are checked against and taken after."""
        return ConsumerPeek(None, self._consumer_factory, self.topic)

    def wait_caught_up(self, partitions: list[int], timeout_s: float = 10.0) -> bool:
        """While running as a service: wait until the cache holds every record the given metadata
        partitions had when this was called (their high watermarks, re-queried once). False if not
        within ``timeout_s`` or if the service is not running or does not follow all of them."""
        if self._thread is None or not self._thread.is_alive() or not set(partitions) <= set(self.partitions):
            return False
        consumer = self._consumer_factory()
        try:
            snapshot = EndSnapshot(consumer, self.topic, sorted(set(partitions)), timeout_s)
            while not snapshot.reached(self.cache.consumed_offsets()):
                if self.failure is not None or self._stop.wait(0.02):
                    return False
            return True
        except (MetadataTopicError, KafkaException) as exc:
            log.info("follower not caught up on %s: %s", partitions, exc)
            return False
        finally:
            consumer.close()

    def _record(self, messages: list[RawMessage], result: ApplyResult) -> None:
        now = time.monotonic()
        for tp in result.active:
            self._last_active[tp] = now
        with self._applied_cv:
            self._not_accepted.update(result.not_accepted)
            while len(self._not_accepted) > VERDICTS_KEPT:
                (partition, offset), _ = self._not_accepted.popitem(last=False)
                self._known_from[partition] = max(self._known_from.get(partition, 0), offset + 1)
            # each metadata partition's first and last message of the batch (a consumed batch holds
            # a partition's messages in offset order), not a step a message
            firsts = {msg.partition: msg.offset for msg in reversed(messages)}
            lasts = {msg.partition: msg.offset for msg in messages}
            for partition, first in firsts.items():
                if partition not in self._known_from:
                    self._known_from[partition] = first  # verdicts known from here on
                self._applied[partition] = max(self._applied.get(partition, 0), lasts[partition] + 1)
            self._applied_cv.notify_all()

    def wait_applied(self, partition: int, offset: int, timeout_s: float = 10.0) -> bool:
        """While running as a service: wait until the cache has consumed ``offset`` of metadata
        ``partition``. False if it does not follow that partition, is not running, or time is up."""
        if partition not in self.partitions or self._thread is None or not self._thread.is_alive():
            return False
        deadline = time.monotonic() + timeout_s
        with self._applied_cv:
            if partition not in self._applied:
                self._applied[partition] = self.cache.consumed_offsets().get(partition, 0)
            while self._applied[partition] <= offset:
                left = deadline - time.monotonic()
                if self.failure is not None or self._stop.is_set() or left <= 0:
                    return False
                self._applied_cv.wait(min(left, 0.5))
        return True

    def outcome(self, partition: int, offset: int, timeout_s: float) -> bool | None:
        """Read-your-write: True if the fold accepted the record at ``offset`` of metadata
        ``partition``, False if it rejected it, None if that is not known within ``timeout_s`` (the
        follower lags, stopped, or the verdict is no longer kept). Never a guess."""
        if not self.wait_applied(partition, offset, timeout_s):
            return None
        with self._applied_cv:
            if offset < self._known_from.get(partition, offset + 1):
                return None  # applied before this process kept verdicts, or forgotten since
            return self._not_accepted.get((partition, offset), True)

    def current_epoch(self, tp: TopicPartition) -> int | None:
        """The partition's current claim, as this follower has applied it."""
        return self.cache.current_epoch(tp)

    def claim_id(self, tp: TopicPartition, epoch: int) -> uuid.UUID | None:
        """The id of the partition's claim with ``epoch``, if it is the current one (the leader's
        ``ClaimId`` port: segment manifests record it)."""
        claim = self.cache.header(tp).claim
        return claim.claim_id if claim is not None and claim.epoch == epoch else None

    def quiet_s(self, tp: TopicPartition) -> float:
        """Seconds since this follower applied an accepted record of ``tp`` (since it started, if
        none was applied since)."""
        return time.monotonic() - self._last_active.get(tp, self._started_at)

    def remote_state(self, tp: TopicPartition) -> PartitionRemoteState:
        """A partition's remote state from the cache (the leader's ``CachedRemoteState`` port)."""
        return self.cache.remote_state(tp)

    # -- as a background service of the worker ----------------------------------------------------

    _started_at: float = 0.0

    def start(self) -> None:
        self._started_at = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="metadata-follower", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = self._open()
        measured_at = 0.0
        try:
            while not self._stop.is_set():
                self.poll_once(consumer, 0.1)
                if time.monotonic() - measured_at >= LAG_INTERVAL_S:
                    measured_at = time.monotonic()
                    self.measure_lag(consumer)
        except BaseException as exc:
            log.exception("metadata follower crashed")
            self.failure = exc
            self.state.stopped = f"{type(exc).__name__}: {exc}"
        finally:
            consumer.close()
            if self.state.stopped is None:
                self.state.stopped = "stopped"

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
