"""The leader's data path, wired: batch source -> segment assembler -> copy scheduler.

- ``batch_source.BatchSource`` fetches the led partitions as whole Kafka record batches
  (aiokafka's low-level client) and is the only code that talks to brokers for records;
- ``segment.segment_assembler.SegmentAssembler`` turns each partition's batches into sealed
  format 2 segments (pure; this engine decides when to roll: ``roll_policy``);
- ``copy_scheduler.CopyScheduler`` copies sealed segments in per-partition order with retries and
  cancellation on revoke.

Why below Faust: a Faust agent tops out near 10 k records/s; here no record is even decoded (one
entry per batch). Faust keeps group membership (= leadership), lifecycle and the web server.

Threads: one engine thread runs an asyncio loop (``engine_loop``) with the batch source, the
assembly (``assembly``, the ``_on_fetched`` callback) and housekeeping (time rolls, buffer pressure:
``buffer_pressure``, lag gauges: ``engine_gauges``). Control calls from other threads (``assign``,
``revoke``, ``roll_all``) are coroutines submitted to that loop with
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
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from processor import metrics
from processor.errors import ProcessorError
from processor.kafka.partition import TopicPartition
from processor.leader.assembly import Assembly
from processor.leader.batch_source import BatchSource, Fetched, OnFetched, OnLost
from processor.leader.buffer_pressure import segments_to_roll
from processor.leader.copy_scheduler import Backoff, CopyScheduler
from processor.leader.engine_gauges import LAG_INTERVAL_S, drop_partition_gauges, update_lag
from processor.leader.engine_loop import EngineLoop
from processor.leader.high_watermarks import HighWatermarks
from processor.leader.led_partition import LedPartition, PartitionStatus
from processor.leader.malloc_tuning import tune_allocator
from processor.leader.offload_buffer import OffloadBuffer
from processor.leader.roll_policy import RollPolicy, RollReason
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.remote_log_state import PartitionRemoteState

log = logging.getLogger(__name__)

HOUSEKEEPING_S = 0.05
RemoteStateLoader = Callable[[list[TopicPartition]], dict[TopicPartition, PartitionRemoteState]]
SourceFactory = Callable[[OnFetched, OnLost], BatchSource]


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


class OffloadEngine(EngineLoop):
    def __init__(
        self,
        options: EngineOptions,
        source_factory: SourceFactory,
        copier: SegmentCopier,
        load_remote_state: RemoteStateLoader,
        high_watermarks: HighWatermarks | None = None,
    ) -> None:
        super().__init__()
        self.options = options
        # asked of the brokers on their own schedule (the copy lag must not depend on fetching);
        # without it (tests, tools) the lag in records comes from fetch responses only
        self._high_watermarks = high_watermarks
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
        self.assembly = Assembly(
            self.buffer,
            options.block_bytes,
            options.segment_bytes,
            options.archive_compression,
            self._seal,
            self._pause,
        )
        self.copier = copier
        self._parts: dict[TopicPartition, LedPartition] = {}
        # partitions another claim took while Faust still assigns them here: not fetched or copied,
        # but their copy lag gauges stay and keep growing until someone leads them again
        self._watched: dict[TopicPartition, LedPartition] = {}
        self._lock = threading.Lock()  # guards _parts for status() readers on other threads
        self._source: BatchSource | None = None
        self.paused = False
        self.pause_count = 0

    # -- control, from any thread -----------------------------------------------------------------

    def start(self, timeout_s: float = 60.0) -> None:
        tune_allocator()  # fetch responses reuse mapped pages (malloc_tuning)
        self._start_thread(timeout_s)  # raises what kept the batch source from starting
        if self._high_watermarks is not None:
            self._high_watermarks.start()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop_thread(timeout_s)
        self.copies.stop()
        if self._high_watermarks is not None:
            self._high_watermarks.stop()

    def assign(self, epochs: Mapping[TopicPartition, int], timeout_s: float = 60.0) -> None:
        """Lead the partitions of ``epochs``, each under its claim epoch."""
        with self._lock:
            new = sorted(tp for tp in epochs if tp not in self._parts)
        if not new:
            return
        remote = self._load_remote_state(new)  # reads the metadata topic: not on the engine loop
        self._call(self._do_assign(new, remote, dict(epochs)), timeout_s)

    def revoke(self, tps: Iterable[TopicPartition], watch: bool = False) -> None:
        """Stop leading ``tps``. Sleeping retries wake, copies stop before their next step and never
        publish FINISHED; returns once their copies ended (or the bounded wait is over). ``watch``:
        keep their copy lag gauges (another claim took them; Faust still assigns them here)."""
        lanes = self._call(self._do_revoke(sorted(set(tps)), watch), self.options.revoke_wait_s)
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

    # -- the engine thread ------------------------------------------------------------------------

    async def _main(self) -> None:
        source = self._source = self._source_factory(self._on_fetched, self._on_lost)
        await source.start()
        self._started()
        try:
            await self._until_stopped(
                [asyncio.create_task(source.run()), asyncio.create_task(self._housekeeping())]
            )
        finally:
            await source.close()

    async def _do_assign(
        self,
        tps: list[TopicPartition],
        remote: dict[TopicPartition, PartitionRemoteState],
        epochs: dict[TopicPartition, int],
    ) -> None:
        assert self._source is not None
        for tp in tps:
            if tp in self._parts:
                continue
            epoch = epochs[tp]
            self._watched.pop(tp, None)
            state = remote.get(tp) or PartitionRemoteState()
            end = state.highest_finished_offset()
            st = LedPartition(
                tp, None if end is None else end + 1, -1 if end is None else end, remote_end=end
            )
            dangling = state.dangling()
            self.copies.open(tp, epoch, end, dangling)
            with self._lock:
                self._parts[tp] = st
            self._source.add(tp, None if end is None else end + 1)
            if self._high_watermarks is not None:
                self._high_watermarks.add(tp)
            metrics.REMOTE_END_OFFSET.labels(tp.topic, str(tp.partition)).set(-1 if end is None else end)
            log.info(
                "leading %s (epoch %d): resuming at %s, %d dangling copies to clean",
                tp,
                epoch,
                "the earliest offset" if end is None else end + 1,
                len(dangling),
            )

    async def _do_revoke(self, tps: list[TopicPartition], watch: bool = False) -> list[Any]:
        assert self._source is not None
        lanes = []
        for tp in tps:
            with self._lock:
                st = self._parts.pop(tp, None)
            if st is None:
                if not watch and self._watched.pop(tp, None) is not None:
                    self._unwatch(tp)
                continue
            self._source.remove(tp)
            if st.assembler is not None:
                self.buffer.release(st.assembler.held_bytes)
                st.assembler = None
            lane = self.copies.revoke(tp)
            if lane is not None:
                lanes.append(lane)
                st.remote_end = lane.remote_end
            if watch:
                self._watched[tp] = st
            else:
                self._unwatch(tp)
        if lanes:
            log.info("stopped leading %s", ", ".join(str(lane.tp) for lane in lanes))
        metrics.BUFFER_BYTES.set(self.buffer.used)
        return lanes

    def _unwatch(self, tp: TopicPartition) -> None:
        if self._high_watermarks is not None:
            self._high_watermarks.remove(tp)
        drop_partition_gauges(tp)

    async def _do_roll_all(self) -> None:
        for st in list(self._parts.values()):
            self._seal(st, RollReason.REQUESTED)

    # -- assembly: batches in, sealed segments to the copy scheduler ------------------------------------

    def _on_fetched(self, fetched: Fetched) -> int:
        """Add one partition's fetched batches to its open segment (see ``assembly``)."""
        st = self._parts.get(fetched.tp)
        if st is None:
            return fetched.fetch_offset
        return self.assembly.take(st, fetched)

    def _on_lost(self, tp: TopicPartition, first: int, last: int) -> None:
        st = self._parts.get(tp)
        if st is not None:
            self.assembly.lost(st, first, last)

    def _seal(self, st: LedPartition, reason: RollReason) -> None:
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
            for st in segments_to_roll(list(self._parts.values()), self.copies, self.buffer):
                self._seal(st, RollReason.BUFFER)
            if self.paused and self.buffer.can_resume():
                self.paused = False
                self._source.paused = False
                self._source.wake()
                metrics.CONSUMPTION_PAUSED.set(0)
                log.info("offload buffer at %d bytes: consumption resumed", self.buffer.used)
            if now >= next_lag:
                update_lag(
                    [*self._parts.values(), *self._watched.values()], self.copies, self._high_watermarks
                )
                next_lag = now + LAG_INTERVAL_S
