"""The worker's lifecycle tasks, registered on the Faust app: the retention pass and the sweep of
abandoned multipart uploads. Only partitions this worker leads (the engine's assignment) are
touched, so only a partition's leader deletes.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import faust

from processor.config import Settings
from processor.errors import ProcessorError
from processor.health import HEALTH
from processor.lifecycle.deletion_topic import DeletionTopic, MetadataTombstones
from processor.lifecycle.multipart_sweep import SWEEP_INTERVAL_S, sweep_multipart_uploads
from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import RetentionLimits
from processor.lifecycle.retention_service import HEALTH_COMPONENT, CacheView, RetentionService, StateView
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.model import TopicPartition
from processor.metadata.topic_io import DurableProducer, MetadataPublisher
from processor.storage.s3 import S3ChunkStorage

log = logging.getLogger(__name__)


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
    settings: Settings, storage: S3ChunkStorage, metadata_partitions: int, cache: Any | None
) -> Lifecycle:
    producer = DurableProducer(settings.bootstrap_servers, f"{settings.worker_id}-lifecycle")
    publisher = MetadataPublisher(
        settings.bootstrap_servers, settings.metadata_topic, metadata_partitions, "processor-lifecycle"
    )
    deletion_topic = DeletionTopic.ensure(
        settings.bootstrap_servers,
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
        settings.worker_id,
    )
    view = CacheView(cache) if cache is not None else StateView({})
    service = RetentionService(retention_config(settings), view, deleter, deletion_topic)
    return Lifecycle(service, producer, publisher)


def attach_lifecycle(
    app: faust.App,
    settings: Settings,
    engine: Any,
    storage: S3ChunkStorage,
    metadata_partitions: int,
    follower: Any | None,
) -> Lifecycle:
    """Register the retention pass (every PROCESSOR_RETENTION_CHECK_MS), the multipart sweep (at
    start, then every SWEEP_INTERVAL_S) and the ``POST /offload`` view on ``app``."""
    from processor.lifecycle.offload_view import add_offload_view

    add_offload_view(app, engine, settings)  # POST /offload (processor offload)
    # the follower's cache holds every led partition only when it follows everything
    use_cache = (
        follower is not None and not settings.follow_topics and not settings.follow_metadata_partitions
    )
    lifecycle = build_retention(
        settings, storage, metadata_partitions, follower.cache if use_cache and follower else None
    )
    loader = None
    if not use_cache:
        from processor.app import remote_state_loader

        loader = remote_state_loader(settings, metadata_partitions)
    last_sweep = [-SWEEP_INTERVAL_S]

    def sweep() -> None:
        last_sweep[0] = time.monotonic()
        try:
            aborted = sweep_multipart_uploads(
                storage, bucket_prefix(settings), settings.multipart_abort_after_ms
            )
            if aborted:
                log.info("aborted %d abandoned multipart uploads", aborted)
        except ProcessorError as exc:
            log.warning("multipart upload sweep failed: %s", exc)

    def run_once() -> None:
        if time.monotonic() - last_sweep[0] >= SWEEP_INTERVAL_S:
            sweep()
        epoch = max(int(getattr(app, "consumer_generation_id", 0) or 0), 0)
        led = {tp: epoch for tp in engine.status() if isinstance(tp, TopicPartition)}
        if loader is not None:
            lifecycle.service.view = StateView(loader(list(led)) if led else {})
        try:
            result = lifecycle.service.run_pass(led)
        except ProcessorError as exc:
            log.warning("retention pass failed: %s", exc)
            return
        if result.outcome.deleted or result.outcome.failed:
            log.info(
                "retention pass: %d segments deleted, %d deletions failed",
                len(result.outcome.deleted),
                len(result.outcome.failed),
            )

    @app.task  # type: ignore[untyped-decorator]
    async def sweep_on_start() -> None:
        await asyncio.get_running_loop().run_in_executor(None, sweep)

    @app.timer(settings.retention_check_ms / 1000.0)  # type: ignore[untyped-decorator]
    async def retention_pass() -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(None, run_once)
        except Exception as exc:  # not a ProcessorError: a bug, never a silent loop; stop the worker
            log.exception("the retention pass failed unexpectedly; stopping the worker")
            HEALTH.report(HEALTH_COMPONENT, f"unexpected error: {exc!r}", fatal=True)
            await app.crash(exc)

    return lifecycle
