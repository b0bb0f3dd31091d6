"""Composition root: builds the worker (Faust app, offload engine, storage, metadata I/O) from Settings.

Leadership is Faust's consumer-group assignment of the source partitions. Faust's own consumer
holds the group membership but never fetches source records: its consumer class keeps source
partitions paused (see :class:`_LeadershipConsumer`), and the agent on the source topics exists only
so that Faust subscribes to them. The records themselves flow through :class:`OffloadEngine`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

import faust
from faust.transport.drivers import aiokafka as faust_kafka

from processor import metrics
from processor.config import Settings
from processor.errors import ConfigError
from processor.follower.materializer import Materializer
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.kafka_clients import new_admin, new_consumer, partition_counts, topic_ids
from processor.leader.batch_source import BatchSource, FetchOptions, OnFetched, OnLost, SourceSecurity
from processor.leader.leadership import Leadership
from processor.leader.offload_engine import EngineOptions, OffloadEngine, RemoteStateLoader
from processor.leader.resume import ResumePlanner
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import RemoteLogSegmentMetadata, TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic, load_remote_state
from processor.probes import (
    PROBE_CONNECT_TIMEOUT_S,
    PROBE_READ_TIMEOUT_S,
    ReadinessWatch,
    follower_probe,
    kafka_probe,
    storage_probe,
)
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.rate_limited import rate_limited
from processor.storage.s3 import S3ChunkStorage, S3Options
from processor.web.servers import register_faust_views

log = logging.getLogger(__name__)

REBALANCE_TIMEOUT_S = 5.0


def build_storage(settings: Settings, *, probe: bool = False) -> S3ChunkStorage:
    """The data path's S3 client, or (``probe``) a small one with short timeouts and no SDK retries
    for the readiness probe (see processor/probes.py)."""
    options = S3Options(
        bucket=settings.s3_bucket,
        endpoint_url=settings.s3_endpoint_url,
        region=settings.s3_region,
        part_size=settings.s3_part_bytes,
        multipart_threshold=settings.s3_part_bytes,
        max_concurrency=settings.s3_upload_concurrency,
    )
    if probe:
        options = replace(
            options,
            max_concurrency=1,
            connect_timeout_s=PROBE_CONNECT_TIMEOUT_S,
            read_timeout_s=PROBE_READ_TIMEOUT_S,
            max_attempts=1,
        )
    return S3ChunkStorage(options)


def build_readiness_watch(
    settings: Settings, follower: Follower | None, probe_storage: S3ChunkStorage
) -> ReadinessWatch:
    admin = new_admin(settings.bootstrap_servers, f"{settings.app_id}-{settings.worker_id}-probe")
    probes = [
        storage_probe(probe_storage.check_bucket),
        kafka_probe(lambda timeout: admin.list_topics(timeout=timeout), settings.bootstrap_servers),
    ]
    if follower is not None:
        materializer = follower.materializer
        probes.append(follower_probe(lambda: materializer.state))
    return ReadinessWatch(probes, settings.storage_probe_interval_ms / 1000)


def remote_state_loader(settings: Settings, metadata_partitions: int) -> RemoteStateLoader:
    """Reads the metadata partitions holding ``tps`` and folds them into their remote state."""

    def load(tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        partitions = sorted({metadata_partition_for(tp, metadata_partitions) for tp in tps})
        state, _skipped = load_remote_state(
            settings.bootstrap_servers, settings.metadata_topic, partitions, set(tps)
        )
        return {tp: state.partition(tp) for tp in tps}

    return load


def build_planner(
    settings: Settings, metadata_partitions: int, follower: Follower | None = None
) -> ResumePlanner:
    """Resume points, topic ids and writer epochs of newly assigned partitions (see
    processor/leader/resume.py); resumes from the follower's cache when it is caught up."""
    admin = new_admin(settings.bootstrap_servers, "processor-admin")
    return ResumePlanner(
        settings.worker_id,
        metadata_partitions,
        remote_state_loader(settings, metadata_partitions),
        lambda topics: topic_ids(admin, topics),
        follower.materializer if follower is not None else None,
    )


def _accepted_by_follower(
    materializer: Materializer, metadata_partitions: int
) -> Callable[[RemoteLogSegmentMetadata, int], bool]:
    """Read-your-write on the metadata topic: wait (briefly) for the worker's follower to apply the
    record published at ``offset`` and tell whether it was accepted. Records the follower does not
    follow, or a follower that lags past the wait, count as accepted (the old behaviour)."""

    def accepted(record: RemoteLogSegmentMetadata, offset: int) -> bool:
        tp = record.topic_partition
        if materializer.source_topics is not None and tp.topic not in materializer.source_topics:
            return True
        if not materializer.wait_applied(metadata_partition_for(tp, metadata_partitions), offset):
            log.info("%s: follower did not confirm %s in time; going on", tp, record.segment_id)
            return True
        stored = materializer.cache.segment(record.segment_id.id)
        return stored is not None and (stored.state, stored.writer_epoch) == (
            record.state,
            record.writer_epoch,
        )

    return accepted


def build_engine(
    settings: Settings,
    storage: S3ChunkStorage,
    metadata_partitions: int,
    planner: ResumePlanner | None = None,
    follower: Follower | None = None,
) -> OffloadEngine:
    publisher = MetadataPublisher(settings.bootstrap_servers, settings.metadata_topic, metadata_partitions)
    materializer = follower.materializer if follower is not None else None
    uploads = rate_limited(storage, settings.upload_bytes_per_second)  # PROCESSOR_UPLOAD_BYTES_PER_SECOND
    copier = SegmentCopier(
        uploads,
        publisher,
        ObjectKeyFactory(settings.s3_prefix),
        settings.worker_id,
        topic_ids=planner.topic_ids if planner is not None else None,
        newest_epoch=materializer.cache.max_epoch if materializer is not None else None,
        accepted=_accepted_by_follower(materializer, metadata_partitions) if materializer else None,
    )
    security = SourceSecurity(
        settings.security_protocol,
        settings.sasl_mechanism,
        settings.sasl_username,
        settings.sasl_password,
        settings.ssl_cafile,
    )
    # Fetched bytes outside the offload buffer: at most fetch_concurrency responses, each bounded.
    request_max = max(
        1024 * 1024, min(32 * 1024 * 1024, settings.buffer_bytes // 4 // settings.fetch_concurrency)
    )
    fetch = FetchOptions(
        partition_max_bytes=min(4 * 1024 * 1024, request_max),
        request_max_bytes=request_max,
        concurrency=settings.fetch_concurrency,
    )

    def source_factory(on_fetched: OnFetched, on_lost: OnLost) -> BatchSource:
        return BatchSource(
            settings.bootstrap_servers,
            f"{settings.app_id}-{settings.worker_id}-source",
            on_fetched,
            on_lost,
            fetch,
            security,
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
            archive_compression=settings.archive_compression,
        ),
        source_factory,
        copier,
        planner if planner is not None else remote_state_loader(settings, metadata_partitions),
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
) -> Follower:
    cache = MetadataCache(cache_dir or settings.data_dir / "metadata-cache")
    materializer = Materializer(
        cache,
        lambda: new_consumer(settings.bootstrap_servers, f"{settings.app_id}-{settings.worker_id}-follower"),
        settings.metadata_topic,
        followed_partitions(settings, metadata_partitions),
        frozenset(settings.follow_topics) or None,
    )
    return Follower(cache, materializer, RemoteLogMetadataManager(cache))


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
    planner: ResumePlanner | None = None,
) -> faust.App:
    app = ProcessorApp(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap_servers}",
        datadir=str(settings.data_dir / "faust"),
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        broker_session_timeout=settings.session_timeout_ms / 1000,
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

    leadership = Leadership(engine, planner)

    async def on_revoked(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        # The eager protocol revokes everything before every rebalance: what actually leaves is
        # known only with the new assignment (on_assigned). Copies go on meanwhile; a partition
        # that moved is fenced by epoch at its new leader.
        leadership.revoked(_source(args[0] if args else kwargs.get("revoked", ())))

    async def on_assigned(sender: Any, *args: Any, signal: Any = None, **kwargs: Any) -> None:
        tps = _source(args[0] if args else kwargs.get("assigned", ()))
        generation = max(int(getattr(app, "consumer_generation_id", 0) or 0), 0)
        await asyncio.get_running_loop().run_in_executor(None, leadership.assigned, tps, generation)

    if follower is not None:
        follower.materializer.listeners.append(leadership.on_metadata)

    # Faust's signal typing does not describe coroutine receivers with extra positionals.
    app.on_partitions_revoked.connect(cast(Any, on_revoked))
    app.on_partitions_assigned.connect(cast(Any, on_assigned))

    @app.timer(5.0)  # type: ignore[untyped-decorator]
    async def watch_engine() -> None:
        failure = engine.failure or (follower.materializer.failure if follower else None)
        if failure is not None:
            log.error("the worker's data path failed: %s; stopping the worker", failure)
            await app.crash(failure)

    @app.timer(2.0)  # type: ignore[untyped-decorator]
    async def publish_segment_states() -> None:
        publish_engine_gauges(engine)

    def data_path() -> str | None:
        return None if engine.failure is None else f"data path failed: {engine.failure}"

    checks = {"data_path": data_path}
    if follower is not None:
        materializer = follower.materializer
        checks["follower"] = lambda: (
            None if materializer.failure is None else f"metadata follower failed: {materializer.failure}"
        )
    token = settings.web_token.get_secret_value() if settings.web_token else None
    register_faust_views(
        app,
        checks,
        extra=lambda: {"paused": engine.paused, "buffer_bytes": engine.buffer.used},
        reader=reader,
        token=token,
    )
    app.offload_engine = engine
    return app


def publish_engine_gauges(engine: OffloadEngine) -> None:
    """Segments by state, from the engine's status (no engine internals needed)."""
    status = engine.status()
    metrics.SEGMENTS_BY_STATE.labels("open").set(sum(1 for st in status.values() if st.open_bytes > 0))
    metrics.SEGMENTS_BY_STATE.labels("pending").set(sum(st.pending_segments for st in status.values()))
    metrics.SEGMENTS_BY_STATE.labels("copying").set(sum(1 for st in status.values() if st.copying))


def prepare_read_side(settings: Settings) -> tuple[S3ChunkStorage, int, Any]:
    """Start-up checks every role shares, with clear errors: broker reachable, bucket usable,
    metadata topic present. Returns the storage, the metadata partition count and the admin client."""
    from processor.kafka_clients import check_broker

    admin = check_broker(settings.bootstrap_servers)
    storage = build_storage(settings)
    storage.check_bucket()
    metadata_partitions = ensure_metadata_topic(
        settings.bootstrap_servers,
        settings.metadata_topic,
        settings.metadata_partitions,
        settings.metadata_replication_factor,
    )
    return storage, metadata_partitions, admin


def prepare(settings: Settings) -> tuple[S3ChunkStorage, int]:
    """The worker's start-up checks: the shared ones, plus source topics configured."""
    if not settings.topics:
        raise ConfigError("PROCESSOR_TOPICS: no source topics configured (comma-separated list)")
    storage, metadata_partitions, admin = prepare_read_side(settings)
    missing = set(settings.topics) - set(partition_counts(admin, list(settings.topics)))
    if missing:
        log.warning(
            "source topics not found (yet): %s; they are offloaded once they exist",
            ", ".join(sorted(missing)),
        )
    return storage, metadata_partitions
