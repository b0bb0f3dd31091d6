"""The restore loop: archived records into the target with a transactional producer, exactly once.

One transaction at a time: records of the active source partitions (chunks read ahead from the
archive), then, once every record is acknowledged and its target offset known, one progress record
per source partition touched (position, totals, and that transaction's chunk of the offset map), then
commit. Records and progress commit together or not at all, so after a crash (SIGKILL at any moment)
the next run, which first fences the old producer (``init_transactions`` aborts its open
transaction), reads the committed progress and continues exactly where the committed records end:
no duplicate, no gap.

Errors: an abortable transaction error (a failed delivery, a broker timeout) aborts the transaction
and retries from the committed positions, a bounded number of times with backoff and jitter; a
fatal one (another run of the same restore fenced this one) stops the run.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from processor.errors import ProcessorError
from processor.restore.archive import ArchiveTopic, Chunk, ChunkStream
from processor.restore.offset_map import OffsetMap, concat, runs_from_pairs
from processor.restore.plan import PartitionPlan
from processor.restore.progress_record import (
    RestoreProgress,
    RestoreSource,
    encode_value,
    progress_key,
    progress_partition,
)
from processor.storage.rate_limited import ByteRateLimiter

log = logging.getLogger(__name__)

TXN_CALL_TIMEOUT_S = 60.0
DEFAULT_TRANSACTION_RECORDS = 50_000
DEFAULT_TRANSACTION_MS = 5_000


class RestoreError(ProcessorError):
    """The restore stopped; what is committed stays, and a new run continues from there."""


class RestoreFencedError(RestoreError):
    """Another run of the same restore (same transactional id) took over."""


@dataclass(frozen=True, slots=True)
class RestoreOptions:
    transaction_records: int = DEFAULT_TRANSACTION_RECORDS
    transaction_bytes: int = 32 * 1024 * 1024
    transaction_ms: int = DEFAULT_TRANSACTION_MS
    parallel_partitions: int = 4
    max_bytes_per_second: int | None = None
    max_records_per_second: int | None = None
    retries: int = 5


@dataclass
class PartitionRun:
    """One source partition's state during a run (committed values only)."""

    plan: PartitionPlan
    position: int
    sequence: int
    records_total: int
    bytes_total: int
    offset_map: OffsetMap | None
    records_run: int = 0
    bytes_run: int = 0
    transactions_run: int = 0
    stream: ChunkStream | None = None
    exhausted: bool = False  # the stream ended: this run has read everything up to plan.stop

    @property
    def done(self) -> bool:
        return self.position >= self.plan.stop


@dataclass
class _Transaction:
    """What the open transaction holds, to turn delivery reports into offset map chunks."""

    started: float = field(default_factory=time.monotonic)
    records: int = 0
    bytes: int = 0
    source_offsets: dict[int, list[int]] = field(default_factory=dict)
    bytes_by_source: dict[int, int] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    order: dict[int, list[list[int]]] = field(default_factory=dict)  # target p -> [[source p, count]]

    def add(self, source_partition: int, target_partition: int, chunk: Chunk) -> None:
        n = len(chunk.records)
        self.records += n
        self.bytes += chunk.record_bytes
        self.source_offsets.setdefault(source_partition, []).extend(r.offset for r in chunk.records)
        self.bytes_by_source[source_partition] = (
            self.bytes_by_source.get(source_partition, 0) + chunk.record_bytes
        )
        self.positions[source_partition] = chunk.position
        if n:
            runs = self.order.setdefault(target_partition, [])
            if runs and runs[-1][0] == source_partition:
                runs[-1][1] += n
            else:
                runs.append([source_partition, n])

    def target_offsets(self, delivered: dict[int, list[int]]) -> dict[int, list[int]]:
        """Each source partition's target offsets, in produce order, from the delivery reports."""
        out: dict[int, list[int]] = {p: [] for p in self.source_offsets}
        for target_partition, runs in self.order.items():
            offsets = delivered.get(target_partition, [])
            if len(offsets) != sum(count for _p, count in runs):
                raise RestoreError(
                    f"target partition {target_partition}: {len(offsets)} delivery reports for "
                    f"{sum(c for _p, c in runs)} records produced"
                )
            i = 0
            for source_partition, count in runs:
                out[source_partition].extend(offsets[i : i + count])
                i += count
        return out


class Restorer:
    def __init__(
        self,
        producer: Producer,
        archive: ArchiveTopic,
        restore_id: str,
        source: RestoreSource,
        runs: list[PartitionRun],
        progress_topic: str,
        progress_partitions: int,
        options: RestoreOptions,
        on_advance: Callable[[int], None] = lambda _n: None,
    ) -> None:
        self.producer = producer
        self.archive = archive
        self.restore_id = restore_id
        self.source = source
        self.runs = runs
        self.progress_topic = progress_topic
        self.progress_partition = progress_partition(restore_id, progress_partitions)
        self.options = options
        self.on_advance = on_advance
        self._delivered: dict[int, list[int]] = {}
        self._errors: list[KafkaError] = []
        self._bytes_limit = (
            ByteRateLimiter(options.max_bytes_per_second) if options.max_bytes_per_second else None
        )
        self._records_limit = (
            ByteRateLimiter(options.max_records_per_second) if options.max_records_per_second else None
        )
        self.transactions = 0
        self._turn = 0

    # -- delivery reports (called from producer.poll / flush on this thread) -------------------------

    def on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        if err is not None:
            self._errors.append(err)
        elif msg.topic() == self.source.target_topic:
            self._delivered.setdefault(msg.partition(), []).append(msg.offset())

    def _progress_delivered(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self._errors.append(err)

    # -- the loop -------------------------------------------------------------------------------------

    def run(self) -> None:
        pending = [r for r in self.runs if not r.done]
        active: list[PartitionRun] = []
        failures = 0
        try:
            while pending or active:
                while pending and len(active) < self.options.parallel_partitions:
                    run = pending.pop(0)
                    run.stream = self.archive.chunks(run.plan.source_partition, run.position, run.plan.stop)
                    run.exhausted = False
                    active.append(run)
                try:
                    self._one_transaction(active)
                    failures = 0
                except KafkaException as exc:
                    failures = self._recover(exc.args[0], active, failures)
                for run in [r for r in active if r.done]:
                    self._close_stream(run)
                    active.remove(run)
        finally:
            for run in active:
                self._close_stream(run)

    def _close_stream(self, run: PartitionRun) -> None:
        if run.stream is not None:
            run.stream.close()
            run.stream = None

    def _recover(self, error: KafkaError, active: list[PartitionRun], failures: int) -> int:
        if error.fatal() or error.code() == KafkaError._FENCED:
            raise RestoreFencedError(
                f"restore {self.restore_id}: another run of this restore took over ({error.str()}); "
                "what this run committed stays"
            )
        if not error.txn_requires_abort() and not error.retriable():
            raise RestoreError(f"restore {self.restore_id}: {error.str()}")
        failures += 1
        if failures > self.options.retries:
            raise RestoreError(
                f"restore {self.restore_id}: transaction failed {failures} times in a row, "
                f"last: {error.str()}; "
                "run the restore again to continue from what is committed"
            )
        log.warning(
            "restore transaction failed (%s); aborting and retrying from the committed positions", error.str()
        )
        self.producer.abort_transaction(TXN_CALL_TIMEOUT_S)
        for run in active:  # re-read from the committed positions
            self._close_stream(run)
            run.stream = self.archive.chunks(run.plan.source_partition, run.position, run.plan.stop)
            run.exhausted = False
        time.sleep(min(0.2 * 2**failures, 10.0) * random.uniform(0.8, 1.2))
        return failures

    def _next_chunk(self, run: PartitionRun) -> Chunk | None:
        assert run.stream is not None
        chunk = run.stream.next_chunk()
        if chunk is None:
            run.exhausted = True
        return chunk

    def _full(self, txn: _Transaction) -> bool:
        o = self.options
        return (
            txn.records >= o.transaction_records
            or txn.bytes >= o.transaction_bytes
            or (time.monotonic() - txn.started) * 1000 >= o.transaction_ms
        )

    def _one_transaction(self, active: list[PartitionRun]) -> None:
        self._delivered = {}
        self._errors = []
        txn = _Transaction()
        self.producer.begin_transaction()
        while not self._full(txn):
            took = False
            first = self._turn
            for i in range(len(active)):  # round robin, continuing after where the last chunk came from
                index = (first + i) % len(active)
                run = active[index]
                if run.exhausted or self._full(txn):
                    continue
                self._turn = (index + 1) % len(active)
                chunk = self._next_chunk(run)
                if chunk is None:
                    continue
                took = True
                self._produce(run, chunk)
                txn.add(run.plan.source_partition, run.plan.target_partition, chunk)
            if not took:
                break
        if not txn.positions:
            self.producer.abort_transaction(TXN_CALL_TIMEOUT_S)
            for run in active:  # streams ended without a new chunk: nothing left before stop
                if run.exhausted and not run.done:
                    raise RestoreError(
                        f"partition {run.plan.source_partition}: the archive read ended at {run.position}"
                    )
            return
        self._flush()
        if self._errors:
            raise KafkaException(self._errors[0])
        target_offsets = txn.target_offsets(self._delivered)
        written: list[tuple[PartitionRun, RestoreProgress]] = []
        now_ms = int(time.time() * 1000)
        for run in active:
            p = run.plan.source_partition
            if p not in txn.positions:
                continue
            try:
                chunk_map = OffsetMap(
                    p,
                    run.plan.target_partition,
                    run.position,
                    txn.positions[p],
                    tuple(runs_from_pairs(txn.source_offsets[p], target_offsets[p])),
                )
            except ValueError as exc:
                raise RestoreError(
                    f"partition {p}: delivery reports do not form an offset map: {exc}"
                ) from None
            progress = RestoreProgress(
                self.restore_id,
                self.source,
                p,
                run.plan.target_partition,
                run.sequence,
                txn.positions[p],
                run.records_total + len(txn.source_offsets[p]),
                run.bytes_total + txn.bytes_by_source[p],
                chunk_map,
                now_ms,
            )
            self._produce_progress(progress)
            written.append((run, progress))
        self.producer.commit_transaction(TXN_CALL_TIMEOUT_S)
        self.transactions += 1
        for run, progress in written:
            advanced = progress.next_source_offset - run.position
            run.records_run += progress.records_total - run.records_total
            run.bytes_run += progress.bytes_total - run.bytes_total
            run.transactions_run += 1
            run.position = progress.next_source_offset
            run.sequence = progress.sequence + 1
            run.records_total = progress.records_total
            run.bytes_total = progress.bytes_total
            run.offset_map = concat(m for m in (run.offset_map, progress.offset_map) if m is not None)
            self.on_advance(advanced)

    def _produce(self, run: PartitionRun, chunk: Chunk) -> None:
        if self._bytes_limit is not None:
            self._bytes_limit.acquire(chunk.record_bytes)
        if self._records_limit is not None:
            self._records_limit.acquire(len(chunk.records))
        produce = self.producer.produce
        poll = self.producer.poll
        delivered = self.on_delivery
        topic = self.source.target_topic
        partition = run.plan.target_partition
        for r in chunk.records:
            headers: Any = list(r.headers) if r.headers else None
            while True:
                try:
                    produce(
                        topic,
                        r.value,
                        r.key,
                        partition=partition,
                        on_delivery=delivered,
                        timestamp=r.timestamp,
                        headers=headers,
                    )
                    break
                except BufferError:  # librdkafka's queue is full: serve delivery reports, then retry
                    poll(0.05)
        poll(0)

    def _produce_progress(self, progress: RestoreProgress) -> None:
        self.producer.produce(
            self.progress_topic,
            encode_value(progress),
            progress_key(self.restore_id, progress.source_partition, progress.sequence),
            partition=self.progress_partition,
            on_delivery=self._progress_delivered,
        )

    def _flush(self) -> None:
        deadline = time.monotonic() + TXN_CALL_TIMEOUT_S
        while self.producer.flush(1.0) > 0:
            if time.monotonic() > deadline:
                raise RestoreError(f"records not acknowledged within {TXN_CALL_TIMEOUT_S:.0f} s")
