"""Copies sealed segments to remote storage: per-partition order, retries, cancellation on revoke.

Each partition is a *lane*: its sealed segments are copied one at a time, in offset order, on a
thread pool shared by all partitions (uploads of different partitions run in parallel). Every pool
future is read (``_reap``): an error that is not a ``ProcessorError`` is a bug or a broken
invariant, so it stops the data path visibly: ``failure`` is set, the health registry gets a fatal
"data_path" problem and ``on_failure`` tells the engine (the worker then exits non-zero).

Copy failures (``ProcessorError``):
- ``retriable`` (5xx, throttling, timeouts, the metadata topic unreachable): retried after a bounded
  exponential backoff with jitter, Kafka's ``retry.backoff`` shape: 500 ms doubling to 30 s, each
  delay spread by +-20 %.
- not retriable (access denied, missing bucket): no retry loop. The problem goes to the health
  registry ("storage") and ``processor_remote_copy_blocked_total``; the segment stays pending and the copy
  is tried again after the maximum backoff, so the worker resumes by itself once it is fixed.

A revoke cancels the lane: a sleeping retry wakes at once, a copy in progress stops before its
next upload and never publishes COPY_SEGMENT_FINISHED, pending segments are dropped (their bytes
released from the offload buffer).
"""

from __future__ import annotations

import collections
import logging
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from dataclasses import dataclass, field

from processor import metrics
from processor.errors import ProcessorError, StorageError
from processor.health import HEALTH
from processor.kafka.partition import TopicPartition
from processor.leader.offload_buffer import OffloadBuffer
from processor.leader.segment_copier import CopyCancelledError, SegmentCopier
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import compress_segment

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Backoff:
    """Bounded exponential backoff with jitter. Six lines, so written here rather than pulling in a
    retry library whose loop would hide the revoke-interruptible sleep this module needs."""

    initial_s: float = 0.5
    max_s: float = 30.0
    jitter: float = 0.2

    def delay(self, attempt: int) -> float:
        base = min(self.initial_s * 2 ** max(attempt - 1, 0), self.max_s)
        return float(base * random.uniform(1 - self.jitter, 1 + self.jitter))


def _fields(lane: Lane, segment: SealedSegment, attempt: int) -> dict[str, object]:
    """Structured fields of a copy-failure log line (JSON logs)."""
    return {
        "topic": lane.tp.topic,
        "partition": lane.tp.partition,
        "start_offset": segment.start_offset,
        "end_offset": segment.end_offset,
        "attempt": attempt,
    }


@dataclass(eq=False)
class Lane:
    tp: TopicPartition
    epoch: int
    remote_end: int | None
    pending: collections.deque[SealedSegment] = field(default_factory=collections.deque)
    dangling: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    copying: bool = False
    cancelled: threading.Event = field(default_factory=threading.Event)
    idle: threading.Event = field(default_factory=threading.Event)


class CopyScheduler:
    def __init__(
        self,
        copier: SegmentCopier,
        buffer: OffloadBuffer,
        concurrency: int,
        backoff: Backoff = Backoff(),
        on_failure: Callable[[BaseException], None] = lambda exc: None,
    ) -> None:
        self._copier = copier
        self._buffer = buffer
        self._backoff = backoff
        self._on_failure = on_failure
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="segment-copy")
        self._lock = threading.Lock()
        self._lanes: dict[TopicPartition, Lane] = {}
        self._stopping = threading.Event()
        self.failure: BaseException | None = None
        self.concurrency = concurrency

    # -- lanes ------------------------------------------------------------------------------------

    def open(
        self, tp: TopicPartition, epoch: int, remote_end: int | None, dangling: list[RemoteLogSegmentMetadata]
    ) -> Lane:
        lane = Lane(tp, epoch, remote_end, dangling=list(dangling))
        lane.idle.set()
        with self._lock:
            self._lanes[tp] = lane
            self._kick(lane)
        return lane

    def submit(self, tp: TopicPartition, segment: SealedSegment) -> None:
        with self._lock:
            lane = self._lanes[tp]
            lane.pending.append(segment)
            self._kick(lane)

    def revoke(self, tp: TopicPartition) -> Lane | None:
        """Cancel the lane (wakes a sleeping retry, stops a copy before its next step) and drop its
        pending segments; returns it so the caller can wait for ``idle``."""
        with self._lock:
            lane = self._lanes.pop(tp, None)
            if lane is None:
                return None
            lane.cancelled.set()
            released = sum(seg.held_bytes for seg in lane.pending if seg is not self._in_flight(lane))
            kept = [seg for seg in lane.pending if seg is self._in_flight(lane)]
            lane.pending = collections.deque(kept)
        self._buffer.release(released)
        return lane

    @staticmethod
    def _in_flight(lane: Lane) -> SealedSegment | None:
        return lane.pending[0] if lane.copying and lane.pending else None

    def lane(self, tp: TopicPartition) -> Lane | None:
        with self._lock:
            return self._lanes.get(tp)

    def busy(self) -> int:
        with self._lock:
            return sum(len(lane.pending) + (1 if lane.copying else 0) for lane in self._lanes.values())

    def stop(self) -> None:
        self._stopping.set()
        with self._lock:
            for lane in self._lanes.values():
                lane.cancelled.set()
        self._pool.shutdown(wait=True, cancel_futures=True)

    # -- running copies ---------------------------------------------------------------------------

    def _kick(self, lane: Lane) -> None:
        """Start the lane's next copy if none runs (caller holds the lock)."""
        if lane.copying or lane.cancelled.is_set() or self._stopping.is_set():
            return
        if not (lane.pending or lane.dangling):
            return
        lane.copying = True
        lane.idle.clear()
        try:
            future = self._pool.submit(self._copy_next, lane)
        except RuntimeError:  # the pool shut down (worker stopping)
            lane.copying = False
            lane.idle.set()
            return
        future.add_done_callback(lambda f: self._reap(lane, f))

    def _reap(self, lane: Lane, future: Future[None]) -> None:
        """Read every copy future: unexpected errors stop the data path, visibly."""
        try:
            future.result()
        except CancelledError:
            pass
        except BaseException as exc:
            self._fail(exc)
        leftover = 0
        with self._lock:
            lane.copying = False
            if lane.cancelled.is_set() and lane.pending:  # revoked while copying: drop the rest
                leftover = sum(seg.held_bytes for seg in lane.pending)
                lane.pending.clear()
            if not lane.cancelled.is_set() and lane.pending and self.failure is None:
                self._kick(lane)
            if not lane.copying:
                lane.idle.set()
        if leftover:
            self._buffer.release(leftover)

    def _fail(self, exc: BaseException) -> None:
        log.error("segment copy failed unexpectedly; stopping the data path", exc_info=exc)
        if self.failure is None:
            self.failure = exc
        HEALTH.report("data_path", f"segment copy failed: {type(exc).__name__}: {exc}", fatal=True)
        self._on_failure(exc)

    def _copy_next(self, lane: Lane) -> None:
        while lane.dangling and not lane.cancelled.is_set():
            if self._copier.delete_segment(lane.dangling[0], lane.epoch):
                lane.dangling.pop(0)
            else:
                break
        with self._lock:
            segment = lane.pending[0] if lane.pending and not lane.cancelled.is_set() else None
        if segment is not None:
            self._copy_with_retries(lane, segment)

    def _copy_with_retries(self, lane: Lane, segment: SealedSegment) -> None:
        # keys read for the key filter once, before archive compression; both on the pool's threads
        stored = compress_segment(self._copier.summarise_keys(segment))
        attempt = 0
        blocked = False
        while not lane.cancelled.is_set() and not self._stopping.is_set():
            attempt += 1
            if lane.remote_end is not None and segment.start_offset <= lane.remote_end:
                raise AssertionError(
                    f"{lane.tp}: segment starts at {segment.start_offset}, remote storage ends at "
                    f"{lane.remote_end}"
                )
            t0 = time.monotonic()
            metrics.COPY_REQUESTS.labels(lane.tp.topic).inc()
            try:
                done = self._copier.copy(
                    lane.tp, stored, lane.epoch, still_leader=lambda: not lane.cancelled.is_set()
                )
            except CopyCancelledError:
                return
            except ProcessorError as exc:
                metrics.COPY_ERRORS.labels(lane.tp.topic).inc()
                component = "storage" if isinstance(exc, StorageError) else "data_path"
                if exc.retriable:
                    delay = self._backoff.delay(attempt)
                    log.warning(
                        "%s: copy of %d..%d failed (attempt %d): %s; retrying in %.1f s",
                        lane.tp,
                        segment.start_offset,
                        segment.end_offset,
                        attempt,
                        exc,
                        delay,
                        extra=_fields(lane, segment, attempt),
                    )
                else:
                    delay = self._backoff.max_s
                    blocked = True
                    metrics.COPY_BLOCKED.labels(lane.tp.topic).inc()
                    HEALTH.report(component, f"copy of {lane.tp} blocked: {exc}")
                    log.error(
                        "%s: copy of %d..%d failed and will not succeed by retrying: %s; the segment "
                        "stays pending, checked again in %.0f s",
                        lane.tp,
                        segment.start_offset,
                        segment.end_offset,
                        exc,
                        delay,
                        extra=_fields(lane, segment, attempt),
                    )
                if lane.cancelled.wait(delay):
                    return
                continue
            if blocked:
                HEALTH.clear("storage")
                HEALTH.clear("data_path")
            metrics.COPY_SECONDS.observe(time.monotonic() - t0)
            metrics.SEGMENTS_COPIED.labels(lane.tp.topic).inc()
            metrics.COPY_BYTES.labels(lane.tp.topic).inc(stored.size_bytes)
            metrics.RECORDS_COPIED.labels(lane.tp.topic).inc(segment.record_count)
            metrics.REMOTE_END_OFFSET.labels(lane.tp.topic, str(lane.tp.partition)).set(done.end_offset)
            with self._lock:
                if lane.pending and lane.pending[0] is segment:
                    lane.pending.popleft()
                    self._buffer.release(segment.held_bytes)
                lane.remote_end = done.end_offset
            metrics.BUFFER_BYTES.set(self._buffer.used)
            return
