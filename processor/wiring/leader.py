"""The leader's data path: the offload engine with its source, copier and resume loader."""

from __future__ import annotations

import functools
import logging
import time

from processor import metrics
from processor.config import Settings
from processor.follower.materializer import Materializer
from processor.kafka.admin import latest_offsets
from processor.kafka.clients import new_admin
from processor.leader.batch_source import BatchSource, OnFetched, OnLost
from processor.leader.high_watermarks import HighWatermarks
from processor.leader.offload_engine import EngineOptions, OffloadEngine
from processor.leader.resume import ResumePlanner
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.topic_io import MetadataPublisher
from processor.segment.key_filter_builder import warm_up_key_filters
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.rate_limited import rate_limited
from processor.wiring.encryption import segment_encryption
from processor.wiring.erasure import key_filter_secret
from processor.wiring.fetch_sizes import fetch_options
from processor.wiring.read_your_write import confirm_by_follower
from processor.wiring.resume import remote_state_loader

log = logging.getLogger(__name__)

# Faust's broker_rebalance_timeout; a revocation waits at most 80 % of it for running copies.
REBALANCE_TIMEOUT_S = 5.0
# How often the source partitions' high watermarks are asked of the brokers for the copy lag.
HIGH_WATERMARK_INTERVAL_S = 5.0


def _warm_up_key_filters() -> None:
    """Load numba and compile the key filter's kernels before the worker takes a record (~1.5 s
    of CPU, once a process): compiled on the copy path instead, the first copies would wait for
    it and the compiler would compete with the data path for the cores (measured: a 256 MiB
    offload of 100-byte values 2 s longer). A failure raises: a worker told to build filters that
    cannot is misconfigured."""
    started = time.monotonic()
    warm_up_key_filters()
    log.info("key filter kernels compiled in %.1f s", time.monotonic() - started)


def build_engine(
    settings: Settings,
    storage: ChunkStorage,
    metadata_partitions: int,
    planner: ResumePlanner | None = None,
    materializer: Materializer | None = None,
) -> OffloadEngine:
    publisher = MetadataPublisher(settings.kafka, settings.metadata_topic, metadata_partitions)
    filter_secret = key_filter_secret(settings)
    if filter_secret is not None:
        _warm_up_key_filters()
    uploads = rate_limited(storage, settings.upload_bytes_per_second)  # PROCESSOR_UPLOAD_BYTES_PER_SECOND
    copier = SegmentCopier(
        uploads,
        publisher,
        ObjectKeyFactory(settings.s3_prefix),
        settings.worker_id,
        topic_ids=planner.topic_ids if planner is not None else None,
        current_claim=materializer.current_epoch if materializer is not None else None,
        confirm=confirm_by_follower(materializer, metadata_partitions) if materializer else None,
        claim_id=materializer.claim_id if materializer is not None else None,
        encryption=segment_encryption(settings),
        key_filter_secret=filter_secret,
    )
    fetch = fetch_options(settings)

    def source_factory(on_fetched: OnFetched, on_lost: OnLost) -> BatchSource:
        return BatchSource(
            settings.kafka, f"{settings.app_id}-{settings.worker_id}-source", on_fetched, on_lost, fetch
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
        high_watermarks=HighWatermarks(
            functools.partial(
                latest_offsets,
                new_admin(settings.kafka, f"{settings.app_id}-{settings.worker_id}-watermarks"),
            ),
            HIGH_WATERMARK_INTERVAL_S,
        ),
    )
