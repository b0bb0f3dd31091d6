"""The restore loop: archived records into the target with a transactional producer, exactly once.

One transaction at a time: batches of the active source partitions (chunks read ahead from the
archive, sent as they are archived where the target can take them: :mod:`processor.restore.produce`),
then, once every batch is acknowledged and its target base offset known, one progress record per
source partition touched (position, totals, and that transaction's chunk of the offset map), then
commit. Records and progress commit together or not at all, so after a crash (SIGKILL at any moment)
the next run, which first fences the old producer (``init`` aborts its open transaction), reads the
committed progress and continues exactly where the committed records end: no duplicate, no gap.

Errors: a transaction that cannot commit (a failed batch, a broker timeout) is aborted and redone
from the committed positions, a bounded number of times with backoff and jitter; a fenced producer
(another run of the same restore took over) or a commit whose outcome is unknown stops the run.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from processor.errors import ProcessorError
from processor.restore.archive import ArchiveTopic, Chunk
from processor.restore.batch_producer import (
    BatchProducer,
    TxnAbortableError,
    TxnCommitUnknownError,
    TxnError,
    TxnFencedError,
    TxnRejectedError,
)
from processor.restore.delivery import landed
from processor.restore.offset_map import OffsetMap, concat
from processor.restore.produce import encode_batches, outgoing_batches
from processor.restore.progress_record import (
    RestoreProgress,
    RestoreSource,
    encode_value,
    progress_key,
    progress_partition,
)
from processor.restore.state import PartitionRun, RestoreOptions, Transaction
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
        producer: BatchProducer,
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
        self._bytes_limit = (
            ByteRateLimiter(options.max_bytes_per_second) if options.max_bytes_per_second else None
        )
        self._records_limit = (
            ByteRateLimiter(options.max_records_per_second) if options.max_records_per_second else None
        )
        self.transactions = 0
        self.aborted_transactions = 0  # failed and redone from the committed positions
        self.archived_batches = 0  # sent as they are archived
        self.written_batches = 0  # written anew (range edges, offset gaps, LogAppendTime, size)
        self._turn = 0

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
                except TxnRejectedError:
                    raise  # sending it again cannot help
                except TxnAbortableError as exc:
                    failures = self._recover(exc, active, failures)
                for run in [r for r in active if r.done]:
                    self._close_stream(run)
                    active.remove(run)
        except TxnFencedError as exc:
            raise RestoreFencedError(
                f"restore {self.restore_id}: another run of this restore took over ({exc}); "
                "what this run committed stays"
            ) from None
        except TxnCommitUnknownError as exc:
            raise RestoreError(
                f"restore {self.restore_id}: the outcome of a commit is unknown ({exc}); "
                "run the restore again: it continues from what the target holds as committed"
            ) from None
        except TxnError as exc:  # a rejected batch, or an abort that failed while recovering
            self._abort_on_the_way_out()
            raise RestoreError(f"restore {self.restore_id}: {exc}") from None
        except BaseException:  # S3 unreachable, corrupt archive, interrupted, ...
            self._abort_on_the_way_out()
            raise
        finally:
            for run in active:
                self._close_stream(run)

    def _abort_on_the_way_out(self) -> None:
        """Best effort while the run stops on another error: end the open transaction now rather
        than at its timeout (the next run fences it anyway; what was committed stays)."""
        try:
            self.producer.abort(5)
        except TxnError as exc:
            log.warning("could not abort the open restore transaction (%s); the next run aborts it", exc)

    def _close_stream(self, run: PartitionRun) -> None:
        if run.stream is not None:
            run.stream.close()
            run.stream = None

    def _recover(self, error: TxnAbortableError, active: list[PartitionRun], failures: int) -> int:
        """Abort the failed transaction and reopen the streams at the committed positions. The
        abort itself may fail while the target is away (a broker restart, a network cut): it is
        tried again after a backoff, each failure counting towards ``retries``."""
        while True:
            failures += 1
            if failures > self.options.retries:
                raise RestoreError(
                    f"restore {self.restore_id}: transaction failed {failures} times in a row, "
                    f"last: {error}; run the restore again to continue from what is committed"
                )
            log.warning(
                "restore transaction failed (%s); aborting and retrying from the committed positions", error
            )
            time.sleep(min(0.2 * 2**failures, 10.0) * random.uniform(0.8, 1.2))
            try:
                self.producer.abort(TXN_CALL_TIMEOUT_S)
                self.aborted_transactions += 1
                break
            except TxnRejectedError:
                raise
            except TxnAbortableError as exc:  # fenced and commit-unknown errors end the run (run())
                error = exc
        for run in active:  # re-read from the committed positions
            self._close_stream(run)
            run.stream = self.archive.chunks(run.plan.source_partition, run.position, run.plan.stop)
            run.exhausted = False
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
        txn = Transaction()
        self.producer.begin()
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
                produced = self._produce(run, chunk, txn)
                txn.add(run.plan.source_partition, produced, chunk)
            if not took:
                break
        if not txn.positions:
            self.producer.abort(TXN_CALL_TIMEOUT_S)  # nothing was sent: nothing to end
            for run in active:  # streams ended without a new chunk: nothing left before stop
                if run.exhausted and not run.done:
                    raise RestoreError(
                        f"partition {run.plan.source_partition}: the archive read ended at {run.position}"
                    )
            return
        self.producer.flush(TXN_CALL_TIMEOUT_S)
        written: list[tuple[PartitionRun, RestoreProgress]] = []
        now_ms = int(time.time() * 1000)
        for run in active:
            p = run.plan.source_partition
            if p not in txn.positions:
                continue
            runs = landed((sources, future.result()) for sources, future in txn.sent.get(p, ()))
            try:
                chunk_map = OffsetMap(
                    p, run.plan.target_partition, run.position, txn.positions[p], tuple(runs)
                )
            except ValueError as exc:
                raise RestoreError(
                    f"partition {p}: the target's answers do not form an offset map: {exc}"
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
            self._produce_progress(progress, now_ms)
            written.append((run, progress))
        self.producer.commit(TXN_CALL_TIMEOUT_S)
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

    def _produce(self, run: PartitionRun, chunk: Chunk, txn: Transaction) -> int:
        if self._bytes_limit is not None:
            self._bytes_limit.acquire(chunk.size_bytes)
        sent = txn.sent.setdefault(run.plan.source_partition, [])
        produced = 0
        for out in outgoing_batches(chunk, self.options.max_batch_bytes):
            future = self.producer.send(
                self.source.target_topic, run.plan.target_partition, out.batch, out.count
            )
            sent.append((out.sources, future))
            produced += out.count
            if out.archived:
                self.archived_batches += 1
            else:
                self.written_batches += 1
        if self._records_limit is not None:
            self._records_limit.acquire(produced)
        return produced

    def _produce_progress(self, progress: RestoreProgress, now_ms: int) -> None:
        key = progress_key(self.restore_id, progress.source_partition, progress.sequence)
        (batch,) = encode_batches([(0, now_ms, key, encode_value(progress), [])], 0, 1024 * 1024 * 1024)
        self.producer.send(self.progress_topic, self.progress_partition, batch.batch, 1)
