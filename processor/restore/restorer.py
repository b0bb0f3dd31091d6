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

import contextlib
import logging
import random
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from processor.errors import ProcessorError
from processor.metadata.model import TopicPartition
from processor.restore.archive import ArchiveTopic, Chunk
from processor.restore.delivery import (
    DeliveryFailedError,
    DeliveryMismatchError,
    ReadBack,
    Span,
    landed,
    offsets_in_range,
)
from processor.restore.log_reader import read_partition_log
from processor.restore.offset_map import OffsetMap, concat
from processor.restore.produce import produce_chunk
from processor.restore.progress_record import (
    RestoreProgress,
    RestoreSource,
    encode_value,
    progress_key,
    progress_partition,
)
from processor.restore.state import PartitionRun, RestoreOptions, Transaction
from processor.restore.target import TargetCluster
from processor.storage.rate_limited import ByteRateLimiter

log = logging.getLogger(__name__)

TXN_CALL_TIMEOUT_S = 60.0


class RestoreError(ProcessorError):
    """The restore stopped; what is committed stays, and a new run continues from there."""


class RestoreFencedError(RestoreError):
    """Another run of the same restore (same transactional id) took over."""


class Restorer:
    def __init__(
        self,
        producer: Producer,
        target: TargetCluster,
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
        self.target = target
        self.archive = archive
        self.restore_id = restore_id
        self.source = source
        self.runs = runs
        self.progress_topic = progress_topic
        self.progress_partition = progress_partition(restore_id, progress_partitions)
        self.options = options
        self.on_advance = on_advance
        self._errors: list[KafkaError] = []
        self._bytes_limit = (
            ByteRateLimiter(options.max_bytes_per_second) if options.max_bytes_per_second else None
        )
        self._records_limit = (
            ByteRateLimiter(options.max_records_per_second) if options.max_records_per_second else None
        )
        self.transactions = 0
        self.read_backs = 0  # target partitions whose log a transaction had to read back
        self._turn = 0

    # -- delivery reports (called from producer.poll / flush on this thread) -------------------------

    def _read_back(self, txn: Transaction) -> ReadBack:
        """Our offsets in a range of a target partition, from its log (see delivery.py). The log is
        read once per partition and transaction, from the transaction's first record there: a batch
        base (librdkafka starts new batches in a new transaction), which every broker answers with
        the batch itself."""
        logs: dict[int, list[tuple[int, int, int]]] = {}

        def read_back(target_partition: int, first: int, last: int) -> list[int]:
            if target_partition not in logs:
                self.read_backs += 1
                spans = txn.spans[target_partition]
                start = min(s.first for s in spans if s.first is not None)
                end = max(s.last for s in spans if s.last is not None)
                tp = TopicPartition(self.source.target_topic, target_partition)
                batches = read_partition_log(self.target.connection, tp, start, end)
                logs[target_partition] = [(h.base_offset, h.last_offset, h.producer_id) for h, _b in batches]
            return offsets_in_range(logs[target_partition], first, last)

        return read_back

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
        except KafkaException as exc:  # from abort_transaction while recovering
            raise self._fenced_or_failed(exc.args[0]) from None
        except BaseException:  # S3 unreachable, corrupt archive, interrupted, ...
            # Best effort: end the open transaction now rather than at its timeout (the next run
            # fences it anyway). What was committed stays.
            with contextlib.suppress(KafkaException):
                self.producer.abort_transaction(5)
            raise
        finally:
            for run in active:
                self._close_stream(run)

    def _fenced_or_failed(self, error: KafkaError) -> RestoreError:
        if error.fatal() or error.code() == KafkaError._FENCED:
            return RestoreFencedError(
                f"restore {self.restore_id}: another run of this restore took over ({error.str()}); "
                "what this run committed stays"
            )
        return RestoreError(f"restore {self.restore_id}: {error.str()}")

    def _close_stream(self, run: PartitionRun) -> None:
        if run.stream is not None:
            run.stream.close()
            run.stream = None

    def _recover(self, error: KafkaError, active: list[PartitionRun], failures: int) -> int:
        if (
            error.fatal()
            or error.code() == KafkaError._FENCED
            or not (error.txn_requires_abort() or error.retriable())
        ):
            raise self._fenced_or_failed(error)
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

    def _full(self, txn: Transaction) -> bool:
        o = self.options
        return (
            txn.records >= o.transaction_records
            or txn.bytes >= o.transaction_bytes
            or (time.monotonic() - txn.started) * 1000 >= o.transaction_ms
        )

    def _one_transaction(self, active: list[PartitionRun]) -> None:
        self._errors = []
        txn = Transaction()
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
                produced = self._produce(run, chunk, txn.spans.setdefault(run.plan.target_partition, []))
                txn.add(run.plan.source_partition, produced, chunk)
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
        try:
            runs_by_source = landed(txn.spans, self._read_back(txn))
        except DeliveryFailedError as exc:
            raise KafkaException(exc.error) from None
        except DeliveryMismatchError as exc:
            raise RestoreError(str(exc)) from None
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
                    tuple(runs_by_source.get(p, ())),
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
                run.records_total + txn.records_by_source.get(p, 0),
                run.bytes_total + txn.bytes_by_source[p],
                chunk_map,
                now_ms,
            )
            self._produce_progress(progress)
            written.append((run, progress))
        self._commit()
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

    def _produce(self, run: PartitionRun, chunk: Chunk, spans: list[Span]) -> int:
        if self._bytes_limit is not None:
            self._bytes_limit.acquire(chunk.size_bytes)
        produced = produce_chunk(
            self.producer,
            self.source.target_topic,
            run.plan.target_partition,
            run.plan.source_partition,
            chunk,
            spans,
        )
        if self._records_limit is not None:
            self._records_limit.acquire(produced)
        return produced

    def _produce_progress(self, progress: RestoreProgress) -> None:
        self.producer.produce(
            self.progress_topic,
            encode_value(progress),
            progress_key(self.restore_id, progress.source_partition, progress.sequence),
            partition=self.progress_partition,
            on_delivery=self._progress_delivered,
        )

    def _commit(self) -> None:
        """librdkafka: a commit that timed out (retriable) is retried, never aborted: it may have
        gone through. Anything else goes to the caller (abortable: abort and redo)."""
        for attempt in range(self.options.retries + 1):
            try:
                self.producer.commit_transaction(TXN_CALL_TIMEOUT_S)
                return
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                if not error.retriable() or error.txn_requires_abort() or attempt == self.options.retries:
                    raise
                log.warning(
                    "commit of a restore transaction timed out (%s); retrying the commit", error.str()
                )
                time.sleep(min(0.2 * 2**attempt, 5.0) * random.uniform(0.8, 1.2))

    def _flush(self) -> None:
        deadline = time.monotonic() + TXN_CALL_TIMEOUT_S
        while self.producer.flush(1.0) > 0:
            if time.monotonic() > deadline:
                raise RestoreError(f"records not acknowledged within {TXN_CALL_TIMEOUT_S:.0f} s")
