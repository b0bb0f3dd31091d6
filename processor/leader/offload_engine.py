"""The leader's data path, wired: batch source -> segment assembler -> copy scheduler.

- ``batch_source.BatchSource`` fetches the led partitions as whole Kafka record batches
  (aiokafka's low-level client) and is the only code that talks to brokers for records;
- ``segment.segment_assembler.SegmentAssembler`` turns each partition's batches into sealed
  format 2 segments (pure; this engine decides when to roll: ``roll_policy``);
- ``copy_scheduler.CopyScheduler`` copies sealed segments in per-partition order with retries and
  cancellation on revoke.

Why below Faust: a Faust agent tops out near 10 k records/s; here no record is even decoded (one
entry per batch). Faust keeps group membership (= leadership), lifecycle and the web server.

Threads: one engine thread runs an asyncio loop with the batch source, the assembly (the
``_on_fetched`` callback) and housekeeping (time rolls, buffer pressure, lag). Control calls from
other threads (``assign``, ``revoke``, ``roll_all``) are coroutines submitted to that loop with
``asyncio.run_coroutine_threadsafe``, i.e. ``concurrent.futures.Future`` results.

Memory: every byte added to a segment is counted in the :class:`OffloadBuffer` until its segment is
copied. A batch that does not fit is not taken: the partition's position stays at it and fetching
pauses until uploads bring the buffer under its resume mark. If the buffer is full of open segments
only, the largest roll early, so the bound never deadlocks the worker.

Positions are never committed to Kafka: a partition (re)assigned to this worker resumes at the
highest COPY_SEGMENT_FINISHED end offset + 1 on the metadata topic, or at the log start when
nothing is remote yet (historical data is offloaded too, PIP-76).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from processor import metrics
from processor.errors import ProcessorError
from processor.health import HEALTH
from processor.leader.batch_source import BatchSource, Fetched, OnFetched, OnLost
from processor.leader.copy_scheduler import Backoff, CopyScheduler
from processor.leader.offload_buffer import OffloadBuffer
from processor.leader.roll_policy import RollPolicy, RollReason
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler

log = logging.getLogger(__name__)

LAG_INTERVAL_S = 2.0
HOUSEKEEPING_S = 0.05
RemoteStateLoader = Callable[[list[TopicPartition]], dict[TopicPartition, PartitionRemoteState]]
SourceFactory = Callable[[OnFetched, OnLost], BatchSource]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class EngineOptions:
    segment_bytes: int
    segment_ms: int
    block_bytes: int
    buffer_bytes: int
    copy_concurrency: int = 8
    retry_backoff_ms: int = 500
    retry_backoff_max_ms: int = 30_000
    revoke_wait_s: float = 30.0
    archive_compression: str = "keep"  # off | keep | zstd (PROCESSOR_ARCHIVE_COMPRESSION)


@dataclass(eq=False)
class _Partition:
    tp: TopicPartition
    next_start: int | None  # where the next segment's coverage starts; None: at the first batch
    last_taken: int  # highest offset in a segment (open or sealed) or covered by one
    assembler: SegmentAssembler | None = None
    opened_at_ms: float = 0.0
    lag: int | None = None
    remote_end: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _unremote_age_s(st: _Partition, pending: list[SealedSegment]) -> float:
    """Age of the oldest record of the partition not yet remote: from its timestamp when it sits in
    a sealed segment or a closed block, else since the open segment took its first batch; 0 when
    the worker holds nothing of the partition (the figure operators alert on)."""
    asm = st.assembler
    infos = pending[0].block_infos if pending else (asm.infos if asm is not None else [])
    if infos:
        return max(0.0, time.time() - infos[0].min_timestamp / 1000)
    if asm is not None and not asm.empty:
        return max(0.0, time.monotonic() - st.opened_at_ms / 1000)
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
        source_factory: SourceFactory,
        copier: SegmentCopier,
        load_remote_state: RemoteStateLoader,
    ) -> None:
        self.options = options
        self.policy = RollPolicy(options.segment_bytes, options.segment_ms)
        self.buffer = OffloadBuffer(options.buffer_bytes)
        self._source_factory = source_factory
        self._load_remote_state = load_remote_state
        self.copies = CopyScheduler(
            copier,
            self.buffer,
            options.copy_concurrency,
            Backoff(options.retry_backoff_ms / 1000, options.retry_backoff_max_ms / 1000, 0.2),
            on_failure=self._fail,
        )
        self._parts: dict[TopicPartition, _Partition] = {}
        self._lock = threading.Lock()  # guards _parts for status() readers on other threads
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready: Future[None] = Future()
        self._thread: threading.Thread | None = None
        self._source: BatchSource | None = None
        self.paused = False
        self.pause_count = 0
        self.failure: BaseException | None = None

    # -- control, from any thread -----------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        self._thread = threading.Thread(target=self._run, name="offload-engine", daemon=True)
        self._thread.start()
        self._ready.result(timeout_s)  # raises what kept the batch source from starting

    def stop(self, timeout_s: float = 30.0) -> None:
        loop, stop_event = self._loop, self._stop_event
        if loop is not None and stop_event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop_event.set)
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.copies.stop()

    def assign(self, tps: Iterable[TopicPartition], epoch: int, timeout_s: float = 60.0) -> None:
        wanted = sorted(set(tps))
        with self._lock:
            new = [tp for tp in wanted if tp not in self._parts]
        if not new:
            return
        remote = self._load_remote_state(new)  # reads the metadata topic: not on the engine loop
        self._call(self._do_assign(new, remote, epoch), timeout_s)

    def revoke(self, tps: Iterable[TopicPartition]) -> None:
        """Stop leading ``tps``. Sleeping retries wake, copies stop before their next step and never
        publish FINISHED; returns once their copies ended (or the bounded wait is over)."""
        lanes = self._call(self._do_revoke(sorted(set(tps))), self.options.revoke_wait_s)
        deadline = time.monotonic() + self.options.revoke_wait_s
        for lane in lanes:
            if not lane.idle.wait(max(0.0, deadline - time.monotonic())):
                log.warning(
                    "copy of %s still running after revocation; it will not publish FINISHED", lane.tp
                )

    def roll_all(self) -> None:
        """Seal every open segment now (operators, tests, graceful hand-over)."""
        self._call(self._do_roll_all(), 30.0)

    def status(self) -> dict[TopicPartition, PartitionStatus]:
        with self._lock:
            parts = list(self._parts.values())
        out: dict[TopicPartition, PartitionStatus] = {}
        for st in parts:
            lane = self.copies.lane(st.tp)
            out[st.tp] = PartitionStatus(
                lane.remote_end if lane else st.remote_end,
                st.assembler.size_bytes if st.assembler else 0,
                len(lane.pending) if lane else 0,
                lane.copying if lane else False,
                st.lag,
            )
        return out

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        loop = self._loop
        if loop is None or self._thread is None or not self._thread.is_alive():
            coro.close()
            raise ProcessorError("the offload engine is not running")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise ProcessorError(
                f"offload engine did not complete the call within {timeout_s:.0f} s"
            ) from None

    def _fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        HEALTH.report("data_path", f"offload engine failed: {type(exc).__name__}: {exc}", fatal=True)

    # -- the engine thread ------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # surfaced through .failure, health and the worker's exit code
            log.exception("offload engine crashed")
            self._fail(exc)
            if not self._ready.done():
                self._ready.set_exception(exc)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        source = self._source = self._source_factory(self._on_fetched, self._on_lost)
        await source.start()
        self._ready.set_result(None)
        tasks = [asyncio.create_task(source.run()), asyncio.create_task(self._housekeeping())]
        stopper = asyncio.create_task(self._stop_event.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper:
                    task.result()  # a task that ended on its own: raise its error
                    raise ProcessorError("an offload engine task ended unexpectedly")
        finally:
            for task in [*tasks, stopper]:
                task.cancel()
            await asyncio.gather(*tasks, stopper, return_exceptions=True)
            await source.close()

    async def _do_assign(
        self, tps: list[TopicPartition], remote: dict[TopicPartition, PartitionRemoteState], epoch: int
    ) -> None:
        assert self._source is not None
        for tp in tps:
            if tp in self._parts:
                continue
            state = remote.get(tp) or PartitionRemoteState()
            end = state.highest_finished_offset()
            st = _Partition(tp, None if end is None else end + 1, -1 if end is None else end, remote_end=end)
            dangling = state.dangling()
            self.copies.open(tp, epoch, end, dangling)
            with self._lock:
                self._parts[tp] = st
            self._source.add(tp, None if end is None else end + 1)
            metrics.REMOTE_END_OFFSET.labels(tp.topic, str(tp.partition)).set(-1 if end is None else end)
            log.info(
                "leading %s (epoch %d): resuming at %s, %d dangling copies to clean",
                tp,
                epoch,
                "the earliest offset" if end is None else end + 1,
                len(dangling),
            )

    async def _do_revoke(self, tps: list[TopicPartition]) -> list[Any]:
        assert self._source is not None
        lanes = []
        for tp in tps:
            with self._lock:
                st = self._parts.pop(tp, None)
            if st is None:
                continue
            self._source.remove(tp)
            if st.assembler is not None:
                self.buffer.release(st.assembler.held_bytes)
                st.assembler = None
            lane = self.copies.revoke(tp)
            if lane is not None:
                lanes.append(lane)
            for gauge in (metrics.REMOTE_END_OFFSET, metrics.OFFLOAD_LAG, metrics.OFFLOAD_LAG_SECONDS):
                with contextlib.suppress(KeyError):
                    gauge.remove(tp.topic, str(tp.partition))
        if lanes:
            log.info("stopped leading %s", ", ".join(str(lane.tp) for lane in lanes))
        metrics.BUFFER_BYTES.set(self.buffer.used)
        return lanes

    async def _do_roll_all(self) -> None:
        for st in list(self._parts.values()):
            self._seal(st, RollReason.REQUESTED)

    # -- assembly: batches in, sealed segments to the copy scheduler ------------------------------------

    def _on_fetched(self, fetched: Fetched) -> int:
        """Add one partition's fetched batches to its open segment; return where fetching goes on.

        Batches are taken whole or not at all: one that does not fit in the buffer stays in Kafka
        (the returned position points at it) and fetching pauses.
        """
        st = self._parts.get(fetched.tp)
        position = fetched.fetch_offset
        if st is None:
            return position
        buffer = self.buffer
        taken = 0
        for header, batch, keep in fetched.batches:
            last = header.last_offset
            if last <= st.last_taken:
                position = last + 1
                continue
            if keep:
                need = len(batch) + BLOCK_HEADER_LEN + 12
                if buffer.used + need > buffer.bound and buffer.used > 0:
                    self._pause()
                    break
                asm = st.assembler
                if asm is None:
                    start = st.next_start if st.next_start is not None else header.base_offset
                    asm = st.assembler = SegmentAssembler(
                        st.tp.partition, start, self.options.block_bytes, self.options.archive_compression
                    )
                    st.opened_at_ms = time.monotonic() * 1000
                buffer.add(asm.append(header, batch))
                taken += header.record_count
            elif st.assembler is not None:
                st.assembler.cover(last)
            elif st.next_start is None:
                st.next_start = header.base_offset  # coverage starts at the first offset seen
            st.last_taken = last
            position = last + 1
            if st.assembler is not None and st.assembler.size_bytes >= self.options.segment_bytes:
                self._seal(st, RollReason.SIZE)
        if fetched.high_watermark >= 0:
            st.extra["high_watermark"] = fetched.high_watermark
        metrics.RECORDS_TAKEN.inc(taken)
        metrics.BUFFER_BYTES.set(buffer.used)
        return position

    def _on_lost(self, tp: TopicPartition, first: int, last: int) -> None:
        st = self._parts.get(tp)
        if st is None:
            return
        count = last - first + 1
        log.error(
            "%s: offsets %d..%d (%d records) were deleted by the broker's retention before they were "
            "offloaded: they are lost; offloading continues at %d",
            tp,
            first,
            last,
            count,
            last + 1,
        )
        metrics.OFFSETS_LOST.labels(tp.topic, str(tp.partition)).inc(count)
        self._seal(st, RollReason.REQUESTED)
        st.next_start = last + 1
        st.last_taken = max(st.last_taken, last)

    def _seal(self, st: _Partition, reason: RollReason) -> None:
        asm = st.assembler
        if asm is None or asm.empty:
            return
        segment = asm.seal()
        st.assembler = None
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
        self.copies.submit(st.tp, segment)

    def _pause(self) -> None:
        assert self._source is not None
        if not self.paused:
            self.paused = True
            self._source.paused = True
            self.pause_count += 1
            metrics.CONSUMPTION_PAUSES.inc()
            metrics.CONSUMPTION_PAUSED.set(1)
            log.info(
                "offload buffer full (%d of %d bytes): consumption paused",
                self.buffer.used,
                self.buffer.bound,
            )

    # -- housekeeping on the loop ---------------------------------------------------------------------

    async def _housekeeping(self) -> None:
        assert self._source is not None
        next_lag = 0.0
        while True:
            await asyncio.sleep(HOUSEKEEPING_S)
            if self.failure is not None:
                raise ProcessorError(f"the data path failed: {self.failure}")
            now = time.monotonic()
            for st in list(self._parts.values()):
                asm = st.assembler
                if asm is not None and self.policy.check(asm.size_bytes, st.opened_at_ms, now * 1000) is (
                    RollReason.TIME
                ):
                    self._seal(st, RollReason.TIME)
            self._relieve_pressure()
            if self.paused and self.buffer.can_resume():
                self.paused = False
                self._source.paused = False
                self._source.wake()
                metrics.CONSUMPTION_PAUSED.set(0)
                log.info("offload buffer at %d bytes: consumption resumed", self.buffer.used)
            if now >= next_lag:
                self._update_lag()
                next_lag = now + LAG_INTERVAL_S

    def _relieve_pressure(self) -> None:
        """Keep uploads flowing while the buffer fills (a backlog: fetching outruns uploads).

        Above a quarter of the bound, an idle copy slot takes the largest open segment of a
        partition with no copy queued or running once it holds a fair share of the bound
        (bound / (4 x copy concurrency)); above half the bound, any open segment. Measured here:
        waiting for half the bound sealed every partition's segment at once, so all uploads ended
        together and the pipeline idled while the buffer refilled (48 MB/s instead of ~100).
        """
        used, bound = self.buffer.used, self.buffer.bound
        if used < bound // 4:
            return
        busy = self.copies.busy()
        slots = self.copies.concurrency - busy
        if slots <= 0 and (busy or used < bound // 2):
            return
        fair_share = 0 if used >= bound // 2 else bound // (4 * self.copies.concurrency)
        idle = []
        for st in self._parts.values():
            lane = self.copies.lane(st.tp)
            asm = st.assembler
            if asm is None or asm.empty or asm.size_bytes < fair_share:
                continue
            if lane is not None and not lane.pending and not lane.copying:
                idle.append(st)
        idle.sort(key=lambda s: s.assembler.size_bytes if s.assembler else 0, reverse=True)
        for st in idle[: max(slots, 1)]:
            self._seal(st, RollReason.BUFFER)

    def _update_lag(self) -> None:
        """Each partition's offload lag, from the high watermark of its last fetch response."""
        for st in list(self._parts.values()):
            lane = self.copies.lane(st.tp)
            pending = list(lane.pending) if lane is not None else []
            metrics.OFFLOAD_LAG_SECONDS.labels(st.tp.topic, str(st.tp.partition)).set(
                _unremote_age_s(st, pending)
            )
            high = st.extra.get("high_watermark")
            if high is None:
                continue
            remote_end = lane.remote_end if lane else st.remote_end
            covered = remote_end + 1 if remote_end is not None else 0
            st.lag = max(0, high - covered)
            metrics.OFFLOAD_LAG.labels(st.tp.topic, str(st.tp.partition)).set(st.lag)
