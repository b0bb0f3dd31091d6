"""Composition root: builds the worker (Faust app, offload engine, storage, metadata I/O) from Settings.

Leadership is Faust's consumer-group assignment of the source partitions. Faust's own consumer
holds the group membership but never fetches source records: its consumer class keeps source
partitions paused (see :class:`_LeadershipConsumer`), and the agent on the source topics exists only
so that Faust subscribes to them. The records themselves flow through :class:`OffloadEngine`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any, cast

import faust
from faust.transport.drivers import aiokafka as faust_kafka
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from processor import metrics
from processor.config import Settings
from processor.kafka_clients import new_consumer
from processor.leader.offload_engine import EngineOptions, OffloadEngine, RemoteStateLoader
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic, load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.s3 import S3ChunkStorage, S3Options

log = logging.getLogger(__name__)

SESSION_TIMEOUT_S = 10.0
REBALANCE_TIMEOUT_S = 5.0


def build_storage(settings: Settings) -> S3ChunkStorage:
    return S3ChunkStorage(
        S3Options(
            bucket=settings.s3_bucket,
            endpoint_url=settings.s3_endpoint_url,
            region=settings.s3_region,
            part_size=settings.s3_part_bytes,
            multipart_threshold=max(settings.s3_part_bytes * 2, 8 * 1024 * 1024),
            max_concurrency=settings.s3_upload_concurrency,
        )
    )


def remote_state_loader(settings: Settings, metadata_partitions: int) -> RemoteStateLoader:
    """Reads the metadata partitions holding ``tps`` and folds them into their remote state."""

    def load(tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        partitions = sorted({metadata_partition_for(tp, metadata_partitions) for tp in tps})
        state, _skipped = load_remote_state(
            settings.bootstrap_servers, settings.metadata_topic, partitions, set(tps)
        )
        return {tp: state.partition(tp) for tp in tps}

    return load


def build_engine(settings: Settings, storage: S3ChunkStorage, metadata_partitions: int) -> OffloadEngine:
    publisher = MetadataPublisher(settings.bootstrap_servers, settings.metadata_topic, metadata_partitions)
    copier = SegmentCopier(storage, publisher, ObjectKeyFactory(settings.s3_prefix), settings.worker_id)
    # librdkafka's prefetch queue is memory outside the offload buffer: keep it to 1/8 of the bound.
    prefetch_kb = max(1024, min(64 * 1024, settings.buffer_bytes // 8 // 1024))

    def consumer_factory() -> Any:
        return new_consumer(
            settings.bootstrap_servers,
            f"{settings.app_id}-{settings.worker_id}-source",
            **{
                "queued.max.messages.kbytes": prefetch_kb,
                "fetch.max.bytes": min(52428800, prefetch_kb * 1024),
            },
        )

    metrics.BUFFER_BOUND.set(settings.buffer_bytes)
    return OffloadEngine(
        EngineOptions(
            segment_bytes=settings.segment_bytes,
            segment_ms=settings.segment_ms,
            block_bytes=settings.block_bytes,
            buffer_bytes=settings.buffer_bytes,
            copy_concurrency=settings.s3_upload_concurrency,
            retry_backoff_ms=settings.copy_retry_backoff_ms,
            retry_backoff_max_ms=settings.copy_retry_backoff_max_ms,
            revoke_wait_s=REBALANCE_TIMEOUT_S * 0.8,
        ),
        consumer_factory,
        copier,
        remote_state_loader(settings, metadata_partitions),
    )


def _leadership_transport(source_topics: frozenset[str]) -> type[faust_kafka.Transport]:
    class _LeadershipConsumer(faust_kafka.Consumer):
        """Faust's consumer, except that source partitions are never resumed, so never fetched:
        their assignment marks leadership; the offload engine reads them in batches."""

        def resume_partitions(self, tps: Iterable[Any]) -> None:
            super().resume_partitions([tp for tp in tps if tp.topic not in source_topics])

    class _LeadershipTransport(faust_kafka.Transport):
        Consumer = _LeadershipConsumer

    return _LeadershipTransport


class ProcessorApp(faust.App):
    source_topics: frozenset[str] = frozenset()
    offload_engine: OffloadEngine | None = None

    def _new_transport(self) -> Any:
        transport_cls = _leadership_transport(self.source_topics)
        return transport_cls(url=self.conf.broker_consumer, app=self, loop=self.loop)


def build_app(settings: Settings, engine: OffloadEngine) -> faust.App:
    app = ProcessorApp(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap_servers}",
        datadir=str(settings.data_dir / "faust"),
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        web_bind="0.0.0.0",
        broker_session_timeout=SESSION_TIMEOUT_S,
        broker_rebalance_timeout=REBALANCE_TIMEOUT_S,
        broker_heartbeat_interval=1.0,
        topic_partitions=1,
        producer_acks=-1,
    )
    app.source_topics = frozenset(settings.topics)
    source = app.topic(*settings.topics, key_serializer="raw", value_serializer="raw")

    @app.agent(source, name="offload-leader")
    async def offload_leader(stream: Any) -> None:
        # Never receives events: source partitions stay paused in Faust's consumer. The agent's
        # subscription is what gives this worker its share of the source partitions.
        async for _event in stream:  # pragma: no cover - defensive
            pass

    def _source(tps: Iterable[Any]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition) for tp in tps if tp.topic in app.source_topics]

    async def on_revoked(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        tps = _source(args[0] if args else kwargs.get("revoked", ()))
        if tps:
            await asyncio.get_running_loop().run_in_executor(None, engine.revoke, tps)

    async def on_assigned(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        tps = _source(args[0] if args else kwargs.get("assigned", ()))
        epoch = max(int(getattr(app, "consumer_generation_id", 0) or 0), 0)
        if tps:
            await asyncio.get_running_loop().run_in_executor(None, engine.assign, tps, epoch)

    # Faust's signal typing does not describe coroutine receivers with extra positionals.
    app.on_partitions_revoked.connect(cast(Any, on_revoked))
    app.on_partitions_assigned.connect(cast(Any, on_assigned))

    @app.timer(5.0)  # type: ignore[untyped-decorator]
    async def watch_engine() -> None:
        if engine.failure is not None:
            log.error("offload engine failed: %s; stopping the worker", engine.failure)
            await app.crash(engine.failure)

    @app.page("/metrics")
    async def metrics_view(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/healthz")
    async def health_view(web: Any, request: Any) -> Any:
        ok = engine.failure is None
        return web.json(
            {"ok": ok, "paused": engine.paused, "buffer_bytes": engine.buffer.used}, status=200 if ok else 503
        )

    app.offload_engine = engine
    return app


def prepare(settings: Settings) -> tuple[S3ChunkStorage, int]:
    """Start-up checks with clear errors: broker reachable, bucket usable, metadata topic present."""
    from processor.kafka_clients import check_broker, partition_counts

    if not settings.topics:
        from processor.errors import ConfigError

        raise ConfigError("PROCESSOR_TOPICS: no source topics configured (comma-separated list)")
    admin = check_broker(settings.bootstrap_servers)
    storage = build_storage(settings)
    storage.check_bucket()
    metadata_partitions = ensure_metadata_topic(
        settings.bootstrap_servers,
        settings.metadata_topic,
        settings.metadata_partitions,
        settings.metadata_replication_factor,
    )
    missing = set(settings.topics) - set(partition_counts(admin, list(settings.topics)))
    if missing:
        log.warning(
            "source topics not found (yet): %s; they are offloaded once they exist",
            ", ".join(sorted(missing)),
        )
    return storage, metadata_partitions
