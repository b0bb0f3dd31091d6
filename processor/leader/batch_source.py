"""The batch source: the only code that talks to the brokers for records.

It fetches the partitions this worker leads as whole record batches with aiokafka's low-level
client (``AIOKafkaClient.send(node_id, FetchRequest(...))``; no hand-written wire protocol) and
hands each partition's batches, as the broker returned them, to a callback. No record is decoded:
batches are split by their 61-byte headers (``entries_v2.split_batches``).

What a consumer's fetcher handles is handled here:
- several fetches in flight: ``fetch_concurrency`` tasks each take the ready partitions of one
  leader (a partition is in at most one request), so the fetch side stays ahead of the uploads;
- leader changes: NOT_LEADER / UNKNOWN_TOPIC_OR_PARTITION / LEADER_NOT_AVAILABLE and transport
  errors refresh the metadata and back off (bounded, with jitter; the "kafka" health component says
  why meanwhile);
- OFFSET_OUT_OF_RANGE: the log start and end are listed; when the log now starts past the position
  (retention deleted records before they were archived) the lost range goes to ``on_lost`` and
  fetching resumes at the log start; a position past the log end (topic recreated, unclean
  election) is an error reported to health and retried at the maximum backoff;
- throttling: a response's ``throttle_time_ms`` delays that task's next request;
- transactions: fetches are read_committed (the broker stops at the last stable offset and lists
  aborted transactions); ``read_committed.committed`` marks what a read_committed consumer drops;
- security: whatever the process's ``KafkaSecurity`` says (SSL, SASL PLAIN/SCRAM/OAUTHBEARER, mutual
  TLS), through :func:`processor.kafka.clients.aiokafka_client_kwargs`.

It runs on the engine's asyncio loop; positions are owned by the engine, which says in its callback
where the partition continues (it may refuse batches when the offload buffer is full).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.structs import TopicPartition as KafkaTP

from processor import metrics
from processor.health import HEALTH
from processor.kafka.clients import KafkaTarget, aiokafka_client_kwargs
from processor.kafka.partition import TopicPartition
from processor.segment.entries_v2 import BatchHeader, split_batches
from processor.segment.read_committed import committed

log = logging.getLogger(__name__)

READ_COMMITTED = 1
EARLIEST = -2
LATEST = -1
_REFRESH_ERRORS = (
    kafka_errors.NotLeaderForPartitionError,
    kafka_errors.UnknownTopicOrPartitionError,
    kafka_errors.LeaderNotAvailableError,
    kafka_errors.KafkaTimeoutError,
)


@dataclass(frozen=True, slots=True)
class FetchOptions:
    max_wait_ms: int = 10  # brokers like Tansu answer only after the full wait
    # A partition whose fetch returned no batch is asked again only this much later: re-asking idle
    # partitions every 10 ms kept a worker of 2,000 quiet partitions decoding empty fetch responses
    # for a fifth of a core. (Not a longer max_wait: a broker answers one request of a connection
    # at a time, so a long-polling fetch would hold up the ListOffsets and fetches queued behind it.)
    idle_backoff_ms: int = 500
    partition_max_bytes: int = 4 * 1024 * 1024
    request_max_bytes: int = 32 * 1024 * 1024
    concurrency: int = 4
    backoff_ms: int = 100
    backoff_max_ms: int = 30_000


@dataclass(slots=True)
class Fetched:
    """One partition's share of a fetch response."""

    tp: TopicPartition
    fetch_offset: int
    batches: list[tuple[BatchHeader, memoryview, bool]]  # keep=False: a read_committed consumer skips it
    high_watermark: int
    log_start_offset: int


OnFetched = Callable[[Fetched], int]  # returns the partition's next fetch position
OnLost = Callable[[TopicPartition, int, int], None]  # first and last lost offset


class BatchSource:
    def __init__(
        self,
        kafka: KafkaTarget,
        client_id: str,
        on_fetched: OnFetched,
        on_lost: OnLost,
        options: FetchOptions = FetchOptions(),
    ) -> None:
        self._kafka = kafka  # bootstrap servers and security (SASL, TLS) of the source cluster
        self._client_id = client_id
        self._on_fetched = on_fetched
        self._on_lost = on_lost
        self.options = options
        self._client: AIOKafkaClient | None = None
        self.positions: dict[TopicPartition, int | None] = {}  # None: start at the log start
        self._in_flight: set[TopicPartition] = set()
        self._not_before: dict[TopicPartition, float] = {}
        self._failures: dict[TopicPartition, int] = {}
        self._wake: asyncio.Event | None = None
        self.paused = False
        # A gap found by OFFSET_OUT_OF_RANGE (first, last), reported with the next fetch's answer: the
        # batch holding the broker's new log start may begin below it (DeleteRecords and a log start
        # inside a batch), and its records are still there to archive, whole.
        self._pending_loss: dict[TopicPartition, tuple[int, int]] = {}
        self.high_watermarks: dict[TopicPartition, int] = {}

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._client = AIOKafkaClient(
            client_id=self._client_id,
            retry_backoff_ms=self.options.backoff_ms,
            **aiokafka_client_kwargs(self._kafka),
        )
        await self._client.bootstrap()

    async def close(self) -> None:
        if self._client is not None:
            await self._client.close()

    # -- partitions (called on the loop) -------------------------------------------------------------

    def add(self, tp: TopicPartition, position: int | None) -> None:
        assert self._client is not None
        self.positions[tp] = position
        self._client.add_topic(tp.topic)
        self.wake()

    def remove(self, tp: TopicPartition) -> None:
        self.positions.pop(tp, None)
        self._pending_loss.pop(tp, None)  # its next owner finds the same gap and reports it
        self._not_before.pop(tp, None)
        self._failures.pop(tp, None)
        self.high_watermarks.pop(tp, None)

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    # -- fetching ---------------------------------------------------------------------------------

    async def run(self) -> None:
        await asyncio.gather(*(self._fetch_loop() for _ in range(self.options.concurrency)))

    def _backoff(self, tp: TopicPartition, maximum: bool = False) -> float:
        n = self._failures.get(tp, 0) + 1
        self._failures[tp] = n
        base_ms = (
            self.options.backoff_max_ms
            if maximum
            else min(self.options.backoff_ms * 2 ** (n - 1), self.options.backoff_max_ms)
        )
        delay = base_ms / 1000 * random.uniform(0.8, 1.2)
        self._not_before[tp] = time.monotonic() + delay
        return delay

    def _take_ready(self) -> tuple[int, list[tuple[TopicPartition, int | None]]] | None:
        """Ready partitions of one leader (not in flight, not backing off), at most a fair share."""
        assert self._client is not None
        if self.paused:
            return None
        now = time.monotonic()
        by_node: dict[int, list[tuple[TopicPartition, int | None]]] = {}
        missing_leader = False
        for tp, position in self.positions.items():
            if tp in self._in_flight or self._not_before.get(tp, 0) > now:
                continue
            node = self._client.cluster.leader_for_partition(KafkaTP(tp.topic, tp.partition))
            if node is None or node < 0:
                missing_leader = True
                self._not_before[tp] = now + self.options.backoff_ms / 1000
                continue
            by_node.setdefault(node, []).append((tp, position))
        if missing_leader:
            self._client.force_metadata_update()
        if not by_node:
            return None
        node, ready = max(by_node.items(), key=lambda item: len(item[1]))
        share = max(1, -(-len(self.positions) // self.options.concurrency))
        return node, ready[:share]

    async def _fetch_loop(self) -> None:
        assert self._wake is not None
        while True:
            picked = self._take_ready()
            if picked is None:
                self._wake.clear()
                with contextlib.suppress(TimeoutError):  # no wake-up: look again (backoffs end)
                    await asyncio.wait_for(self._wake.wait(), 0.05)
                continue
            node, parts = picked
            self._in_flight.update(tp for tp, _ in parts)
            try:
                throttle_ms = await self._fetch(node, parts)
            finally:
                self._in_flight.difference_update(tp for tp, _ in parts)
                self._wake.set()
            if throttle_ms > 0:
                await asyncio.sleep(throttle_ms / 1000)

    async def _list_offset(self, tp: TopicPartition, which: int) -> int:
        assert self._client is not None
        node = self._client.cluster.leader_for_partition(KafkaTP(tp.topic, tp.partition))
        if node is None or node < 0:
            raise kafka_errors.LeaderNotAvailableError(str(tp))
        found = (await self._list_offsets(node, [tp], which))[tp]
        if isinstance(found, BaseException):
            raise found
        return found

    async def _list_offsets(
        self, node: int, tps: list[TopicPartition], which: int
    ) -> dict[TopicPartition, int | BaseException]:
        """The offset ``which`` (EARLIEST, LATEST) of each of ``tps`` (all led by ``node``), in one
        ListOffsets request, or the error that kept it from being read. One request for all: a
        worker that takes over a thousand partitions asked one at a time, a round trip each, before
        their first fetch."""
        assert self._client is not None
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for tp in tps:
            by_topic.setdefault(tp.topic, []).append((tp.partition, which))
        try:
            response = await self._client.send(
                node, OffsetRequest(-1, READ_COMMITTED, list(by_topic.items()))
            )
        except (kafka_errors.KafkaError, OSError) as exc:
            return dict.fromkeys(tps, exc)
        out: dict[TopicPartition, int | BaseException] = {}
        for topic, partitions in response.topics:
            for part, error_code, *info in partitions:
                tp = TopicPartition(topic, part)
                error = kafka_errors.for_code(error_code)
                if error is not kafka_errors.NoError:
                    out[tp] = error(str(tp))
                else:
                    out[tp] = int(info[-1]) if response.API_VERSION > 0 else int(info[0][0])
        return {tp: out.get(tp, kafka_errors.UnknownTopicOrPartitionError(str(tp))) for tp in tps}

    async def _fetch(self, node: int, parts: list[tuple[TopicPartition, int | None]]) -> int:
        assert self._client is not None
        wanted: dict[TopicPartition, int] = {}
        unplaced = [tp for tp, position in parts if position is None]
        earliest = await self._list_offsets(node, unplaced, EARLIEST) if unplaced else {}
        for tp, position in parts:
            if position is None:
                found = earliest[tp]
                if isinstance(found, BaseException):
                    self._problem(tp, found)
                    continue
                position = found
                if tp in self.positions:
                    self.positions[tp] = position
            wanted[tp] = position
        if not wanted:
            return 0
        by_topic: dict[str, list[tuple[int, int, int]]] = {}
        for tp, position in wanted.items():
            by_topic.setdefault(tp.topic, []).append(
                (tp.partition, position, self.options.partition_max_bytes)
            )
        request = FetchRequest(
            self.options.max_wait_ms,
            1,
            self.options.request_max_bytes,
            READ_COMMITTED,
            list(by_topic.items()),
        )
        try:
            response = await self._client.send(node, request)
        except (kafka_errors.KafkaError, OSError) as exc:
            for tp in wanted:
                self._problem(tp, exc)
            self._client.force_metadata_update()
            return 0
        version = response.API_VERSION
        for topic, partitions in response.topics:
            for partition, error_code, high_watermark, *data in partitions:
                tp = TopicPartition(topic, partition)
                fetch_offset = wanted.get(tp)
                if fetch_offset is None or self.positions.get(tp) != fetch_offset:
                    continue  # revoked or moved while the request was in flight
                error = kafka_errors.for_code(error_code)
                if error is kafka_errors.NoError:
                    self._on_data(tp, fetch_offset, high_watermark, data, version)
                elif error is kafka_errors.OffsetOutOfRangeError:
                    await self._out_of_range(tp, fetch_offset)
                else:
                    self._problem(tp, error(str(tp)))
                    if issubclass(error, _REFRESH_ERRORS):
                        self._client.force_metadata_update()
        return int(getattr(response, "throttle_time_ms", 0) or 0)

    def _on_data(
        self, tp: TopicPartition, fetch_offset: int, high_watermark: int, data: list[Any], version: int
    ) -> None:
        log_start = int(data[1]) if version >= 5 else -1
        # data: v4 [lso, aborted, records]; v5..v10 [lso, log_start, aborted, records];
        # v11+ [lso, log_start, aborted, preferred_read_replica, records] (aiokafka's fetcher)
        aborted = data[2] if version >= 11 else data[-2] if version >= 4 else None
        records = data[-1]
        if self._failures.pop(tp, None) is not None:
            HEALTH.clear("kafka")
        self.high_watermarks[tp] = high_watermark
        if log_start > fetch_offset:  # defensive: brokers answer OFFSET_OUT_OF_RANGE instead
            self._pending_loss[tp] = (fetch_offset, log_start - 1)  # reported with the next answer
            self.positions[tp] = log_start
            return
        batches = [
            (h, view, keep)
            for h, view, keep in committed(split_batches(records, where=f"fetch of {tp}"), aborted or ())
            if h.last_offset >= fetch_offset
        ]
        if tp in self._pending_loss:
            first, last = self._pending_loss.pop(tp)
            if batches:  # what the first batch still holds below the log start is not lost
                last = min(last, batches[0][0].base_offset - 1)
            if last >= first:
                self._on_lost(tp, first, last)
        if not batches:  # idle: asked again after idle_backoff_ms (a backoff of no failure)
            self._not_before[tp] = time.monotonic() + self.options.idle_backoff_ms / 1000
            return
        self.positions[tp] = self._on_fetched(Fetched(tp, fetch_offset, batches, high_watermark, log_start))

    async def _out_of_range(self, tp: TopicPartition, fetch_offset: int) -> None:
        try:
            start = await self._list_offset(tp, EARLIEST)
            end = await self._list_offset(tp, LATEST)
        except (kafka_errors.KafkaError, OSError) as exc:
            self._problem(tp, exc)
            return
        if tp not in self.positions:
            return
        if fetch_offset < start:
            self._pending_loss[tp] = (fetch_offset, start - 1)  # reported with the next answer
            self.positions[tp] = start
        elif fetch_offset > end:
            metrics.FETCH_ERRORS.labels("offset_past_log_end").inc()
            reason = (
                f"{tp}: remote storage ends at {fetch_offset - 1} but the broker's log ends at {end - 1} "
                "(topic recreated or truncated?); not archiving until that is resolved"
            )
            log.error(reason)
            HEALTH.report("kafka", reason)
            self._backoff(tp, maximum=True)
        else:
            self._problem(tp, kafka_errors.OffsetOutOfRangeError(str(tp)))

    def _problem(self, tp: TopicPartition, exc: BaseException) -> None:
        name = type(exc).__name__
        metrics.FETCH_ERRORS.labels(name).inc()
        delay = self._backoff(tp)
        level = logging.WARNING if self._failures.get(tp, 0) >= 3 else logging.INFO
        log.log(level, "fetch of %s failed: %s: %s; retrying in %.2f s", tp, name, exc, delay)
        if self._failures.get(tp, 0) >= 3:
            HEALTH.report("kafka", f"fetching {tp} keeps failing: {name}: {exc}")
