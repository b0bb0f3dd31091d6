"""Kafka at the edge of the deletion path: tombstones on the metadata topic and the topic of failed
deletions (KIP-405's ``__remote_segments_to_be_deleted``).

The deletion topic (``PROCESSOR_DELETION_TOPIC``) is compacted and partitioned like the metadata
topic. A failed deletion is published there with the segment's key (``{topic}/{partition}/{uuid}``)
and the segment's full metadata as value, framed exactly like the metadata topic
(``codec.encode_value``, state DELETE_SEGMENT_STARTED), so the object keys to delete travel with it.
When a retry has deleted the objects, a tombstone for the key resolves the entry; the latest value
per key is therefore "still to delete" or nothing. Every retention pass reads the topic to its end
and retries what is pending; operators can consume it too (the seed's "user can consume the events").
"""

from __future__ import annotations

import logging

from processor.kafka.clients import KafkaTarget, new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.authentication import DOMAIN_DELETION
from processor.metadata.codec import delete_key, encode_value, metadata_partition_for, segment_key
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.metadata.topic_io import (
    UNAUTHENTICATED,
    DurableProducer,
    ensure_compacted_topic,
    read_partitions,
    topic_partitions,
)

log = logging.getLogger(__name__)

# Compacted, as the metadata topic, and checked the same way at start (a topic that is not compacted
# is refused: retention would drop failed deletions never retried, their objects left behind). No
# min.compaction.lag.ms: only the latest value per key counts here, which compaction always keeps.
DELETION_TOPIC_CONFIG = {"cleanup.policy": "compact"}


class MetadataTombstones:
    """Tombstones on the metadata topic, so compaction forgets a deleted segment's keys: its copy key
    first, then its delete key (the other order would let a cleaner point between them keep the
    copy's FINISHED and drop the deletion). Sent only once the owner's view shows the segment's
    DELETE_SEGMENT_FINISHED (or for a rejected record's key), so they always come after it."""

    def __init__(self, producer: DurableProducer, topic: str, num_partitions: int) -> None:
        self.producer = producer
        self.topic = topic
        self.num_partitions = num_partitions

    def tombstone(self, segment: RemoteLogSegmentMetadata) -> int:
        partition = metadata_partition_for(segment.topic_partition, self.num_partitions)
        self.producer.send(self.topic, partition, segment_key(segment.segment_id), None)
        return self.producer.send(self.topic, partition, delete_key(segment.segment_id), None)


class DeletionTopic:
    """Failed deletions, published and resolved; read back for retries."""

    def __init__(
        self, kafka: KafkaTarget, topic: str, num_partitions: int, producer: DurableProducer
    ) -> None:
        self.kafka = kafka
        self.topic = topic
        self.num_partitions = num_partitions
        self.producer = producer

    @classmethod
    def ensure(
        cls,
        kafka: KafkaTarget,
        topic: str,
        num_partitions: int,
        replication: int | None,  # None: min(3, the cluster's brokers)
        producer: DurableProducer,
    ) -> DeletionTopic:
        admin = new_admin(kafka, "processor-admin")
        ensure_compacted_topic(
            admin, topic, "deletion topic", num_partitions, replication, DELETION_TOPIC_CONFIG, None
        )
        # Its own partition count (the one asked for only if this call created it): one deletion
        # topic, named by a setting of its own, may serve deployments whose metadata topics differ in
        # size, and writing or reading a partition it does not have fails.
        have = topic_partitions(admin, topic, "deletion topic")
        return cls(kafka, topic, have, producer)

    def _partition(self, tp: TopicPartition) -> int:
        return metadata_partition_for(tp, self.num_partitions)

    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None:
        entry = segment
        if segment.state is not SegmentState.DELETE_SEGMENT_STARTED:
            entry = segment.with_state(SegmentState.DELETE_SEGMENT_STARTED, segment.event_timestamp_ms)
        self.producer.send(
            self.topic,
            self._partition(segment.topic_partition),
            segment_key(segment.segment_id),
            encode_value(entry),
            domain=DOMAIN_DELETION,
        )

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None:
        self.producer.send(
            self.topic,
            self._partition(segment.topic_partition),
            segment_key(segment.segment_id),
            None,
            domain=DOMAIN_DELETION,
        )

    def pending(self, wanted: set[TopicPartition] | None = None) -> list[RemoteLogSegmentMetadata]:
        """Entries not yet resolved (latest value per key is not a tombstone), oldest first."""
        latest: dict[bytes, RemoteLogSegmentMetadata | None] = {}
        parts = list(range(self.num_partitions))
        for msg in read_partitions(self.kafka, self.topic, parts, domain=DOMAIN_DELETION):
            key = msg.key or b""
            if msg.error == UNAUTHENTICATED:
                continue  # neither an entry nor its resolution: counted and logged by the screen
            if msg.record is None:
                if msg.error != "tombstone":
                    log.warning(
                        "deletion topic entry %d@%d skipped: %s", msg.partition, msg.offset, msg.error
                    )
                latest[key] = None
                continue
            if not isinstance(msg.record, RemoteLogSegmentMetadata):
                log.warning("deletion topic entry %d@%d is not a segment; skipped", msg.partition, msg.offset)
                continue
            latest.pop(key, None)  # keep first-seen order of live entries stable: re-insert at the end
            latest[key] = msg.record
        return [
            s for s in latest.values() if s is not None and (wanted is None or s.topic_partition in wanted)
        ]
