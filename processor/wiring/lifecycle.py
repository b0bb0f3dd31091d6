"""The worker's lifecycle tasks built from the settings: the retention service and its deleter, the
sweep of abandoned multipart uploads (processor/lifecycle/ holds what they do and
processor/lifecycle/worker_tasks.py runs them; the worker calls them on its timers). Only partitions
this worker leads (``led_partitions``) are touched, so only a partition's leader deletes.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable

from processor.config import Settings
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_topic import DeletionTopic, MetadataTombstones
from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import RetentionLimits
from processor.lifecycle.retention_service import (
    CacheView,
    CaughtUp,
    RemoteStateSource,
    RetentionService,
    StateView,
)
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.lifecycle.worker_tasks import Lifecycle, LifecycleTasks, OnFenced
from processor.metadata.sink import Confirm
from processor.metadata.topic_io import DurableProducer, MetadataPublisher
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.encryption import segment_decryption

log = logging.getLogger(__name__)

# The partitions this worker leads now, with the claim epoch it holds for each.
LedPartitions = Callable[[], dict[TopicPartition, int]]
# The ids of a partition's copies in progress.
InFlight = Callable[[TopicPartition], frozenset[uuid.UUID]]


def retention_config(settings: Settings) -> RetentionConfig:
    return RetentionConfig(
        RetentionLimits(settings.remote_retention_ms, settings.remote_retention_bytes),
        settings.remote_retention_overrides,
    )


def bucket_prefix(settings: Settings) -> str:
    return f"{settings.s3_prefix}/" if settings.s3_prefix else ""


def build_retention(
    settings: Settings,
    storage: ChunkStorage,
    metadata_partitions: int,
    cache: RemoteStateSource | None,
    confirm: Confirm,
    in_flight: InFlight | None = None,
    writer_id: str | None = None,
    caught_up: CaughtUp | None = None,
) -> Lifecycle:
    """The retention service and the deleter under it; ``confirm`` is read-your-write through a
    follower (records of an owner that lost its claim must never delete a served segment)."""
    producer = DurableProducer(settings.kafka, f"{settings.worker_id}-lifecycle")
    publisher = MetadataPublisher(
        settings.kafka, settings.metadata_topic, metadata_partitions, "processor-lifecycle"
    )
    deletion_topic = DeletionTopic.ensure(
        settings.kafka,
        settings.deletion_topic,
        metadata_partitions,
        settings.metadata_replication_factor,
        producer,
    )
    deleter = SegmentDeleter(
        storage,
        publisher,
        MetadataTombstones(producer, settings.metadata_topic, metadata_partitions),
        deletion_topic,
        writer_id or settings.worker_id,
        ObjectKeyFactory(settings.s3_prefix),
        confirm,
        # a rewrite's sources go only by its index read back: encrypted indexes are opened with it
        decryption=segment_decryption(settings),
    )
    view = CacheView(cache) if cache is not None else StateView({})
    service = RetentionService(
        retention_config(settings),
        view,
        deleter,
        deletion_topic,
        in_flight=in_flight if in_flight is not None else lambda tp: frozenset(),
        caught_up=caught_up,
    )
    return Lifecycle(service, producer, publisher)


def lifecycle_tasks(
    settings: Settings,
    storage: ChunkStorage,
    metadata_partitions: int,
    led_partitions: LedPartitions,
    cache: RemoteStateSource,
    in_flight: InFlight,
    confirm: Confirm,
    on_fenced: OnFenced,
    caught_up: CaughtUp | None = None,
) -> LifecycleTasks:
    """The retention pass and the multipart sweep of a worker; ``cache`` is its follower cache (it
    follows every led partition)."""
    retention = build_retention(
        settings, storage, metadata_partitions, cache, confirm, in_flight, caught_up=caught_up
    )
    return LifecycleTasks(
        retention,
        storage,
        ObjectKeyFactory(settings.s3_prefix),
        bucket_prefix(settings),
        settings.multipart_abort_after_ms,
        led_partitions,
        on_fenced,
    )
