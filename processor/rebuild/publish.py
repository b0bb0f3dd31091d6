"""Publish a rebuilt metadata topic: per partition an ``ADMIN`` claim, the served segments'
COPY_SEGMENT_FINISHED records stamped with its epoch (each rewrite after the sources it replaces, which
readers then hold superseded and the owner deletes; the remote log start offset where the first
served one starts), then a ``RELEASE`` of the claim.

Three rounds, each flushed before the next (a rebuild publishes its partitions a batch at a time,
:class:`Publisher`: each batch's three rounds), so that in every metadata partition each source
partition's claim comes before its segments and the release after them:

1. the claims: their offsets (delivery reports) are the epochs;
2. the segments' FINISHED records, ``writer_epoch`` = the partition's claim epoch (the idempotent
   producer keeps them in order; they are many, so they are not sent one at a time), each
   partition's after its segments its remote log start offset when that is above 0;
3. the releases: workers claim the partitions again when Faust assigns them.

A record not delivered stops the rebuild (MetadataTopicError); running it again publishes the same
segments under a newer claim, which readers accept in place of the first.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from processor.errors import MetadataTopicError
from processor.kafka.client_types import KafkaError
from processor.kafka.clients import KafkaTarget, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata import authentication
from processor.metadata.codec import encode_value, metadata_partition_for, record_key
from processor.metadata.model import ClaimKind, MetadataRecord, PartitionClaim, RemoteLogStartOffset
from processor.rebuild.resolve import REBUILD_WRITER, PartitionRebuild

FLUSH_TIMEOUT_S = 120.0


class _Round:
    """One round of records: sent without waiting, then flushed; with ``offsets``, the offsets come
    back by record (the claims': their epochs), else only a failure does (the segments' round: one
    delivery callback for all, not a closure and an offset kept per record)."""

    def __init__(self, producer: Any, topic: str, metadata_partitions: int, offsets: bool = True) -> None:
        self.producer, self.topic, self.partitions = producer, topic, metadata_partitions
        self.keep_offsets = offsets
        self.offsets: dict[int, int] = {}
        self.errors: list[KafkaError] = []

    def _failed(self, err: KafkaError | None, _msg: Any) -> None:
        if err is not None:
            self.errors.append(err)

    def _offset_of(self, n: int) -> Callable[[KafkaError | None, Any], None]:
        def delivered(err: KafkaError | None, msg: Any) -> None:
            if err is not None:
                self.errors.append(err)
            else:
                self.offsets[n] = msg.offset()

        return delivered

    def send(self, n: int, record: MetadataRecord, partition: int | None = None) -> None:
        delivered = self._offset_of(n) if self.keep_offsets else self._failed
        if partition is None:
            partition = metadata_partition_for(record.topic_partition, self.partitions)
        value, key = encode_value(record), record_key(record)
        headers = authentication.installed().headers(authentication.DOMAIN_METADATA, key, value)
        while True:
            try:
                self.producer.produce(self.topic, value, key, partition, delivered, headers=headers)
                return
            except BufferError:  # librdkafka's queue is full: serve delivery reports, retry
                self.producer.poll(0.1)

    def flush(self, what: str) -> None:
        left = self.producer.flush(FLUSH_TIMEOUT_S)
        if left or self.errors:
            reason = self.errors[0].str() if self.errors else f"{left} records not acknowledged"
            raise MetadataTopicError(f"publishing the {what} to {self.topic} failed: {reason}")


class Publisher:
    """Publishes plans a batch at a time (a rebuild streams its partitions: each batch's three
    rounds are flushed before the next batch starts) through one producer."""

    def __init__(
        self,
        kafka: KafkaTarget,
        topic: str,
        metadata_partitions: int,
        producer_config: Mapping[str, Any] | None = None,
    ) -> None:
        self.topic, self.partitions = topic, metadata_partitions
        self.producer = new_producer(
            kafka,
            "processor-rebuild-metadata",
            **{"enable.idempotence": True, "linger.ms": 5, **(producer_config or {})},
        )
        self.epochs: dict[TopicPartition, int] = {}

    def publish(self, plan: Mapping[TopicPartition, PartitionRebuild]) -> dict[TopicPartition, int]:
        """Publish ``plan``'s partitions; returns each one's claim epoch."""
        producer, topic, metadata_partitions = self.producer, self.topic, self.partitions
        parts = [(tp, part) for tp, part in sorted(plan.items()) if part.served]
        if not parts:
            return {}
        now = int(time.time() * 1000)
        claims = _Round(producer, topic, metadata_partitions)
        for n, (tp, part) in enumerate(parts):
            claims.send(
                n,
                PartitionClaim(
                    tp, uuid.uuid4(), ClaimKind.ADMIN, REBUILD_WRITER, now, topic_id=part.topic_id
                ),
            )
        claims.flush("claims")
        epochs = {tp: claims.offsets[n] for n, (tp, _part) in enumerate(parts)}
        segments = _Round(producer, topic, metadata_partitions, offsets=False)
        n = 0
        for tp, part in parts:
            meta_partition = metadata_partition_for(tp, metadata_partitions)
            for segment in part.published:
                stamped = replace(segment, writer_epoch=epochs[tp], writer_id=REBUILD_WRITER)
                segments.send(n, stamped, meta_partition)
                n += 1
            start = rebuilt_log_start(part)
            if start is not None:
                segments.send(
                    n, RemoteLogStartOffset(tp, start, now, REBUILD_WRITER, epochs[tp]), meta_partition
                )
                n += 1
        segments.flush("segment records")
        releases = _Round(producer, topic, metadata_partitions)
        for n, (tp, _part) in enumerate(parts):
            release = PartitionClaim(
                tp,
                uuid.uuid4(),
                ClaimKind.RELEASE,
                REBUILD_WRITER,
                int(time.time() * 1000),
                released_epoch=epochs[tp],
            )
            releases.send(n, release)
        releases.flush("releases")
        self.epochs.update(epochs)
        return epochs


def publish_rebuild(
    kafka: KafkaTarget,
    topic: str,
    metadata_partitions: int,
    plan: Mapping[TopicPartition, PartitionRebuild],
    producer_config: Mapping[str, Any] | None = None,
) -> dict[TopicPartition, int]:
    """Publish ``plan`` in one batch; returns each partition's claim epoch."""
    return Publisher(kafka, topic, metadata_partitions, producer_config).publish(plan)


def rebuilt_log_start(part: PartitionRebuild) -> int | None:
    """The remote log start offset a rebuilt partition states: where its first served segment starts
    (the records before it were deleted, or never archived), None at offset 0. The lost topic's own
    start offset is not in the bucket; without it readers took the archive to begin at 0, and a
    delete-before below the first segment moved the start into offsets nothing serves."""
    first = min((s.start_offset for s in part.served), default=0)
    return first if first > 0 else None
