"""The target cluster of a restore: its clients, topics, and the restore's progress partition.

Every client is built by the factory functions of ``processor/kafka/clients.py`` from the target's
``KafkaConnection`` (its address and ``KafkaSecurity``).
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Any

from processor.errors import ServiceUnavailableError
from processor.kafka.admin import check_broker, ensure_topic, partition_counts
from processor.kafka.client_types import KafkaError, KafkaException
from processor.kafka.clients import KafkaTarget, connection
from processor.kafka.partition import TopicPartition
from processor.kafka.security import KafkaConnection
from processor.restore.batch_producer import BatchProducer, TxnError
from processor.restore.log_reader import read_partition_log
from processor.restore.progress_log import PartitionProgress, committed_progress
from processor.restore.progress_record import progress_partition
from processor.restore.transaction_view import resolve

log = logging.getLogger(__name__)

DEFAULT_PROGRESS_TOPIC = "__processor_restore_progress"
PROGRESS_TOPIC_PARTITIONS = 4
TRANSACTION_TIMEOUT_MS = 60_000


CLUSTER_ID_WAIT_S = 60.0
_TRANSIENT = frozenset({KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN})


@dataclass(frozen=True)
class TargetCluster:
    """The target cluster: its address and security (a bare string: a PLAINTEXT bootstrap list)."""

    target: KafkaTarget

    @property
    def connection(self) -> KafkaConnection:
        return connection(self.target)

    @property
    def bootstrap_servers(self) -> str:
        return self.connection.bootstrap_servers

    def describe(self) -> str:
        return self.connection.describe()

    def admin(self) -> Any:
        return check_broker(self.connection)

    def cluster_id(self) -> str:
        """The target's cluster id. A connection that drops meanwhile (a broker restarting) is
        retried for CLUSTER_ID_WAIT_S, a fresh client each time, then reported."""
        deadline = time.monotonic() + CLUSTER_ID_WAIT_S
        while True:
            try:
                return str(self.admin().list_topics(timeout=10).cluster_id or "unknown-cluster")
            except KafkaException as exc:
                error = exc.args[0]
                transient = error.retriable() or error.code() in _TRANSIENT
                if not transient or time.monotonic() >= deadline:
                    raise
                log.info("target %s: %s; asking again", self.describe(), error.str())
                time.sleep(random.uniform(0.5, 1.5))

    def partition_count(self, topic: str) -> int | None:
        return partition_counts(self.admin(), [topic]).get(topic)

    def create_topic(self, topic: str, partitions: int, config: dict[str, str] | None = None) -> bool:
        """Create ``topic`` unless it exists; True if it was created. Its replication factor comes
        from the cluster as for every topic the processor creates: 3 on three or more brokers, else
        the broker count (never the broker's ``default.replication.factor``, 1 unless changed)."""
        try:
            return ensure_topic(self.admin(), topic, partitions, None, config or {})
        except KafkaException as exc:
            raise ServiceUnavailableError(
                f"creating topic {topic} on {self.describe()} failed: {exc}"
            ) from None

    def ensure_progress_topic(self, topic: str) -> int:
        self.create_topic(topic, PROGRESS_TOPIC_PARTITIONS, {"cleanup.policy": "compact"})
        count = self.partition_count(topic)
        if not count:
            raise ServiceUnavailableError(f"progress topic {topic} does not show up on {self.describe()}")
        return count

    def fenced_transactional_producer(self, transactional_id: str) -> BatchProducer:
        """The restore's transactional producer, initialised: every earlier producer with this
        transactional id is fenced, and its open transaction aborted, before this returns."""
        producer = BatchProducer(
            self.connection,
            transactional_id,
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            client_id=f"processor-restore-{transactional_id}",
        )
        try:
            producer.init(TRANSACTION_TIMEOUT_MS / 1000)
        except TxnError as exc:
            producer.close()
            raise ServiceUnavailableError(
                f"transactions on {self.describe()} failed to start: {exc}"
            ) from None
        except BaseException:
            producer.close()
            raise
        return producer

    def committed_progress(
        self, topic: str, partitions: int, restore_id: str
    ) -> dict[int, PartitionProgress]:
        """The restore's progress as committed transactions left it (read from the markers, so it
        is right on brokers that do not filter aborted transactions too)."""
        tp = TopicPartition(topic, progress_partition(restore_id, partitions))
        view = resolve(read_partition_log(self.connection, tp))
        return committed_progress(view.batches, restore_id)
