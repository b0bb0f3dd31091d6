"""The live topic, for ``tail=live`` and the metadata source: partitions and watermarks on the
driver, ranges of records in the executors.

Offsets are the identity of a Kafka record, so the boundary between archive and live topic is exact:
the archive serves what it holds, the topic the rest; nothing is read twice and nothing is
skipped. Offsets the topic does not hold (compaction, transaction markers) are simply absent, as
for any consumer; a range that starts below the topic's log start offset is data loss.

Executors keep their consumers: ``ConsumerPool`` (one per Python worker process, which Spark reuses
across tasks) hands an idle consumer of the same connection to the next live slice instead of
creating one per task (a new librdkafka client costs a connection and a metadata round trip), as
Spark's Kafka source pools its consumers. A consumer whose read failed is closed, never reused.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from processor.errors import ProcessorError, ServiceUnavailableError, TopicIdUnknownError
from processor.kafka.client_types import KafkaError, KafkaException, KafkaTP
from processor.kafka.partition import TopicPartition
from processor.spark.arrow_records import BATCH_ROWS, Row, rows_to_batch
from processor.spark.connection import Connection
from processor.spark.options import Subscription

log = logging.getLogger(__name__)

# Kafka's own internal topics (the Java AdminClient's listTopics leaves them out, so does Spark).
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})
POOL_CAPACITY = 64  # idle consumers kept per process (spark.kafka.consumer.cache.capacity)
POOL_IDLE_S = 300.0  # an idle consumer older than this is closed (spark.kafka.consumer.cache.timeout)


class TopicRefusedError(ProcessorError):
    """The broker refused the principal a topic a read needs (TOPIC_AUTHORIZATION_FAILED)."""

    def __init__(self, topic: str, needs: str) -> None:
        super().__init__(
            f"the principal was refused topic {topic} (TOPIC_AUTHORIZATION_FAILED): {needs} "
            "(see the Kafka ACLs each role needs in docs/security.md)"
        )
        self.topic = topic


def broker_partitions(
    conn: Connection, subscription: Subscription, timeout_s: float = 10.0, *, needs: str | None = None
) -> list[TopicPartition]:
    """The partitions of the subscribed topics that exist on the broker now. With ``needs`` (what the
    read needs the topics for), a named topic the principal may not describe is an error saying so:
    a listing of every topic leaves out, silently, those the principal is refused."""
    consumer = conn.consumer("processor-spark-meta")
    try:
        md = consumer.list_topics(timeout=timeout_s)
        named = subscription.topics or tuple(sorted({tp.topic for tp in subscription.assign}))
        for name in (t for t in named if needs is not None and t not in md.topics):
            asked = consumer.list_topics(topic=name, timeout=timeout_s).topics.get(name)
            refused = KafkaError.TOPIC_AUTHORIZATION_FAILED
            if asked is not None and asked.error is not None and asked.error.code() == refused:
                raise TopicRefusedError(name, needs or "")
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"cannot reach Kafka at {conn.kafka.describe()}: {exc.args[0]}"
        ) from None
    finally:
        consumer.close()
    out: list[TopicPartition] = []
    for name, topic in md.topics.items():
        if topic.error is not None or name in INTERNAL_TOPICS or not subscription.matches_topic(name):
            continue
        out.extend(TopicPartition(name, p) for p in topic.partitions)
    return sorted(tp for tp in out if subscription.wants(tp))


def watermarks(
    conn: Connection, partitions: list[TopicPartition], retries: int = 3, interval_ms: int = 10
) -> dict[TopicPartition, tuple[int, int]]:
    """(log start offset, high watermark) of each partition, each asked up to ``retries`` times
    (Spark's fetchOffset.numRetries / fetchOffset.retryIntervalMs)."""
    if not partitions:
        return {}
    consumer = conn.consumer("processor-spark-live")
    try:
        out: dict[TopicPartition, tuple[int, int]] = {}
        for tp in partitions:
            for attempt in range(1, retries + 1):
                try:
                    low, high = consumer.get_watermark_offsets(KafkaTP(tp.topic, tp.partition), timeout=10)
                    out[tp] = (max(int(low), 0), max(int(high), 0))
                    break
                except KafkaException as exc:
                    if attempt == retries:
                        raise ServiceUnavailableError(
                            f"cannot read the offsets of {tp} after {retries} attempts: {exc.args[0]}"
                        ) from None
                    time.sleep(interval_ms / 1000)
        return out
    finally:
        consumer.close()


def broker_topic_ids(conn: Connection, topics: list[str]) -> dict[str, str]:
    from processor.kafka.admin import topic_ids

    try:
        return topic_ids(conn.admin("processor-spark-live"), sorted(set(topics)))
    except KafkaException as exc:
        raise ServiceUnavailableError(f"cannot describe {topics}: {exc.args[0]}") from None
    except TopicIdUnknownError as exc:  # retried already: never read as "no such topic" or "no id"
        raise ServiceUnavailableError(str(exc)) from None


class ConsumerPool:
    """Idle assign-only consumers of one process, by connection and group id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[Connection, str], list[tuple[float, Any]]] = {}
        self.created = 0  # consumers this process created (tests assert reuse)

    def acquire(self, conn: Connection, group_id: str) -> Any:
        now = time.monotonic()
        stale: list[Any] = []
        with self._lock:
            idle = self._idle.get((conn, group_id), [])
            stale = [c for at, c in idle if now - at > POOL_IDLE_S]
            fresh = [(at, c) for at, c in idle if now - at <= POOL_IDLE_S]
            consumer = fresh.pop()[1] if fresh else None
            self._idle[(conn, group_id)] = fresh
        for c in stale:
            c.close()
        if consumer is None:
            # auto.offset.reset=error: a position retention removed is an error to report, never a
            # silent jump to the topic's new start.
            consumer = conn.consumer(
                "processor-spark-range", **{"group.id": group_id, "auto.offset.reset": "error"}
            )
            with self._lock:
                self.created += 1
        return consumer

    def release(self, conn: Connection, group_id: str, consumer: Any) -> None:
        consumer.unassign()
        with self._lock:
            idle = self._idle.setdefault((conn, group_id), [])
            if sum(len(v) for v in self._idle.values()) < POOL_CAPACITY:
                idle.append((time.monotonic(), consumer))
                return
        consumer.close()


CONSUMERS = ConsumerPool()


class OffsetsGoneError(ProcessorError):
    """The topic no longer holds an offset a read was positioned at (retention moved its start)."""

    def __init__(self, tp: TopicPartition, offset: int) -> None:
        super().__init__(f"offset {offset} of {tp} is no longer on the topic")
        self.tp = tp
        self.offset = offset


def _group_refused(msg: Any) -> bool:
    err = msg.error()
    return err is not None and err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED


def consume_range(
    conn: Connection,
    topic: str,
    partition: int,
    lo: int,
    hi: int,
    *,
    group_id: str = "processor-spark",
    stall_timeout_s: float = 120.0,
) -> Iterator[Any]:
    """Messages with offsets in ``[lo, hi)`` of one partition (absent offsets are skipped), read by
    a pooled consumer. Raises ServiceUnavailableError when no progress is made for
    ``stall_timeout_s`` (Spark's kafkaConsumer.pollTimeoutMs)."""
    if lo >= hi:
        return
    consumer = CONSUMERS.acquire(conn, group_id)
    ok = False
    try:
        consumer.assign([KafkaTP(topic, partition, lo)])
        deadline = time.monotonic() + stall_timeout_s
        while True:
            # librdkafka looks up the coordinator of any group.id and reports a refusal of the group
            # as a message; an assign-only consumer that never commits needs no group (Spark's Kafka
            # source does not either): fetching goes on without it
            batch = [m for m in consumer.consume(1000, 0.2) if not _group_refused(m)]
            if not batch:
                position = consumer.position([KafkaTP(topic, partition)])[0].offset
                if position >= hi:
                    ok = True
                    return
                if time.monotonic() > deadline:
                    raise ServiceUnavailableError(
                        f"reading {topic}-{partition} stalled at offset {position} before {hi}"
                    )
                continue
            deadline = time.monotonic() + stall_timeout_s
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._AUTO_OFFSET_RESET:
                        position = consumer.position([KafkaTP(topic, partition)])[0].offset
                        raise OffsetsGoneError(TopicPartition(topic, partition), max(lo, int(position)))
                    if err.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
                        raise TopicRefusedError(topic, f"reading {topic}-{partition} needs Read on it")
                    raise ServiceUnavailableError(f"reading {topic}-{partition}: {err}")
                offset = int(msg.offset() or 0)
                if offset >= hi:
                    ok = True
                    return
                yield msg
                if offset == hi - 1:
                    ok = True
                    return
    except KafkaException as exc:
        raise ServiceUnavailableError(f"reading {topic}-{partition}: {exc.args[0]}") from None
    finally:
        if ok:
            CONSUMERS.release(conn, group_id, consumer)
        else:
            consumer.close()


def live_low(conn: Connection, group_id: str, tp: TopicPartition) -> int:
    """The log start offset of one partition, asked with a pooled consumer."""
    consumer = CONSUMERS.acquire(conn, group_id)
    try:
        low, _high = consumer.get_watermark_offsets(KafkaTP(tp.topic, tp.partition), timeout=10)
    except KafkaException as exc:
        consumer.close()
        raise ServiceUnavailableError(f"cannot read the offsets of {tp}: {exc.args[0]}") from None
    CONSUMERS.release(conn, group_id, consumer)
    return max(int(low), 0)


def live_offset_for_timestamp(
    conn: Connection, tp: TopicPartition, lo: int, hi: int, timestamp: int, group_id: str
) -> int | None:
    """The first offset in ``[lo, hi)`` of the live topic whose timestamp is >= ``timestamp``.

    Read, not asked: some brokers (Tansu) answer ListOffsets by timestamp with 0 whatever the time,
    and the part of a topic past its archive is short (the offloader's lag)."""
    for msg in consume_range(conn, tp.topic, tp.partition, lo, hi, group_id=group_id):
        if msg.timestamp()[1] >= timestamp:
            return int(msg.offset())
    return None


def read_live_slice(
    conn: Connection,
    topic: str,
    partition: int,
    lo: int,
    hi: int,
    *,
    group_id: str,
    include_headers: bool,
    stall_timeout_s: float,
) -> Iterator[pa.RecordBatch]:
    """Offsets ``[lo, hi)`` of one partition from the broker, as Arrow batches."""
    rows: list[Row] = []
    for msg in consume_range(
        conn, topic, partition, lo, hi, group_id=group_id, stall_timeout_s=stall_timeout_s
    ):
        ts_type, ts = msg.timestamp()
        headers = msg.headers() if include_headers else None
        rows.append(
            Row(int(msg.offset()), int(ts), int(ts_type) - 1, msg.key(), msg.value(), list(headers or []))
        )
        if len(rows) >= BATCH_ROWS:
            yield rows_to_batch(topic, partition, rows, include_headers)
            rows = []
    if rows:
        yield rows_to_batch(topic, partition, rows, include_headers)
