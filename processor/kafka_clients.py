"""confluent-kafka client construction and broker checks (the Kafka edge shared by all roles)."""

from __future__ import annotations

import logging
import uuid
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from processor.errors import ServiceUnavailableError
from processor.metadata.model import TopicPartition

log = logging.getLogger(__name__)
_RDKAFKA_LOG = logging.getLogger("librdkafka")


def base_config(bootstrap_servers: str, client_id: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap_servers,
        "client.id": client_id,
        "socket.connection.setup.timeout.ms": 5000,
        # librdkafka's own lines go through Python logging (warnings and worse), not raw to stderr.
        "logger": _RDKAFKA_LOG,
        "log_level": 4,
    }


def consumer_config(bootstrap_servers: str, client_id: str, **extra: Any) -> dict[str, Any]:
    cfg = base_config(bootstrap_servers, client_id)
    cfg.update(
        {
            # Assign-only consumers: no group membership, no commits (positions live in remote metadata).
            "group.id": f"{client_id}-unused",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": "earliest",
            "enable.partition.eof": False,
            # Small fetch waits: brokers like Tansu answer a fetch only after the full wait.
            "fetch.wait.max.ms": 10,
        }
    )
    cfg.update(extra)
    return cfg


def new_consumer(bootstrap_servers: str, client_id: str, **extra: Any) -> Consumer:
    return Consumer(consumer_config(bootstrap_servers, client_id, **extra))


def new_producer(bootstrap_servers: str, client_id: str, **extra: Any) -> Producer:
    cfg = base_config(bootstrap_servers, client_id)
    cfg.update({"acks": "all", "linger.ms": 2, "message.timeout.ms": 30000})
    cfg.update(extra)
    return Producer(cfg)


def new_transactional_producer(
    bootstrap_servers: str, client_id: str, transactional_id: str, **extra: Any
) -> Producer:
    """An idempotent, transactional producer (exactly-once writes; ``init_transactions`` fences
    every earlier producer with the same ``transactional_id`` and aborts its open transaction)."""
    return new_producer(
        bootstrap_servers,
        client_id,
        **{"transactional.id": transactional_id, "enable.idempotence": True, **extra},
    )


def new_admin(bootstrap_servers: str, client_id: str, **extra: Any) -> AdminClient:
    return AdminClient({**base_config(bootstrap_servers, client_id), **extra})


def check_broker(bootstrap_servers: str, timeout_s: float = 10.0, **extra: Any) -> AdminClient:
    """Fail fast with a clear error when no broker answers. ``extra``: librdkafka settings (security)."""
    admin = new_admin(bootstrap_servers, "processor-check", **extra)
    try:
        admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"Kafka broker at {bootstrap_servers} is unreachable (PROCESSOR_BOOTSTRAP_SERVERS): {exc.args[0]}"
        ) from None
    return admin


def partition_counts(admin: AdminClient, topics: list[str], timeout_s: float = 10.0) -> dict[str, int]:
    md = admin.list_topics(timeout=timeout_s)
    out: dict[str, int] = {}
    for name in topics:
        t = md.topics.get(name)
        if t is not None and t.error is None:
            out[name] = len(t.partitions)
    return out


def ensure_topic(
    admin: AdminClient,
    name: str,
    partitions: int,
    replication: int,
    config: dict[str, str],
    timeout_s: float = 15.0,
) -> bool:
    """Create ``name`` if missing; returns True if it was created. Warns when an existing config differs."""
    if name in partition_counts(admin, [name], timeout_s):
        try:
            described = admin.describe_configs([ConfigResource("topic", name)])
            current = next(iter(described.values())).result(timeout=timeout_s)
            for key, wanted in config.items():
                have = current.get(key)
                if have is not None and have.value != wanted:
                    log.warning(
                        "topic %s has %s=%s; this processor expects %s", name, key, have.value, wanted
                    )
        except KafkaException as exc:
            log.warning("could not read the configuration of topic %s: %s", name, exc)
        return False
    futures = admin.create_topics([NewTopic(name, partitions, replication, config=config)])
    try:
        futures[name].result(timeout=timeout_s)
    except KafkaException as exc:
        err = exc.args[0]
        if getattr(err, "name", lambda: "")() != "TOPIC_ALREADY_EXISTS":
            raise
    return True


def topic_ids(admin: AdminClient, topics: list[str], timeout_s: float = 10.0) -> dict[str, str]:
    """The broker's topic id of each existing topic in ``topics``, as an RFC 4122 string.

    A topic deleted and re-created under the same name gets a new id (KIP-516), which is how a new
    partition history is told from the old one. Topics that do not exist, or a broker that reports
    no ids (all-zero), are left out.
    """
    if not topics:
        return {}
    futures = admin.describe_topics(TopicCollection(list(topics)), request_timeout=timeout_s)
    out: dict[str, str] = {}
    for name, future in futures.items():
        try:
            described = future.result(timeout=timeout_s)
        except KafkaException as exc:
            log.debug("topic %s not described: %s", name, exc)
            continue
        raw = getattr(described, "topic_id", None)
        if raw is None:
            continue
        msb, lsb = raw.get_most_significant_bits(), raw.get_least_significant_bits()
        value = ((msb & (2**64 - 1)) << 64) | (lsb & (2**64 - 1))
        if value:
            out[name] = str(uuid.UUID(int=value))
    return out


def latest_offsets(
    admin: AdminClient, tps: list[TopicPartition], timeout_s: float
) -> dict[TopicPartition, int]:
    """The high watermark of each partition in ``tps`` (ListOffsets "latest", one request per
    partition leader). A partition whose leader answers with an error is left out (and logged at
    debug); when none answers, the first errors are raised as a KafkaException-carrying RuntimeError."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets(
        {KafkaTP(tp.topic, tp.partition): latest for tp in tps}, request_timeout=timeout_s
    )
    answers: dict[TopicPartition, int] = {}
    errors: list[str] = []
    for ktp, future in futures.items():
        tp = TopicPartition(ktp.topic, ktp.partition)
        try:
            answers[tp] = int(future.result(timeout=timeout_s).offset)
        except KafkaException as exc:  # this partition's leader moving, the topic deleted ...
            errors.append(f"{tp}: {exc}")
    if errors and not answers:
        raise RuntimeError("; ".join(errors[:5]))
    if errors:
        log.debug("high watermarks missing for %d partitions: %s", len(errors), "; ".join(errors[:5]))
    return answers
