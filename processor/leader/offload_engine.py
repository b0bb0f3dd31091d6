"""The leader's data path: source partitions -> offload buffer -> segments -> remote storage.

Why this sits below Faust instead of in an agent's ``async for``: measured here with 1 KiB
records, a Faust agent iterating its stream (with or without ``stream.take``) tops out near
10 k records/s, because every event passes through Faust's per-event machinery (~100 us), while a
bare confluent-kafka consumer reads the same topic at ~240 MB/s. So Faust does what it is good at:
group membership, partition assignment (which *is* leadership here), lifecycle and the web server.
Records move below it, in batches: one thread runs an assign-only confluent-kafka consumer over the
partitions this worker leads, ``consume()``s up to thousands of messages per call, and encodes each
straight into its partition's open segment. The only per-record Python work is that encoding.
Sealed segments are copied by a thread pool, at most one segment per partition at a time and in
offset order; uploads of different partitions (and the parts of one multipart upload) run in
parallel.

Memory: every encoded byte is counted in the :class:`OffloadBuffer` until its segment is copied.
A record that does not fit is not taken: its partition is seeked back to it, all partitions pause,
and consumption resumes when uploads free space. If the buffer is full of open (unsealed) segments
only, the largest one rolls early, so the bound can never deadlock the worker.

Positions are never committed to Kafka: a partition (re)assigned to this worker resumes from the
highest COPY_SEGMENT_FINISHED end offset + 1 found on the metadata topic, or from the earliest
available offset when nothing is remote yet (historical data is offloaded too, PIP-76).
"""

from __future__ import annotations

import collections
import contextlib
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError
from confluent_kafka import TopicPartition as KafkaTP

from processor import metrics
from processor.errors import ProcessorError
from processor.leader.offload_buffer import OffloadBuffer
from processor.leader.roll_policy import RollPolicy, RollReason
from processor.leader.segment_copier import CopyCancelledError, SegmentCopier
from processor.metadata.model import RemoteLogSegmentMetadata, TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.block_format import BLOCK_HEADER_LEN, SealedSegment, SegmentBuilder
from processor.segment.record_format import ENTRY_OVERHEAD

log = logging.getLogger(__name__)

LAG_INTERVAL_MS = 2000
RemoteStateLoader = Callable[[list[TopicPartition]], dict[TopicPartition, PartitionRemoteState]]


@dataclass(frozen=True, slots=True)
class EngineOptions:
    segment_bytes: int
    segment_ms: int
    block_bytes: int
    buffer_bytes: int
    copy_concurrency: int = 8
    batch_size: int = 5000
    retry_backoff_ms: int = 500
    retry_backoff_max_ms: int = 30_000
    revoke_wait_s: float = 30.0


@dataclass(eq=False)
class _Partition:
    tp: TopicPartition
    epoch: int
    next_start: int | None  # where the next segment's coverage starts; None: at the first record
    remote_end: int | None  # highest finished offset
    builder: SegmentBuilder | None = None
    opened_at_ms: float = 0.0
    last_taken: int = -1
    lag: int | None = None
    pending: collections.deque[SealedSegment] = field(default_factory=collections.deque)
    dangling: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    copying: bool = False
    revoked: bool = False
    idle: threading.Event = field(default_factory=threading.Event)


def _unremote_age_s(st: _Partition) -> float:
    """Age of the oldest record of the partition not yet remote: from its timestamp when it sits in
    a sealed segment or a closed block, else since the open segment took its first record; 0 when
    the worker holds nothing of the partition."""
    now_ms = time.time() * 1000
    infos = st.pending[0].block_infos if st.pending else (st.builder.infos if st.builder else [])
    if infos:
        return max(0.0, (now_ms - infos[0].min_timestamp) / 1000)
    if st.builder is not None and not st.builder.empty:
        return max(0.0, (time.monotonic() * 1000 - st.opened_at_ms) / 1000)
    return 0.0


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    remote_end: int | None
    open_bytes: int
    pending_segments: int
    copying: bool
    lag: int | None  # source high watermark - (remote_end + 1), from the last fetch; None: unknown


class OffloadEngine:
    def __init__(
        self,
        options: EngineOptions,
        consumer_factory: Callable[[], Consumer],
        copier: SegmentCopier,
        load_remote_state: RemoteStateLoader,
    ) -> None:
        self.options = options
        self.policy = RollPolicy(options.segment_bytes, options.segment_ms)
        self.buffer = OffloadBuffer(options.buffer_bytes)
        self._consumer_factory = consumer_factory
        self._copier = copier
        self._load_remote_state = load_remote_state
        self._parts: dict[tuple[str, int], _Partition] = {}
        self._lock = threading.Lock()
        self._commands: queue.Queue[tuple[str, Any, threading.Event]] = queue.Queue()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(
            max_workers=options.copy_concurrency, thread_name_prefix="segment-copy"
        )
        self.paused = False
        self.pause_count = 0
        self.failure: BaseException | None = None

    # -- control, from any thread -----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="offload-engine", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        with self._lock:
            for st in self._parts.values():
                st.revoked = True
        self._pool.shutdown(wait=True, cancel_futures=True)

    def assign(self, tps: Iterable[TopicPartition], epoch: int, timeout_s: float = 60.0) -> None:
        self._call("assign", (sorted(set(tps)), epoch), timeout_s)

    def revoke(self, tps: Iterable[TopicPartition]) -> None:
        """Stop leading ``tps``. Returns once their in-flight copies ended (or the wait timed out),
        so a new leader never starts while this one may still publish for those partitions."""
        revoked: list[_Partition] = self._call("revoke", sorted(set(tps)), self.options.revoke_wait_s)
        deadline = time.monotonic() + self.options.revoke_wait_s
        for st in revoked:
            if not st.idle.wait(max(0.0, deadline - time.monotonic())):
                log.warning("copy of %s still running after revocation; it will not publish FINISHED", st.tp)

    def roll_all(self) -> None:
        """Seal every open segment now (operators, tests, graceful hand-over)."""
        self._call("roll", None, 30.0)

    def status(self) -> dict[TopicPartition, PartitionStatus]:
        with self._lock:
            return {
                st.tp: PartitionStatus(
                    st.remote_end,
                    st.builder.size_bytes if st.builder else 0,
                    len(st.pending),
                    st.copying,
                    st.lag,
                )
                for st in self._parts.values()
            }

    def _call(self, name: str, arg: Any, timeout_s: float) -> Any:
        if self._thread is None or not self._thread.is_alive():
            raise ProcessorError("the offload engine is not running")
        done = threading.Event()
        box: list[Any] = [arg]
        self._commands.put((name, box, done))
        if not done.wait(timeout_s):
            raise ProcessorError(f"offload engine did not complete {name} within {timeout_s:.0f} s")
        result = box[0]
        if isinstance(result, BaseException):
            raise result
        return result

    # -- the consumer thread ------------------------------------------------------------------------

    def _run(self) -> None:
        consumer = self._consumer_factory()
        next_lag_ms = 0.0
        try:
            while not self._stopping.is_set():
                self._drain_commands(consumer)
                if not self._parts:
                    time.sleep(0.05)
                    continue
                if self.paused and self.buffer.can_resume():
                    self._set_paused(consumer, False)
                batch = consumer.consume(self.options.batch_size, 0.05)
                if batch:
                    self._take(consumer, batch)
                now_ms = time.monotonic() * 1000
                self._roll_due(now_ms)
                self._relieve_pressure()
                if now_ms >= next_lag_ms:
                    self._update_lag(consumer)
                    next_lag_ms = now_ms + LAG_INTERVAL_MS
        except BaseException as exc:  # surfaced through .failure and the health check
            log.exception("offload engine crashed")
            self.failure = exc
        finally:
            try:
                consumer.close()
            except Exception:  # closing a broken consumer must not mask the first error
                log.debug("error closing the source consumer", exc_info=True)

    def _drain_commands(self, consumer: Consumer) -> None:
        while True:
            try:
                name, box, done = self._commands.get_nowait()
            except queue.Empty:
                return
            try:
                if name == "assign":
                    tps, epoch = box[0]
                    self._do_assign(consumer, tps, epoch)
                    box[0] = None
                elif name == "revoke":
                    box[0] = self._do_revoke(consumer, box[0])
                elif name == "roll":
                    for st in list(self._parts.values()):
                        self._seal(st, RollReason.REQUESTED)
            except BaseException as exc:
                box[0] = exc
            done.set()

    def _do_assign(self, consumer: Consumer, tps: list[TopicPartition], epoch: int) -> None:
        new = [tp for tp in tps if (tp.topic, tp.partition) not in self._parts]
        if not new:
            return
        remote = self._load_remote_state(new)
        positions: list[KafkaTP] = []
        with self._lock:
            for tp in new:
                state = remote.get(tp) or PartitionRemoteState()
                end = state.highest_finished_offset()
                st = _Partition(tp, epoch, None if end is None else end + 1, end)
                st.last_taken = -1 if end is None else end  # never take a record remote storage holds
                st.dangling = state.dangling()
                st.idle.set()
                self._parts[(tp.topic, tp.partition)] = st
                positions.append(
                    KafkaTP(tp.topic, tp.partition, OFFSET_BEGINNING if end is None else end + 1)
                )
                metrics.REMOTE_END_OFFSET.labels(tp.topic, str(tp.partition)).set(-1 if end is None else end)
                log.info(
                    "leading %s (epoch %d): resuming at %s, %d dangling copies to clean",
                    tp,
                    epoch,
                    "the earliest offset" if end is None else end + 1,
                    len(st.dangling),
                )
                if st.dangling:
                    self._kick(st)
        consumer.incremental_assign(positions)
        if self.paused:
            consumer.pause(positions)

    def _do_revoke(self, consumer: Consumer, tps: list[TopicPartition]) -> list[_Partition]:
        gone: list[_Partition] = []
        with self._lock:
            for tp in tps:
                st = self._parts.pop((tp.topic, tp.partition), None)
                if st is None:
                    continue
                st.revoked = True
                released = st.builder.size_bytes if st.builder else 0
                released += sum(seg.size_bytes for seg in st.pending)
                st.builder = None
                st.pending.clear()
                self.buffer.release(released)
                gone.append(st)
        for st in gone:  # per-partition series of partitions this worker no longer leads
            for gauge in (metrics.REMOTE_END_OFFSET, metrics.OFFLOAD_LAG, metrics.OFFLOAD_LAG_SECONDS):
                with contextlib.suppress(KeyError):
                    gauge.remove(st.tp.topic, str(st.tp.partition))
        if gone:
            consumer.incremental_unassign([KafkaTP(st.tp.topic, st.tp.partition) for st in gone])
            log.info("stopped leading %s", ", ".join(str(st.tp) for st in gone))
        metrics.BUFFER_BYTES.set(self.buffer.used)
        return gone

    def _set_paused(self, consumer: Consumer, paused: bool) -> None:
        assigned = [KafkaTP(t, p) for (t, p) in self._parts]
        if paused:
            consumer.pause(assigned)
            self.pause_count += 1
            metrics.CONSUMPTION_PAUSES.inc()
            log.info(
                "offload buffer full (%d of %d bytes): consumption paused",
                self.buffer.used,
                self.buffer.bound,
            )
        else:
            consumer.resume(assigned)
            log.info("offload buffer at %d bytes: consumption resumed", self.buffer.used)
        self.paused = paused
        metrics.CONSUMPTION_PAUSED.set(1 if paused else 0)

    def _take(self, consumer: Consumer, batch: list[Any]) -> None:
        """Encode a consumed batch into open segments: the one per-record loop of the leader.

        Messages arrive in runs from one partition, so the partition's state is looked up once per
        run, not per record. Buffer accounting is per batch: ``used`` only shrinks behind our back
        (copies release), so checking against it is safe.
        """
        parts = self._parts
        buffer = self.buffer
        segment_bytes = self.options.segment_bytes
        block_bytes = self.options.block_bytes
        refused: dict[tuple[str, int], int] = {}
        taken = 0
        used, bound, pending = buffer.used, buffer.bound, 0
        run_topic: str | None = None
        run_partition = -1
        st: _Partition | None = None
        for msg in batch:
            if msg.error() is not None:
                self._on_error(msg.error())
                continue
            topic = msg.topic()
            partition = msg.partition()
            if partition != run_partition or topic != run_topic:
                run_topic, run_partition = topic, partition
                st = parts.get((topic, partition))
                if st is not None and (topic, partition) in refused:
                    st = None
            if st is None:
                continue
            offset = msg.offset()
            if offset <= st.last_taken:
                continue  # redelivery after a seek: already in a segment
            key = msg.key()
            value = msg.value()
            headers = msg.headers()
            worst = (
                ENTRY_OVERHEAD + BLOCK_HEADER_LEN + (len(key) if key else 0) + (len(value) if value else 0)
            )
            if headers:
                worst += 4 + sum(8 + len(n.encode()) + (len(v) if v else 0) for n, v in headers)
            if used + pending + worst > bound and used + pending > 0:  # OffloadBuffer.fits, inlined
                refused[(topic, partition)] = offset
                st = None  # the rest of this partition's run waits too
                continue
            builder = st.builder
            if builder is None:
                start = st.next_start if st.next_start is not None else offset
                builder = st.builder = SegmentBuilder(st.tp.partition, start, block_bytes)
                st.opened_at_ms = time.monotonic() * 1000
            ts_type, ts = msg.timestamp()
            epoch = msg.leader_epoch()
            pending += builder.append(
                offset, ts_type, ts, key, value, headers, -1 if epoch is None else epoch
            )
            st.last_taken = offset
            taken += 1
            if builder.size_bytes >= segment_bytes:
                buffer.add(pending)  # before the seal: its copy may release these bytes at once
                used, pending = buffer.used, 0
                self._seal(st, RollReason.SIZE)
        buffer.add(pending)
        metrics.RECORDS_TAKEN.inc(taken)
        metrics.BUFFER_BYTES.set(buffer.used)
        if refused:
            for (topic, partition), offset in refused.items():
                consumer.seek(KafkaTP(topic, partition, offset))
            if not self.paused:
                self._set_paused(consumer, True)

    def _relieve_pressure(self) -> None:
        """Keep uploads flowing when open segments fill the buffer.

        With many partitions, open segments alone can fill the bound long before any reaches
        PROCESSOR_SEGMENT_BYTES; waiting for them would stall consumption (and a buffer holding only
        open segments would never drain). Above half the bound, seal the largest open segments of
        partitions with no copy queued or running, until the copy pool has work for every thread.
        """
        if self.buffer.used < self.buffer.bound // 2:
            return
        with self._lock:
            busy = sum(len(st.pending) + (1 if st.copying else 0) for st in self._parts.values())
            idle_parts = [
                st
                for st in self._parts.values()
                if st.builder is not None and not st.builder.empty and not st.pending and not st.copying
            ]
        slots = self.options.copy_concurrency - busy
        if slots <= 0 and busy:
            return
        idle_parts.sort(key=lambda s: s.builder.size_bytes if s.builder else 0, reverse=True)
        for st in idle_parts[: max(slots, 1)]:
            self._seal(st, RollReason.BUFFER)

    def _roll_due(self, now_ms: float) -> None:
        for st in list(self._parts.values()):
            b = st.builder
            if b is not None and self.policy.check(b.size_bytes, st.opened_at_ms, now_ms) is RollReason.TIME:
                self._seal(st, RollReason.TIME)

    def _update_lag(self, consumer: Consumer) -> None:
        """Publish each partition's offload lag, from the high watermark of the last fetch response
        (librdkafka caches it: no request is sent)."""
        for st in list(self._parts.values()):
            _low, high = consumer.get_watermark_offsets(KafkaTP(st.tp.topic, st.tp.partition), cached=True)
            if high is None or high < 0:
                continue
            covered = st.remote_end + 1 if st.remote_end is not None else 0
            st.lag = max(0, high - covered)
            metrics.OFFLOAD_LAG.labels(st.tp.topic, str(st.tp.partition)).set(st.lag)
            metrics.OFFLOAD_LAG_SECONDS.labels(st.tp.topic, str(st.tp.partition)).set(_unremote_age_s(st))

    def _on_error(self, err: KafkaError) -> None:
        if err.code() == KafkaError._PARTITION_EOF:
            return
        if err.fatal():
            raise ProcessorError(f"fatal source consumer error: {err}")
        log.warning("source consumer: %s", err)

    def _seal(self, st: _Partition, reason: RollReason) -> None:
        builder = st.builder
        if builder is None or builder.empty:
            return
        segment = builder.seal()
        st.builder = None
        st.next_start = segment.end_offset + 1
        metrics.SEGMENTS_ROLLED.labels(reason.value).inc()
        log.debug(
            "%s: rolled %d..%d (%d bytes, %s)",
            st.tp,
            segment.start_offset,
            segment.end_offset,
            segment.size_bytes,
            reason.value,
        )
        with self._lock:
            st.pending.append(segment)
            self._kick(st)

    # -- copying, on pool threads -----------------------------------------------------------------------

    def _kick(self, st: _Partition) -> None:
        """Start the partition's next copy if none runs (caller holds the lock)."""
        if st.copying or st.revoked or not (st.pending or st.dangling):
            return
        st.copying = True
        st.idle.clear()
        self._pool.submit(self._copy_next, st)

    def _copy_next(self, st: _Partition) -> None:
        try:
            while st.dangling and not st.revoked:
                if self._copier.delete_segment(st.dangling[0]):
                    st.dangling.pop(0)
                else:
                    break
            with self._lock:
                segment = st.pending[0] if st.pending and not st.revoked else None
            if segment is not None:
                self._copy_with_retries(st, segment)
        finally:
            with self._lock:
                st.copying = False
                if not st.revoked and st.pending:
                    self._kick(st)
                else:
                    st.idle.set()

    def _copy_with_retries(self, st: _Partition, segment: SealedSegment) -> None:
        backoff = self.options.retry_backoff_ms / 1000
        attempt = 0
        while not st.revoked and not self._stopping.is_set():
            attempt += 1
            expected = st.remote_end + 1 if st.remote_end is not None else segment.start_offset
            if segment.start_offset != expected:
                raise AssertionError(
                    f"{st.tp}: segment starts at {segment.start_offset}, coverage ends at {expected - 1}"
                )
            try:
                t0 = time.monotonic()
                done = self._copier.copy(st.tp, segment, st.epoch, still_leader=lambda: not st.revoked)
            except CopyCancelledError:
                return
            except ProcessorError as exc:
                metrics.COPY_FAILURES.inc()
                log.warning(
                    "%s: copy of %d..%d failed (attempt %d): %s; retrying in %.1f s",
                    st.tp,
                    segment.start_offset,
                    segment.end_offset,
                    attempt,
                    exc,
                    backoff,
                    extra={
                        "topic": st.tp.topic,
                        "partition": st.tp.partition,
                        "start_offset": segment.start_offset,
                        "end_offset": segment.end_offset,
                        "attempt": attempt,
                    },
                )
                if self._stopping.wait(backoff):
                    return
                backoff = min(backoff * 2, self.options.retry_backoff_max_ms / 1000)
                continue
            metrics.COPY_SECONDS.observe(time.monotonic() - t0)
            metrics.SEGMENTS_COPIED.inc()
            metrics.BYTES_COPIED.inc(segment.size_bytes)
            metrics.RECORDS_COPIED.inc(segment.record_count)
            metrics.REMOTE_END_OFFSET.labels(st.tp.topic, str(st.tp.partition)).set(done.end_offset)
            with self._lock:
                if st.pending and st.pending[0] is segment:
                    st.pending.popleft()
                    self.buffer.release(segment.size_bytes)
                st.remote_end = done.end_offset
            metrics.BUFFER_BYTES.set(self.buffer.used)
            return
