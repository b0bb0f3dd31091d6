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
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import faust
from faust.transport.drivers import aiokafka as faust_kafka
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from processor import metrics
from processor.config import Settings
from processor.errors import (
    ConfigError,
    CorruptObjectError,
    InvalidNameError,
    OffsetNotInRemoteError,
    StorageError,
)
from processor.follower.materializer import Materializer
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.kafka_clients import new_admin, new_consumer, partition_counts
from processor.leader.offload_engine import EngineOptions, OffloadEngine, RemoteStateLoader
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic, load_remote_state
from processor.reader.record_json import record_to_json, segment_to_json
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import ObjectKeyFactory, validate_topic
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.rate_limited import rate_limited
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
            multipart_threshold=settings.s3_part_bytes,
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
    uploads = rate_limited(storage, settings.upload_bytes_per_second)  # PROCESSOR_UPLOAD_BYTES_PER_SECOND
    copier = SegmentCopier(uploads, publisher, ObjectKeyFactory(settings.s3_prefix), settings.worker_id)
    # librdkafka's prefetch queue is memory outside the offload buffer: a quarter of the bound, within
    # 16..64 MiB (64 MiB is librdkafka's default). Smaller queues starve the consumer: measured here,
    # 8 MiB read 34 MB/s where 64 MiB read 142 MB/s.
    prefetch_kb = max(16 * 1024, min(64 * 1024, settings.buffer_bytes // 4 // 1024))

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


def followed_partitions(settings: Settings, metadata_partitions: int) -> list[int]:
    """Metadata partitions this worker follows: the configured ones, those holding the configured
    source topics, or (by default) all of them."""
    if settings.follow_metadata_partitions:
        bad = [p for p in settings.follow_metadata_partitions if p >= metadata_partitions]
        if bad:
            raise ConfigError(
                f"PROCESSOR_FOLLOW_METADATA_PARTITIONS: {bad} not below the topic's "
                f"{metadata_partitions} partitions"
            )
        return sorted(set(settings.follow_metadata_partitions))
    if settings.follow_topics:
        counts = partition_counts(
            new_admin(settings.bootstrap_servers, "processor-admin"), list(settings.follow_topics)
        )
        return sorted(
            {
                metadata_partition_for(TopicPartition(topic, p), metadata_partitions)
                for topic, n in counts.items()
                for p in range(n)
            }
        )
    return list(range(metadata_partitions))


@dataclass
class Follower:
    cache: MetadataCache
    materializer: Materializer
    rlmm: RemoteLogMetadataManager

    def close(self) -> None:
        self.materializer.stop()
        self.cache.close()


def build_follower(
    settings: Settings,
    metadata_partitions: int,
    cache_dir: Path | None = None,
    publisher: MetadataPublisher | None = None,
) -> Follower:
    cache = MetadataCache(cache_dir or settings.data_dir / "metadata-cache")
    materializer = Materializer(
        cache,
        lambda: new_consumer(settings.bootstrap_servers, f"{settings.app_id}-{settings.worker_id}-follower"),
        settings.metadata_topic,
        followed_partitions(settings, metadata_partitions),
        frozenset(settings.follow_topics) or None,
    )
    return Follower(cache, materializer, RemoteLogMetadataManager(cache, publisher))


def build_reader(settings: Settings, storage: ChunkStorage, rlmm: RemoteLogMetadataManager) -> RemoteReader:
    return RemoteReader(storage, rlmm, ObjectKeyFactory(settings.s3_prefix))


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


def build_app(
    settings: Settings,
    engine: OffloadEngine,
    reader: RemoteReader | None = None,
    follower: Follower | None = None,
) -> faust.App:
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
        failure = engine.failure or (follower.materializer.failure if follower else None)
        if failure is not None:
            log.error("the worker's data path failed: %s; stopping the worker", failure)
            await app.crash(failure)

    @app.page("/metrics")
    async def metrics_view(web: Any, request: Any) -> Any:
        return web.bytes(generate_latest(), content_type=CONTENT_TYPE_LATEST.split(";")[0])

    @app.page("/healthz")
    async def health_view(web: Any, request: Any) -> Any:
        ok = engine.failure is None
        return web.json(
            {"ok": ok, "paused": engine.paused, "buffer_bytes": engine.buffer.used}, status=200 if ok else 503
        )

    if reader is not None:
        add_read_views(app, reader)
    app.offload_engine = engine
    return app


def _int_param(request: Any, name: str, required: bool = True, default: int | None = None) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        if required:
            raise ValueError(f"missing parameter {name!r}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"parameter {name!r} must be an integer, got {raw!r}") from None


def add_read_views(app: faust.App, reader: RemoteReader) -> None:
    """The read API: ``GET /segments?topic=T[&partition=P]`` and
    ``GET /fetch?topic=T&partition=P&(offset=O|timestamp=MS)[&max_records=N]``."""

    def _topic(request: Any) -> str:
        return validate_topic(request.query.get("topic", ""))

    @app.page("/segments")
    async def segments_view(web: Any, request: Any) -> Any:
        try:
            topic = _topic(request)
            partition = _int_param(request, "partition", required=False)
        except (ValueError, InvalidNameError) as exc:
            return web.json({"error": str(exc)}, status=400)
        cache = cast(RemoteLogMetadataManager, reader.lookup).cache

        def collect() -> list[dict[str, Any]]:
            tps = [
                tp
                for tp in cache.topic_partitions()
                if tp.topic == topic and partition in (None, tp.partition)
            ]
            return [segment_to_json(s) for tp in tps for s in cache.listed_segments(tp)]

        found = await asyncio.get_running_loop().run_in_executor(None, collect)
        return web.json({"segments": found})

    @app.page("/fetch")
    async def fetch_view(web: Any, request: Any) -> Any:
        try:
            tp = TopicPartition(_topic(request), cast(int, _int_param(request, "partition")))
            offset = _int_param(request, "offset", required=False)
            timestamp = _int_param(request, "timestamp", required=False)
            max_records = cast(int, _int_param(request, "max_records", required=False, default=100))
            if (offset is None) == (timestamp is None):
                raise ValueError("give exactly one of 'offset' and 'timestamp'")
            if tp.partition < 0 or max_records < 1 or max_records > 10_000:
                raise ValueError("partition must be >= 0 and max_records between 1 and 10000")
        except (ValueError, InvalidNameError) as exc:
            return web.json({"error": str(exc)}, status=400)

        def read() -> list[dict[str, Any]]:
            if offset is not None:
                records = reader.read_from_offset(tp, offset, max_records)
            else:
                records = reader.read_from_timestamp(tp, cast(int, timestamp), max_records)
            return [record_to_json(r) for r in records]

        try:
            records = await asyncio.get_running_loop().run_in_executor(None, read)
        except OffsetNotInRemoteError as exc:
            return web.json({"error": str(exc)}, status=404)
        except CorruptObjectError as exc:
            return web.json({"error": str(exc)}, status=502)
        except StorageError as exc:
            return web.json({"error": str(exc)}, status=503)
        return web.json({"records": records})


def prepare(settings: Settings) -> tuple[S3ChunkStorage, int]:
    """Start-up checks with clear errors: broker reachable, bucket usable, metadata topic present."""
    from processor.kafka_clients import check_broker

    if not settings.topics:
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
