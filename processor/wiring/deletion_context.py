"""What the deleting CLI commands share: checked connections to Kafka and S3, a follower of the
topic's metadata partitions (a throwaway cache, kept current while the command runs), the metadata
topic's publisher, the deletion topic and a deleter, all released by ``close``.

An operator command writes to a partition like any owner does: under a claim (``ADMIN``) it
appends to the partition's metadata partition and reads back (processor/metadata/fold_rules.py), every
record carrying that claim's epoch and confirmed through the follower. Workers that led the
partition stop writing it the moment their followers see the claim; when the command is done it
releases the claim and the worker Faust assigns the partition to claims it again.
"""

from __future__ import annotations

import logging
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from processor.config import Settings
from processor.errors import FencedWriterError, ProcessorError
from processor.kafka.admin import check_broker, partition_counts
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_topic import DeletionTopic, MetadataTombstones
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import ClaimKind, PartitionClaim
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
    claims: dict[TopicPartition, int] = field(default_factory=dict)

    def state(self, tp: TopicPartition) -> PartitionRemoteState:
        """The partition's remote state as the fold shows it now."""
        return self.follower.cache.remote_state(tp)

    def partitions_of(self, topic: str) -> list[TopicPartition]:
        return [tp for tp in self.follower.cache.topic_partitions() if tp.topic == topic]

    def claim(self, tp: TopicPartition) -> int:
        """Take ``tp`` for this command (an ADMIN claim) and return the epoch to write with. Raises
        FencedWriterError if another claim came right after it."""
        record = PartitionClaim(tp, uuid.uuid4(), ClaimKind.ADMIN, self.writer_id, int(time.time() * 1000))
        offset = self.publisher.publish(record)
        part = metadata_partition_for(tp, self.metadata_partitions)
        materializer = self.follower.materializer
        if materializer.outcome(part, offset, 60.0) is not True or materializer.current_epoch(tp) != offset:
            raise FencedWriterError(f"{tp}: another claim came right after this command's; try again")
        self.claims[tp] = offset
        return offset

    def release(self, tp: TopicPartition) -> None:
        """Hand ``tp`` back: the worker Faust assigns it to claims it again at once."""
        epoch = self.claims.pop(tp, None)
        if epoch is None:
            return
        record = PartitionClaim(
            tp, uuid.uuid4(), ClaimKind.RELEASE, self.writer_id, int(time.time() * 1000), released_epoch=epoch
        )
        self.publisher.publish(record)

    def close(self) -> None:
        try:
            for tp in list(self.claims):
                self.release(tp)
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
    )
