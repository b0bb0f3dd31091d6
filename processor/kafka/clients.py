"""Every Kafka client of the package is built here (the Kafka edge shared by all roles).

Each factory takes a :class:`~processor.kafka.security.KafkaConnection` (bootstrap servers and
``KafkaSecurity``), so SASL and TLS reach every client: confluent-kafka consumers, producers and
admin clients (metadata and deletion topics, CLI, follower, Spark live tail), the batch source's
aiokafka client (:func:`aiokafka_client_kwargs`) and the Faust consumer group
(:func:`faust_broker_settings`). A bare string is a PLAINTEXT bootstrap list (the plain local stack
and tests). No other module constructs a Kafka client; topic administration is in
:mod:`processor.kafka.admin`, the folding of librdkafka's log lines in :mod:`processor.kafka.rdkafka_log`.
"""

from __future__ import annotations

from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from processor.errors import ServiceUnavailableError
from processor.kafka.rdkafka_log import RDKAFKA_LOG
from processor.kafka.security import KafkaConnection

KafkaTarget = KafkaConnection | str


def connection(target: KafkaTarget) -> KafkaConnection:
    return target if isinstance(target, KafkaConnection) else KafkaConnection(target)


def base_config(target: KafkaTarget, client_id: str) -> dict[str, Any]:
    conn = connection(target)
    return {
        "bootstrap.servers": conn.bootstrap_servers,
        "client.id": client_id,
        "socket.connection.setup.timeout.ms": 5000,
        # librdkafka's own lines go through Python logging (warnings and worse), not raw to stderr.
        "logger": RDKAFKA_LOG,
        "log_level": 4,
        **conn.security.librdkafka_config(),
    }


def consumer_config(target: KafkaTarget, client_id: str, **extra: Any) -> dict[str, Any]:
    cfg = base_config(target, client_id)
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


def new_consumer(target: KafkaTarget, client_id: str, **extra: Any) -> Consumer:
    return Consumer(consumer_config(target, client_id, **extra))


def new_producer(target: KafkaTarget, client_id: str, **extra: Any) -> Producer:
    """A producer that keeps each partition's records in the order produced: idempotent (without
    it librdkafka may retry one request while the next lands, and a batch lands out of order)."""
    cfg = base_config(target, client_id)
    cfg.update({"acks": "all", "enable.idempotence": True, "linger.ms": 2, "message.timeout.ms": 30000})
    cfg.update(extra)
    return Producer(cfg)


def new_transactional_producer(
    target: KafkaTarget, client_id: str, transactional_id: str, **extra: Any
) -> Producer:
    """An idempotent, transactional producer (exactly-once writes; ``init_transactions`` fences
    every earlier producer with the same ``transactional_id`` and aborts its open transaction)."""
    return new_producer(
        target, client_id, **{"transactional.id": transactional_id, "enable.idempotence": True, **extra}
    )


def new_admin(target: KafkaTarget, client_id: str, **extra: Any) -> AdminClient:
    return AdminClient({**base_config(target, client_id), **extra})


def aiokafka_client_kwargs(target: KafkaTarget) -> dict[str, Any]:
    """``bootstrap_servers`` and the security arguments of an aiokafka client."""
    conn = connection(target)
    return {"bootstrap_servers": conn.bootstrap_servers, **conn.security.aiokafka_kwargs()}


def faust_broker_settings(target: KafkaTarget) -> dict[str, Any]:
    """``broker`` and ``broker_credentials`` of the Faust app (its group runs on aiokafka)."""
    conn = connection(target)
    hosts = ";".join(h.strip() for h in conn.bootstrap_servers.split(",") if h.strip())
    return {"broker": f"kafka://{hosts}", "broker_credentials": conn.security.faust_credentials()}


def list_topics_or_unavailable(admin: AdminClient, timeout_s: float) -> object:
    """The cluster's metadata (a cheap request, what a readiness probe asks); raises
    ServiceUnavailableError naming the client's reason when Kafka does not answer."""
    try:
        return admin.list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise ServiceUnavailableError(str(exc.args[0] if exc.args else exc)) from exc
