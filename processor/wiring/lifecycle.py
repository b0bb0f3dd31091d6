"""The worker's lifecycle tasks built from the settings, as plain calls: the retention pass and the
sweep of abandoned multipart uploads (processor/lifecycle/ holds what they do). The worker runs them
on its timers. Only partitions this worker leads (``led_partitions``) are touched, so only a
partition's leader deletes.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from processor.config import Settings
from processor.errors import ProcessorError
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_topic import DeletionTopic, MetadataTombstones
from processor.lifecycle.multipart_sweep import SWEEP_INTERVAL_S, sweep_multipart_uploads
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
# Called with the partitions a pass found held by another claim: the worker stops writing them.
OnFenced = Callable[[list[TopicPartition]], None]


class Merges(Protocol):
    """The worker's merges of small segments (processor/wiring/rewrite.py: WorkerMerges)."""

    def due(self) -> bool: ...

    def run_once(self, led: Mapping[TopicPartition, int]) -> object: ...


def retention_config(settings: Settings) -> RetentionConfig:
    return RetentionConfig(
        RetentionLimits(settings.remote_retention_ms, settings.remote_retention_bytes),
        settings.remote_retention_overrides,
    )


def bucket_prefix(settings: Settings) -> str:
    return f"{settings.s3_prefix}/" if settings.s3_prefix else ""


@dataclass
class Lifecycle:
    service: RetentionService
    producer: DurableProducer
    publisher: MetadataPublisher

    def close(self) -> None:
        self.producer.close()
        self.publisher.close()


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


class LifecycleTasks:
    """The retention pass (``run_once``, every PROCESSOR_RETENTION_CHECK_MS) and the multipart sweep
    (``sweep``: at start, then every SWEEP_INTERVAL_S from within ``run_once``). Blocking calls: the
    caller runs them off its event loop. ``cache`` is the worker's follower cache (it follows every
    led partition); partitions a pass finds held by another claim go to ``on_fenced``."""

    def __init__(
        self,
        settings: Settings,
        storage: ChunkStorage,
        metadata_partitions: int,
        led_partitions: LedPartitions,
        cache: RemoteStateSource,
        in_flight: InFlight,
        confirm: Confirm,
        on_fenced: OnFenced,
        caught_up: CaughtUp | None = None,
    ) -> None:
        self.settings = settings
        self.storage = storage
        self.led_partitions = led_partitions
        self.on_fenced = on_fenced
        self.lifecycle = build_retention(
            settings, storage, metadata_partitions, cache, confirm, in_flight, caught_up=caught_up
        )
        self._last_sweep = -SWEEP_INTERVAL_S
        # the worker's merges of small segments (processor/wiring/rewrite.py), after the pass
        self.merges: Merges | None = None

    def sweep(self) -> None:
        self._last_sweep = time.monotonic()
        try:
            aborted = sweep_multipart_uploads(
                self.storage,
                ObjectKeyFactory(self.settings.s3_prefix),
                bucket_prefix(self.settings),
                self.settings.multipart_abort_after_ms,
            )
            if aborted:
                log.info("aborted %d abandoned multipart uploads", aborted)
        except ProcessorError as exc:
            log.warning("multipart upload sweep failed: %s", exc)

    def run_once(self) -> None:
        if time.monotonic() - self._last_sweep >= SWEEP_INTERVAL_S:
            self.sweep()
        led = self.led_partitions()
        try:
            result = self.lifecycle.service.run_pass(led)
        except ProcessorError as exc:
            log.warning("retention pass failed: %s", exc)
            return
        if result.fenced:
            self.on_fenced(result.fenced)
        if result.outcome.deleted or result.outcome.failed:
            log.info(
                "retention pass: %d segments deleted, %d deletions failed",
                len(result.outcome.deleted),
                len(result.outcome.failed),
            )
        if self.merges is not None and self.merges.due():
            self.merges.run_once({tp: e for tp, e in led.items() if tp not in result.fenced})

    def close(self) -> None:
        self.lifecycle.close()
