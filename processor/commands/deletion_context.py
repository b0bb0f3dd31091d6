"""What the deleting CLI commands share: checked connections to Kafka and S3, the metadata topic's
publisher, the deletion topic and a deleter, all released by ``close``."""

from __future__ import annotations

from dataclasses import dataclass

from processor.config import Settings
from processor.errors import ProcessorError
from processor.kafka_clients import check_broker, partition_counts
from processor.lifecycle.deletion_topic import DeletionTopic, MetadataTombstones
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.model import TopicPartition
from processor.metadata.remote_log_state import RemoteLogState
from processor.metadata.topic_io import DurableProducer, MetadataPublisher, load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.storage import build_storage


@dataclass
class DeletionContext:
    settings: Settings
    storage: ChunkStorage
    metadata_partitions: int
    publisher: MetadataPublisher
    producer: DurableProducer
    deletion_topic: DeletionTopic
    deleter: SegmentDeleter
    keys: ObjectKeyFactory
    writer_id: str

    def load(
        self, partitions: list[int] | None = None, wanted: set[TopicPartition] | None = None
    ) -> RemoteLogState:
        state, _skipped = load_remote_state(
            self.settings.bootstrap_servers, self.settings.metadata_topic, partitions, wanted
        )
        return state

    def close(self) -> None:
        self.producer.close()
        self.publisher.close()
        self.storage.close()


def open_context(settings: Settings) -> DeletionContext:
    """Raises ServiceUnavailableError (Kafka), StorageError (S3), ProcessorError (nothing offloaded)."""

    admin = check_broker(settings.bootstrap_servers)
    counts = partition_counts(admin, [settings.metadata_topic])
    if settings.metadata_topic not in counts:
        raise ProcessorError(
            f"metadata topic {settings.metadata_topic} does not exist: nothing was offloaded yet"
        )
    storage = build_storage(settings)
    storage.check_bucket()
    parts = counts[settings.metadata_topic]
    writer_id = f"cli-{settings.worker_id}"
    publisher = MetadataPublisher(settings.bootstrap_servers, settings.metadata_topic, parts, "processor-cli")
    producer = DurableProducer(settings.bootstrap_servers, "processor-cli-lifecycle")
    deletion_topic = DeletionTopic.ensure(
        settings.bootstrap_servers,
        settings.deletion_topic,
        parts,
        settings.metadata_replication_factor,
        producer,
    )
    deleter = SegmentDeleter(
        storage,
        publisher,
        MetadataTombstones(producer, settings.metadata_topic, parts),
        deletion_topic,
        writer_id,
    )
    return DeletionContext(
        settings,
        storage,
        parts,
        publisher,
        producer,
        deletion_topic,
        deleter,
        ObjectKeyFactory(settings.s3_prefix),
        writer_id,
    )
