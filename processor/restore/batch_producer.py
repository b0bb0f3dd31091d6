"""A transactional producer of ready-made record batches: Kafka's transaction protocol (KIP-98) on
aiokafka's low-level client.

Why not librdkafka: its ``produce()`` takes one record at a time, so a restore through it decodes
every archived record into Python objects and hands each over with a call, costing twice what
producing alone costs. The archive already holds Kafka record batches byte for byte; this producer
sends them as they are, restamped with its producer id, epoch and sequence
(:func:`processor.restore.txn_wire.stamp`, the CRC-32C recomputed), so a restore does no per-record
work. Nothing else here is invented: the requests are Kafka's own message schemas, encoded by kio
(:mod:`processor.restore.requests`), and aiokafka's client carries them.

The protocol, as every transactional producer runs it:

- ``init``: FindCoordinator(transaction) and InitProducerId, which fences every earlier producer
  with this transactional id and aborts its open transaction.
- per transaction: AddPartitionsToTxn before a partition's first batch; Produce with acks=all and
  the transactional id, one batch per request (Kafka takes exactly one batch per partition in a
  request), one request in flight per partition so that sequences arrive in order, partitions in
  parallel; EndTxn(commit | abort).
- after an abort the producer initialises again (InitProducerId: a new epoch, sequences from 0):
  whatever an unanswered request may have written belongs to the aborted epoch.

Threads: the client runs on an asyncio loop in a thread of its own; the restore's thread calls
:meth:`send` (returns at once with a future of the batch's base offset in the target; blocks while
``max_pending_bytes`` are unacknowledged), :meth:`flush`, :meth:`commit` and :meth:`abort`.

Errors are never lost: a failed batch fails its future and every later batch of the transaction
(which is then not sent); :meth:`flush` and :meth:`commit` raise the first one.
:class:`TxnFencedError` is fatal, :class:`TxnAbortableError` means abort and redo,
:class:`TxnCommitUnknownError` means the commit's outcome is unknown (the restore then stops: a new
run reads what was committed from the target).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import random
import threading
import time
from collections.abc import Awaitable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient
from aiokafka.structs import TopicPartition as KafkaTP

from processor.errors import ProcessorError, ServiceUnavailableError
from processor.kafka import wire
from processor.kafka.clients import KafkaTarget, aiokafka_client_kwargs, connection
from processor.restore import requests
from processor.restore.txn_wire import (
    CONNECTION_LOST,
    LEADER_NOT_AVAILABLE,
    ErrorKind,
    error_kind,
    error_name,
    rejection_hint,
    stamp,
)

T = TypeVar("T")
log = logging.getLogger(__name__)

ACKS_ALL = -1
SEQUENCE_WRAP = 2**31  # Kafka's sequences wrap from Int32.MAX to 0

_CONNECTION_ERRORS = (
    kafka_errors.KafkaConnectionError,
    kafka_errors.NodeNotReadyError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.KafkaTimeoutError,
    OSError,
)

# Asking again (a coordinator that moved or still ends the last transaction, a leader not known
# yet, a lost connection): bounded, with exponential backoff and jitter (_retrying).
RETRY_FIRST_S = 0.01
RETRY_MAX_S = 1.0
RETRY_FOR_S = 30.0


class TxnError(ProcessorError):
    """A transactional producer error."""


class TxnFencedError(TxnError):
    """Another producer with this transactional id took over (or the target refuses this one)."""


class TxnAbortableError(TxnError):
    """The transaction cannot commit: abort it and redo it."""


class TxnRejectedError(TxnAbortableError):
    """The target refuses a batch itself (too large, invalid): the transaction must abort, and
    sending the batch again cannot help."""


class TxnCommitUnknownError(TxnError):
    """The commit was sent but its outcome is unknown."""


@dataclass
class _Item:
    batch: bytes | bytearray | memoryview
    count: int
    future: concurrent.futures.Future[int]


@dataclass
class _Lane:
    """One target partition: its batches in send order, its sequence, and the task sending them."""

    queue: asyncio.Queue[_Item] = field(default_factory=asyncio.Queue)
    sequence: int = 0
    task: asyncio.Task[None] | None = None


class BatchProducer:
    def __init__(
        self,
        target: KafkaTarget,
        transactional_id: str,
        *,
        transaction_timeout_ms: int = 60_000,
        request_timeout_ms: int = 30_000,
        max_pending_bytes: int = 64 * 1024 * 1024,
        client_id: str = "processor-restore",
    ) -> None:
        self.target = connection(target)
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.max_pending_bytes = max_pending_bytes
        self.client_id = client_id
        self.producer_id = -1
        self.epoch = -1
        self._client: AIOKafkaClient | None = None
        self._coordinator: int | None = None
        self._lanes: dict[tuple[str, int], _Lane] = {}
        self._added: set[tuple[str, int]] = set()
        self._futures: list[concurrent.futures.Future[int]] = []
        self._failure: BaseException | None = None
        self._pending_bytes = 0
        self._budget = threading.Condition()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="restore-producer", daemon=True)
        self._thread.start()

    # -- the restore's thread -----------------------------------------------------------------------

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TxnAbortableError(
                f"no answer from {self.target.describe()} within {timeout_s:.0f} s"
            ) from None

    def init(self, timeout_s: float = 60.0) -> None:
        """Connect, then fence every earlier producer with this transactional id (its open
        transaction is aborted). ServiceUnavailableError when the target cannot be reached."""
        self._call(self._init(), timeout_s)

    def begin(self) -> None:
        self._added.clear()
        self._futures = []
        self._failure = None

    def send(
        self, topic: str, partition: int, batch: bytes | bytearray | memoryview, record_count: int
    ) -> concurrent.futures.Future[int]:
        """Queue a v2 record batch (any producer fields; :func:`stamp` rewrites them) for the open
        transaction; the future gives its base offset in the target."""
        size = len(batch)
        with self._budget:
            while self._pending_bytes > 0 and self._pending_bytes + size > self.max_pending_bytes:
                self._budget.wait(0.5)
            self._pending_bytes += size
        future: concurrent.futures.Future[int] = concurrent.futures.Future()
        self._futures.append(future)
        self._loop.call_soon_threadsafe(self._enqueue, (topic, partition), _Item(batch, record_count, future))
        return future

    def flush(self, timeout_s: float) -> None:
        """Wait until every batch sent in this transaction is acknowledged; raise the first error."""
        _done, pending = concurrent.futures.wait(self._futures, timeout_s)
        if pending:
            raise TxnAbortableError(
                f"{len(pending)} batches not acknowledged by {self.target.describe()} "
                f"within {timeout_s:.0f} s"
            )
        for future in self._futures:
            error = future.exception()
            if error is not None:
                raise error

    def commit(self, timeout_s: float) -> None:
        self.flush(timeout_s)
        self._call(self._end(commit=True), timeout_s)

    def abort(self, timeout_s: float) -> None:
        """Abort the open transaction and start a new epoch (sequences from 0). A fenced producer
        raises TxnFencedError."""
        self._call(self._abort(), timeout_s)
        self.begin()

    def close(self) -> None:
        if self._loop.is_closed():
            return
        try:
            self._call(self._close(), 30.0)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(30)
            self._loop.close()

    # -- the loop's thread --------------------------------------------------------------------------

    def _enqueue(self, tp: tuple[str, int], item: _Item) -> None:
        lane = self._lanes.get(tp)
        if lane is None:
            lane = self._lanes[tp] = _Lane()
            lane.task = self._loop.create_task(self._drain(tp, lane))
        lane.queue.put_nowait(item)

    def _release(self, size: int) -> None:
        with self._budget:
            self._pending_bytes -= size
            self._budget.notify_all()

    async def _drain(self, tp: tuple[str, int], lane: _Lane) -> None:
        while True:
            item = await lane.queue.get()
            try:
                if self._failure is not None:
                    raise TxnAbortableError(
                        f"not sent: an earlier batch of the transaction failed ({self._failure})"
                    )
                if tp not in self._added:
                    await self._add_partition(tp)
                offset = await self._produce(
                    tp, stamp(item.batch, self.producer_id, self.epoch, lane.sequence)
                )
                lane.sequence = (lane.sequence + item.count) % SEQUENCE_WRAP
                item.future.set_result(offset)
            except asyncio.CancelledError:
                item.future.set_exception(TxnAbortableError("not sent: the transaction was aborted"))
                raise
            except TxnError as exc:
                self._failure = self._failure or exc
                item.future.set_exception(exc)
            except (kafka_errors.KafkaError, OSError) as exc:  # connection lost, request timed out
                error = TxnAbortableError(f"producing to {tp[0]}[{tp[1]}] failed: {exc!r}")
                self._failure = self._failure or error
                item.future.set_exception(error)
            except Exception as exc:  # a malformed batch, a bug: raised as itself by flush(), and
                # the lane goes on (a dead lane would leave later futures unanswered until timeout)
                self._failure = self._failure or exc
                item.future.set_exception(exc)
            finally:
                self._release(len(item.batch))

    async def _client_ready(self) -> AIOKafkaClient:
        if self._client is None:
            client = AIOKafkaClient(
                client_id=self.client_id,
                request_timeout_ms=self.request_timeout_ms,
                **aiokafka_client_kwargs(self.target),
            )
            try:
                await client.bootstrap()
            except (kafka_errors.KafkaError, OSError) as exc:
                await client.close()
                raise ServiceUnavailableError(
                    f"Kafka at {self.target.describe()} is unreachable: {exc}"
                ) from None
            self._client = client
        return self._client

    async def _retrying(self, what: str, attempt: Any) -> Any:
        """Run ``attempt()`` (a coroutine function returning (error code, answer)) until its error
        code is not one to ask again about; coordinator errors find the coordinator anew."""
        deadline = time.monotonic() + RETRY_FOR_S
        delay = RETRY_FIRST_S
        while True:
            code, answer = await attempt()
            kind = error_kind(code)
            if kind is ErrorKind.NONE:
                return answer
            name = error_name(code)
            if kind is ErrorKind.FENCED:
                raise TxnFencedError(f"{what}: {name} (transactional id {self.transactional_id})")
            if kind is ErrorKind.FAILED or time.monotonic() > deadline:
                raise TxnAbortableError(f"{what}: {name}")
            if kind is ErrorKind.COORDINATOR:
                self._coordinator = None
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, RETRY_MAX_S)

    async def _coordinator_node(self) -> int:
        client = await self._client_ready()
        if self._coordinator is None:

            async def find() -> tuple[int, Any]:
                node = client.get_random_node()
                if node is None:  # no broker known (yet): asked again, like a lost connection
                    return CONNECTION_LOST, None
                try:
                    answer = await wire.send(client, node, requests.find_coordinator(self.transactional_id))
                except _CONNECTION_ERRORS:
                    return CONNECTION_LOST, None
                return int(answer.error_code), int(answer.node_id)

            self._coordinator = int(await self._retrying("finding the transaction coordinator", find))
        return self._coordinator

    async def _to_coordinator(self, what: str, request: wire.KioRequest) -> Any:
        async def attempt() -> tuple[int, Any]:
            node = await self._coordinator_node()
            assert self._client is not None
            try:
                answer = await wire.send(self._client, node, request)
            except _CONNECTION_ERRORS:
                return CONNECTION_LOST, None
            return requests.coordinator_error(answer), answer

        try:
            return await self._retrying(what, attempt)
        except (kafka_errors.KafkaError, OSError) as exc:
            raise TxnAbortableError(f"{what}: {exc!r}") from None

    async def _init(self) -> None:
        # Always as a new producer (-1, -1): the coordinator then bumps the transactional id's epoch
        # and aborts its open transaction (Tansu answers an epoch bump that names the current id
        # and epoch, KIP-360's form, with error -1).
        request = requests.init_producer_id(self.transactional_id, self.transaction_timeout_ms)
        response = await self._to_coordinator("starting transactions", request)
        self.producer_id, self.epoch = int(response.producer_id), int(response.producer_epoch)
        await self._reset_lanes()

    async def _reset_lanes(self) -> None:
        lanes, self._lanes = list(self._lanes.values()), {}
        for lane in lanes:
            if lane.task is not None:
                lane.task.cancel()
        await asyncio.gather(*(lane.task for lane in lanes if lane.task is not None), return_exceptions=True)
        for lane in lanes:  # batches queued behind the cancelled one
            while not lane.queue.empty():
                item = lane.queue.get_nowait()
                item.future.set_exception(TxnAbortableError("not sent: the transaction was aborted"))
                self._release(len(item.batch))

    async def _add_partition(self, tp: tuple[str, int]) -> None:
        request = requests.add_partitions_to_txn(
            self.transactional_id, self.producer_id, self.epoch, tp[0], tp[1]
        )
        await self._to_coordinator(f"adding {tp[0]}[{tp[1]}] to the transaction", request)
        self._added.add(tp)

    async def _leader(self, tp: tuple[str, int]) -> int:
        client = await self._client_ready()

        async def find() -> tuple[int, Any]:
            node = client.cluster.leader_for_partition(KafkaTP(*tp))
            if node is not None and node >= 0:
                return 0, int(node)
            await client.add_topic(tp[0])
            await _awaited(client.force_metadata_update())
            return LEADER_NOT_AVAILABLE, None

        return int(await self._retrying(f"finding the leader of {tp[0]}[{tp[1]}]", find))

    async def _produce(self, tp: tuple[str, int], batch: bytearray) -> int:
        assert self._client is not None
        deadline = time.monotonic() + RETRY_FOR_S
        delay = RETRY_FIRST_S
        while True:
            node = await self._leader(tp)
            request = requests.produce(
                self.transactional_id, ACKS_ALL, self.request_timeout_ms, tp[0], tp[1], batch
            )
            result = requests.produce_result(await wire.send(self._client, node, request), *tp)
            if result is None:
                raise TxnAbortableError(
                    f"producing to {tp[0]}[{tp[1]}]: the answer does not name the partition"
                )
            error_code, offset = result
            kind = error_kind(error_code)
            if kind is ErrorKind.NONE:
                return offset
            name = error_name(error_code)
            if kind is ErrorKind.FENCED:
                raise TxnFencedError(f"producing to {tp[0]}[{tp[1]}]: {name}")
            if kind is ErrorKind.REJECTED:
                raise TxnRejectedError(
                    f"{tp[0]}[{tp[1]}] refuses a batch of {len(batch)} bytes: {name}"
                    + rejection_hint(error_code)
                )
            error = kafka_errors.for_code(error_code)
            if getattr(error, "invalid_metadata", False):
                await _awaited(self._client.force_metadata_update())
            if not getattr(error, "retriable", False) or time.monotonic() > deadline:
                raise TxnAbortableError(f"producing to {tp[0]}[{tp[1]}]: {name}")
            # a leader that moved or is not elected yet (a topic just created), a request that timed
            # out: the same batch again with its sequence, as Kafka's producer does (the broker
            # keeps a batch it already appended once); bounded, with backoff and jitter
            log.info("producing to %s[%d]: %s; asking again", tp[0], tp[1], name)
            await asyncio.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, RETRY_MAX_S)

    async def _end(self, commit: bool) -> None:
        what = "committing" if commit else "aborting"
        request = requests.end_txn(self.transactional_id, self.producer_id, self.epoch, commit)
        try:
            await self._to_coordinator(f"{what} the transaction", request)
        except TxnAbortableError as exc:
            if not commit:
                raise
            # The request may have been carried out (a lost answer, or a retry answered
            # INVALID_TXN_STATE because the first one completed): unknown, never guessed.
            raise TxnCommitUnknownError(str(exc)) from None

    async def _abort(self) -> None:
        await self._reset_lanes()  # nothing more goes out in this epoch
        if self._added:
            try:
                await self._end(commit=False)
            except TxnAbortableError as exc:  # the new epoch below aborts it (InitProducerId does)
                log.warning("aborting a restore transaction failed (%s); a new producer epoch aborts it", exc)
        await self._init()

    async def _close(self) -> None:
        await self._reset_lanes()
        if self._client is not None:
            await self._client.close()
            self._client = None


async def _awaited(result: Awaitable[Any] | Any) -> None:
    if isinstance(result, Awaitable):
        await result
