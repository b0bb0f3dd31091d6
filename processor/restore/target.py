"""The target cluster of a restore: its clients, topics, and the restore's progress partition.

Every client is built by the factory functions of ``processor/kafka_clients.py``; the target's
security settings travel as librdkafka properties (confluent-kafka clients) and as aiokafka keyword
arguments (the raw log reader).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException, Producer

from processor.errors import ServiceUnavailableError
from processor.kafka_clients import check_broker, ensure_topic, new_transactional_producer, partition_counts
from processor.leader.batch_source import SourceSecurity
from processor.metadata.model import TopicPartition
from processor.restore.log_reader import read_partition_log
from processor.restore.progress_log import PartitionProgress, committed_progress
from processor.restore.progress_record import progress_partition
from processor.restore.transaction_view import resolve

log = logging.getLogger(__name__)

DEFAULT_PROGRESS_TOPIC = "__processor_restore_progress"
PROGRESS_TOPIC_PARTITIONS = 4
TRANSACTION_TIMEOUT_MS = 60_000


def librdkafka_security(security: SourceSecurity) -> dict[str, Any]:
    """The librdkafka properties of ``security`` (checked the same way as for aiokafka)."""
    security.client_kwargs()  # validates protocol, mechanism and credentials
    cfg: dict[str, Any] = {"security.protocol": security.protocol}
    if security.protocol.startswith("SASL"):
        cfg.update(
            {
                "sasl.mechanism": security.sasl_mechanism,
                "sasl.username": security.sasl_username,
                "sasl.password": security.sasl_password,
            }
        )
    if security.protocol in ("SSL", "SASL_SSL") and security.ssl_cafile:
        cfg["ssl.ca.location"] = security.ssl_cafile
    return cfg


@dataclass(frozen=True)
class TargetCluster:
    bootstrap_servers: str
    security: SourceSecurity = field(default_factory=SourceSecurity)

    def admin(self) -> Any:
        return check_broker(self.bootstrap_servers, **librdkafka_security(self.security))

    def cluster_id(self) -> str:
        return str(self.admin().list_topics(timeout=10).cluster_id or "unknown-cluster")

    def partition_count(self, topic: str) -> int | None:
        return partition_counts(self.admin(), [topic]).get(topic)

    def create_topic(self, topic: str, partitions: int, config: dict[str, str] | None = None) -> bool:
        """Create ``topic`` (broker-default replication) unless it exists; True if it was created."""
        try:
            return ensure_topic(self.admin(), topic, partitions, -1, config or {})
        except KafkaException as exc:
            raise ServiceUnavailableError(
                f"creating topic {topic} on {self.bootstrap_servers} failed: {exc}"
            ) from None

    def ensure_progress_topic(self, topic: str) -> int:
        self.create_topic(topic, PROGRESS_TOPIC_PARTITIONS, {"cleanup.policy": "compact"})
        count = self.partition_count(topic)
        if not count:
            raise ServiceUnavailableError(
                f"progress topic {topic} does not show up on {self.bootstrap_servers}"
            )
        return count

    def fenced_transactional_producer(self, transactional_id: str, **extra: Any) -> Producer:
        """A transactional producer, initialised: every earlier producer with this transactional id
        is fenced, and its open transaction aborted, before this returns."""
        producer = self.transactional_producer(transactional_id, **extra)
        try:
            producer.init_transactions(TRANSACTION_TIMEOUT_MS / 1000)
        except KafkaException as exc:
            raise ServiceUnavailableError(
                f"transactions on {self.bootstrap_servers} failed to start: {exc.args[0].str()}"
            ) from None
        return producer

    def transactional_producer(self, transactional_id: str, **extra: Any) -> Producer:
        return new_transactional_producer(
            self.bootstrap_servers,
            f"processor-restore-{transactional_id}",
            transactional_id,
            **{
                "transaction.timeout.ms": TRANSACTION_TIMEOUT_MS,
                "linger.ms": 5,
                "batch.size": 1024 * 1024,
                "queue.buffering.max.messages": 1_000_000,
                **librdkafka_security(self.security),
                **extra,
            },
        )

    def committed_progress(
        self, topic: str, partitions: int, restore_id: str
    ) -> dict[int, PartitionProgress]:
        """The restore's progress as committed transactions left it (read from the markers, so it
        is right on brokers that do not filter aborted transactions too)."""
        tp = TopicPartition(topic, progress_partition(restore_id, partitions))
        view = resolve(read_partition_log(self.bootstrap_servers, tp, self.security))
        return committed_progress(view.batches, restore_id)
