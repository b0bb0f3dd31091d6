"""The metadata topic at the edge: create it, publish records durably, read partitions back."""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from processor import metrics
from processor.errors import FormatError, MetadataTopicError
from processor.kafka.admin import ensure_topic, partition_counts, set_topic_config, topic_config
from processor.kafka.client_types import OFFSET_BEGINNING, AdminClient, KafkaError, KafkaException, KafkaTP
from processor.kafka.clients import KafkaTarget, new_admin, new_consumer, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata import authentication
from processor.metadata.codec import decode_value, encode_value, metadata_partition_for, record_key
from processor.metadata.fold import MetadataFold
from processor.metadata.model import MetadataRecord
from processor.metadata.read_to_end import EndSnapshot
from processor.metadata.remote_log_state import RemoteLogState

log = logging.getLogger(__name__)

# min.compaction.lag.ms: the log cleaner never compacts a record younger than a day. A rejected record
# that shadows an accepted state, or a rejected record of an unknown segment, must be neutralised by
# the partition's owner (re-published, or tombstoned) before compaction reaches it (see
# processor/metadata/fold_rules.py, "Compaction"); owners do that on every retention pass (30 s). Set when
# the topic is created, and raised at every start on a topic that has less (require_compacted).
MIN_COMPACTION_LAG_MS = 86_400_000
# The variables behind the settings of a compacted topic's creation (metadata and deletion topics),
# named when the cluster refuses one (min.insync.replicas follows the replication factor).
CREATION_VARIABLES = {
    "replication.factor": "PROCESSOR_METADATA_REPLICATION_FACTOR",
    "min.insync.replicas": "PROCESSOR_METADATA_REPLICATION_FACTOR",
    "partitions": "PROCESSOR_METADATA_PARTITIONS",
}
METADATA_TOPIC_CONFIG = {"cleanup.policy": "compact", "min.compaction.lag.ms": str(MIN_COMPACTION_LAG_MS)}


def _alter_command(topic: str, setting: str) -> str:
    return (
        f"kafka-configs.sh --bootstrap-server <brokers> --alter --entity-type topics "
        f"--entity-name {topic} --add-config {setting}"
    )


def require_compacted(
    admin: AdminClient, topic: str, what: str, min_lag_ms: int | None, timeout_s: float = 15.0
) -> None:
    """Check an existing topic's configuration at start (DescribeConfigs).

    ``cleanup.policy`` must be ``compact`` alone (``delete`` would drop records the fold needs by
    retention): anything else is refused with :class:`MetadataTopicError`, never altered. With
    ``min_lag_ms``, a ``min.compaction.lag.ms`` below it (or unset: the broker's default, 0 on
    Apache Kafka) is raised to it with IncrementalAlterConfigs (that one key, every other stays) and
    logged at WARNING; a refused alteration (authorisation, a broker policy) is a
    MetadataTopicError naming the command that fixes it, so nothing starts on an unsafe topic.

    Tansu (the test broker) answers both DescribeConfigs and IncrementalAlterConfigs for topics,
    listing only the keys set on the topic; a broker that supports neither gets no exemption here:
    the topic's safety cannot be confirmed, so that too is refused."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            config = topic_config(admin, topic, timeout_s)
            break
        except KafkaException as exc:
            # a topic created a moment ago: Apache Kafka's brokers learn it from the controller a
            # little later, and answer UNKNOWN_TOPIC_OR_PART until then
            unknown = exc.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART
            if unknown and time.monotonic() < deadline:
                time.sleep(random.uniform(0.1, 0.3))
                continue
            raise MetadataTopicError(
                f"cannot read the configuration of {what} {topic} (DescribeConfigs), so cannot check "
                f"that it is compacted: {exc.args[0]}"
            ) from None
    policy = config.get("cleanup.policy")
    if policy is None or {p.strip() for p in policy.split(",")} != {"compact"}:
        have = "not set (the broker's default applies, delete on Apache Kafka)" if policy is None else policy
        raise MetadataTopicError(
            f"{what} {topic} has cleanup.policy={have}; it must be compact (compaction only, no "
            f"deletion by retention). This processor does not change it: set it with "
            f"{_alter_command(topic, 'cleanup.policy=compact')}"
        )
    if min_lag_ms is None:
        return
    raw = config.get("min.compaction.lag.ms")
    try:
        current = int(raw) if raw is not None else None
    except ValueError:
        current = None
    if current is not None and current >= min_lag_ms:
        return
    have = raw if raw is not None else "unset (the broker's default, 0 on Apache Kafka)"
    try:
        set_topic_config(admin, topic, "min.compaction.lag.ms", str(min_lag_ms), timeout_s)
    except KafkaException as exc:
        raise MetadataTopicError(
            f"{what} {topic} has min.compaction.lag.ms={have}, below the {min_lag_ms} ms it needs "
            f"(the log cleaner must not compact a record the owner has yet to neutralise), and "
            f"raising it was refused: {exc.args[0]}. Run: "
            f"{_alter_command(topic, f'min.compaction.lag.ms={min_lag_ms}')}"
        ) from None
    log.warning("%s %s: raised min.compaction.lag.ms from %s to %d", what, topic, have, min_lag_ms)


def ensure_compacted_topic(
    admin: AdminClient,
    topic: str,
    what: str,
    partitions: int,
    replication: int | None,
    config: dict[str, str],
    min_lag_ms: int | None,
) -> bool:
    """Create ``topic`` with ``config`` if missing, then :func:`require_compacted` (also when just
    created: the broker's answer is what counts). Returns True if it was created. ``replication``
    None: min(3, the cluster's brokers) (processor.kafka.admin.replication_for). Raises
    MetadataTopicError, or ConfigError when the cluster refuses a setting at creation."""
    try:
        created = topic not in partition_counts(admin, [topic]) and ensure_topic(
            admin, topic, partitions, replication, config, what=what, variables=CREATION_VARIABLES
        )
    except KafkaException as exc:
        raise MetadataTopicError(f"cannot create or describe {what} {topic}: {exc.args[0]}") from None
    require_compacted(admin, topic, what, min_lag_ms)
    if authentication.installed().unsigned_before_ms is not None:
        require_log_append_time(admin, topic, what)
    return created


def require_log_append_time(admin: AdminClient, topic: str, what: str, timeout_s: float = 15.0) -> None:
    """Under PROCESSOR_METADATA_AUTH_UNSIGNED_BEFORE an unsigned record is folded by its timestamp:
    the broker must set it (``message.timestamp.type=LogAppendTime``), or a record written now could
    claim an earlier time. Set when missing (logged); a refusal is a MetadataTopicError naming the
    command that fixes it."""
    try:
        current = topic_config(admin, topic, timeout_s).get("message.timestamp.type")
        if current == "LogAppendTime":
            return
        set_topic_config(admin, topic, "message.timestamp.type", "LogAppendTime", timeout_s)
    except KafkaException as exc:
        raise MetadataTopicError(
            f"{what} {topic} must have message.timestamp.type=LogAppendTime while "
            f"PROCESSOR_METADATA_AUTH_UNSIGNED_BEFORE is set, and setting it failed: {exc.args[0]}. Run: "
            f"{_alter_command(topic, 'message.timestamp.type=LogAppendTime')}"
        ) from None
    log.warning("%s %s: set message.timestamp.type=LogAppendTime (was %s)", what, topic, current)


def ensure_metadata_topic(kafka: KafkaTarget, topic: str, partitions: int, replication: int | None) -> int:
    """Create the compacted metadata topic if missing, check an existing one (refuse one that is not
    compacted, raise its min.compaction.lag.ms to a day); return its partition count."""
    admin = new_admin(kafka, "processor-admin")
    created = ensure_compacted_topic(
        admin, topic, "metadata topic", partitions, replication, METADATA_TOPIC_CONFIG, MIN_COMPACTION_LAG_MS
    )
    if created:
        log.info("created metadata topic %s (%d partitions, compacted)", topic, partitions)
    return topic_partitions(admin, topic, "metadata topic")


def topic_partitions(admin: AdminClient, topic: str, what: str) -> int:
    """The partition count ``topic`` has (after :func:`ensure_compacted_topic`: the one asked for only
    when that call created it). Raises MetadataTopicError."""
    try:
        counts = partition_counts(admin, [topic])
    except KafkaException as exc:
        raise MetadataTopicError(f"cannot describe {what} {topic}: {exc.args[0]}") from None
    if topic not in counts:
        raise MetadataTopicError(f"{what} {topic} is not visible after creation")
    return counts[topic]


class DurableProducer:
    """Produces one message at a time and waits for its acknowledgement (acks=all, idempotent).
    Shared by the metadata publisher and the deletion path (tombstones, the deletion topic)."""

    def __init__(self, kafka: KafkaTarget, client_id: str) -> None:
        self._producer = new_producer(kafka, client_id, **{"enable.idempotence": True})
        self._lock = threading.Lock()

    def send(
        self,
        topic: str,
        partition: int,
        key: bytes,
        value: bytes | None,
        timeout_s: float = 30.0,
        domain: bytes = authentication.DOMAIN_METADATA,
    ) -> int:
        """Produce one message durably, with its authenticator when signing is on (``domain``: the
        metadata or the deletion topic); returns its offset. Raises MetadataTopicError."""
        headers = authentication.installed().headers(domain, key, value)
        done = threading.Event()
        result: dict[str, Any] = {}

        def on_delivery(err: KafkaError | None, msg: Any) -> None:
            result["err"] = err
            result["offset"] = None if err else msg.offset()
            done.set()

        with self._lock:
            try:
                self._producer.produce(
                    topic, value=value, key=key, partition=partition, on_delivery=on_delivery, headers=headers
                )
            except (KafkaException, BufferError) as exc:
                raise MetadataTopicError(f"cannot publish to {topic}: {exc}") from exc
        for _ in range(int(timeout_s / 0.05)):
            self._producer.poll(0.05)
            if done.is_set():
                break
        if not done.is_set():
            raise MetadataTopicError(f"publishing to {topic} timed out after {timeout_s:.0f} s")
        if result["err"] is not None:
            raise MetadataTopicError(f"publishing to {topic} failed: {result['err']}")
        return int(result["offset"])

    def send_many(
        self,
        topic: str,
        messages: Sequence[tuple[int, bytes, bytes | None]],
        timeout_s: float = 30.0,
        domain: bytes = authentication.DOMAIN_METADATA,
    ) -> list[int]:
        """Produce several messages ``(partition, key, value)`` and wait once for all their
        acknowledgements (one round trip for many records, where :meth:`send` costs one each);
        returns their offsets in order. The producer is idempotent, so they land in the order given
        within a partition. Raises MetadataTopicError if any is not acknowledged (others may be)."""
        if not messages:
            return []
        signer = authentication.installed()
        offsets: list[int | None] = [None] * len(messages)
        errors: list[KafkaError] = []
        pending = [len(messages)]
        done = threading.Event()
        counting = threading.Lock()  # deliveries may be served by any thread polling the producer

        def delivered(at: int) -> Callable[[KafkaError | None, Any], None]:
            def on_delivery(err: KafkaError | None, msg: Any) -> None:
                with counting:
                    if err is not None:
                        errors.append(err)
                    else:
                        offsets[at] = msg.offset()
                    pending[0] -= 1
                    if pending[0] == 0:
                        done.set()

            return on_delivery

        deadline = time.monotonic() + timeout_s
        with self._lock:  # one batch after the other: the records of one call stay together
            for at, (partition, key, value) in enumerate(messages):
                while True:
                    try:
                        self._producer.produce(
                            topic,
                            value=value,
                            key=key,
                            partition=partition,
                            on_delivery=delivered(at),
                            headers=signer.headers(domain, key, value),
                        )
                        break
                    except BufferError as exc:  # the local queue is full: let deliveries drain it
                        if time.monotonic() >= deadline:
                            raise MetadataTopicError(f"cannot publish to {topic}: {exc}") from exc
                        self._producer.poll(0.05)
                    except KafkaException as exc:
                        raise MetadataTopicError(f"cannot publish to {topic}: {exc}") from exc
        while not done.is_set() and time.monotonic() < deadline:
            self._producer.poll(0.05)
        if not done.is_set():
            raise MetadataTopicError(
                f"publishing {len(messages)} records to {topic} timed out after {timeout_s:.0f} s "
                f"({pending[0]} not acknowledged)"
            )
        if errors:
            raise MetadataTopicError(
                f"publishing to {topic} failed for {len(errors)} of {len(messages)} records: {errors[0]}"
            )
        return [int(o) for o in offsets if o is not None]

    def close(self) -> None:
        self._producer.flush(10)


class MetadataPublisher:
    """Publishes metadata records and waits until each is acknowledged (acks=all)."""

    def __init__(
        self, kafka: KafkaTarget, topic: str, num_partitions: int, client_id: str = "processor-meta"
    ) -> None:
        self.topic = topic
        self.num_partitions = num_partitions
        self._producer = DurableProducer(kafka, client_id)

    def publish(self, record: MetadataRecord, timeout_s: float = 30.0) -> int:
        """Publish one record durably; returns its offset. Raises MetadataTopicError."""
        partition = metadata_partition_for(record.topic_partition, self.num_partitions)
        return self._producer.send(self.topic, partition, record_key(record), encode_value(record), timeout_s)

    def publish_many(self, records: Sequence[MetadataRecord], timeout_s: float = 30.0) -> list[int]:
        """Publish several records durably, waiting once for all of them; returns their offsets in
        order (a deletion's records of many segments: one round trip, not one each). Raises
        MetadataTopicError if any is not acknowledged (the others may be)."""
        messages = [
            (metadata_partition_for(r.topic_partition, self.num_partitions), record_key(r), encode_value(r))
            for r in records
        ]
        return self._producer.send_many(self.topic, messages, timeout_s)

    def close(self) -> None:
        self._producer.close()


UNAUTHENTICATED = "unauthenticated"  # a MetadataMessage's error: refused by the authentication screen


@dataclass(frozen=True, slots=True)
class MetadataMessage:
    partition: int
    offset: int
    key: bytes | None
    record: MetadataRecord | None  # None when the value did not decode (see error)
    error: str | None = None
    value: bytes | None = None  # as read (None: a tombstone)


def read_partitions(
    kafka: KafkaTarget,
    topic: str,
    partitions: list[int],
    timeout_s: float = 30.0,
    domain: bytes = authentication.DOMAIN_METADATA,
) -> Iterator[MetadataMessage]:
    """Read the given metadata partitions from the beginning up to their end (see
    :mod:`processor.metadata.read_to_end`: a snapshot of the high watermarks, re-queried once, and
    one absolute deadline). Records other writers publish meanwhile do not keep it reading. Every
    message passes the process's authentication screen (``domain``: the metadata or the deletion
    topic): one refused comes with ``error`` "unauthenticated" and the value
    :data:`~processor.metadata.authentication.REFUSED`, which the fold rejects."""
    screen = authentication.installed().screener(domain)
    consumer = new_consumer(kafka, "processor-meta-reader")
    try:
        if not partitions:
            return
        snapshot = EndSnapshot(consumer, topic, partitions, timeout_s)
        consumer.assign([KafkaTP(topic, p, OFFSET_BEGINNING) for p in partitions])
        next_offset: dict[int, int] = {}
        while not snapshot.reached(next_offset):
            batch = consumer.consume(1000, 0.1)
            for msg in batch:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise MetadataTopicError(f"reading {topic}: {err}")
                p, off = int(msg.partition() or 0), int(msg.offset() or 0)
                next_offset[p] = off + 1
                value = screen(msg)
                if value is authentication.REFUSED and msg.value() != value:  # not an empty value
                    yield MetadataMessage(p, off, msg.key(), None, UNAUTHENTICATED, value)
                    continue
                if value is None:  # tombstone: the key's segment is gone
                    yield MetadataMessage(p, off, msg.key(), None, "tombstone")
                    continue
                try:
                    yield MetadataMessage(p, off, msg.key(), decode_value(value), None, value)
                except FormatError as exc:
                    yield MetadataMessage(p, off, msg.key(), None, str(exc), value)
    except KafkaException as exc:
        raise MetadataTopicError(f"reading {topic}: {exc.args[0]}") from None
    finally:
        consumer.close()


def load_remote_state(
    kafka: KafkaTarget,
    topic: str,
    partitions: list[int] | None = None,
    wanted: set[TopicPartition] | None = None,
) -> tuple[RemoteLogState, int]:
    """Fold metadata partitions (default: all) through the one fold into remote state; returns it
    and the number of rejected records (each logged and counted by reason, never applied: garbage on
    the topic cannot stop a leader from resuming). ``wanted``: keep only these partitions' topics."""
    if partitions is None:
        admin = new_admin(kafka, "processor-admin")
        count = partition_counts(admin, [topic]).get(topic, 0)
        partitions = list(range(count))
    state = RemoteLogState(MetadataFold(frozenset(tp.topic for tp in wanted) if wanted is not None else None))
    rejected = 0
    for msg in read_partitions(kafka, topic, partitions):
        reason = state.apply_message(msg.offset, msg.key, msg.value)
        if reason is not None:
            rejected += 1
            metrics.METADATA_REJECTED.labels(reason).inc()
            log.warning("metadata record %d@%d rejected (%s)", msg.partition, msg.offset, reason)
    return state, rejected
