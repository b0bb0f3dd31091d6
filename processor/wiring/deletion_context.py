"""What the deleting CLI commands share: checked connections to Kafka and S3, a follower of the
topic's metadata partitions (a throwaway cache, kept current while the command runs), the metadata
topic's publisher, the deletion topic and a deleter, all released by ``close``.

An operator command writes to a partition like any owner does: under a claim (``ADMIN``,
processor/lifecycle/operator_claims.py), released when the command is done.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

from processor.config import Settings
from processor.errors import ProcessorError
from processor.kafka.admin import check_broker, partition_counts
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_topic import DeletionTopic, MetadataTombstones
from processor.lifecycle.operator_claims import OperatorClaims
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.codec import metadata_partition_for
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import DurableProducer, MetadataPublisher
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.encryption import segment_decryption
from processor.wiring.follower import Follower, build_follower
from processor.wiring.read_your_write import confirm_by_follower
from processor.wiring.storage import build_storage

log = logging.getLogger(__name__)


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
    follower: Follower
    cache_dir: tempfile.TemporaryDirectory[str]
    claims: OperatorClaims

    def state(self, tp: TopicPartition) -> PartitionRemoteState:
        """The partition's remote state as the fold shows it now."""
        return self.follower.cache.remote_state(tp)

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [tp for tp in self.follower.cache.topic_partitions() if tp.topic == topic]

    def claim(self, tp: TopicPartition) -> int:
        """Take ``tp`` for this command (processor/lifecycle/operator_claims.py); the epoch to write with."""
        return self.claims.claim(tp)

    def release(self, tp: TopicPartition) -> None:
        self.claims.release(tp)

    def close(self) -> None:
        try:
            self.claims.release_all()
        finally:
            self.follower.close()
            self.cache_dir.cleanup()
            self.producer.close()
            self.publisher.close()
            self.storage.close()


def open_context(settings: Settings, topic: str) -> DeletionContext:
    """Raises ServiceUnavailableError (Kafka), StorageError (S3), ProcessorError (nothing offloaded)."""
    admin = check_broker(settings.kafka)
    counts = partition_counts(admin, [settings.metadata_topic, topic])
    if settings.metadata_topic not in counts:
        raise ProcessorError(
            f"metadata topic {settings.metadata_topic} does not exist: nothing was offloaded yet"
        )
    parts = counts[settings.metadata_topic]
    storage = build_storage(settings)
    storage.check_bucket()
    # the metadata partitions that hold the topic's partitions (all of them when the topic is gone)
    if topic in counts:
        followed = sorted(
            {metadata_partition_for(TopicPartition(topic, p), parts) for p in range(counts[topic])}
        )
    else:
        followed = list(range(parts))
    cache_dir = tempfile.TemporaryDirectory(prefix="processor-cli-cache-")
    scoped = settings.model_copy(
        update={"follow_metadata_partitions": tuple(followed), "follow_topics": (topic,)}
    )
    follower = build_follower(scoped, parts, cache_dir=Path(cache_dir.name), storage=storage)
    try:
        follower.materializer.catch_up()
        follower.materializer.start()
    except BaseException:
        follower.close()
        cache_dir.cleanup()
        raise
    writer_id = f"cli-{settings.worker_id}"
    publisher = MetadataPublisher(settings.kafka, settings.metadata_topic, parts, "processor-cli")
    producer = DurableProducer(settings.kafka, "processor-cli-lifecycle")
    deletion_topic = DeletionTopic.ensure(
        settings.kafka,
        settings.deletion_topic,
        parts,
        settings.metadata_replication_factor,
        producer,
    )
    keys = ObjectKeyFactory(settings.s3_prefix)
    deleter = SegmentDeleter(
        storage,
        publisher,
        MetadataTombstones(producer, settings.metadata_topic, parts),
        deletion_topic,
        writer_id,
        keys,
        confirm_by_follower(follower.materializer, parts),
        # a rewrite's sources go only by its index read back: encrypted indexes are opened with it
        decryption=segment_decryption(settings),
    )
    return DeletionContext(
        settings,
        storage,
        parts,
        publisher,
        producer,
        deletion_topic,
        deleter,
        keys,
        writer_id,
        follower,
        cache_dir,
        OperatorClaims(publisher, follower.materializer, parts, writer_id),
    )
