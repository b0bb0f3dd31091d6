"""Start-up checks, with clear errors: broker reachable, bucket usable, metadata topic present."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from processor.config import Settings
from processor.errors import ConfigError
from processor.kafka_clients import check_broker, partition_counts
from processor.metadata.topic_io import ensure_metadata_topic
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.storage import build_storage

log = logging.getLogger(__name__)


@dataclass
class Started:
    """What the checks opened: the data path's storage, the metadata partition count, an admin."""

    storage: ChunkStorage
    metadata_partitions: int
    admin: Any  # confluent_kafka AdminClient


def check_shared(settings: Settings) -> Started:
    """The checks every long-running role shares (worker, read-only follower)."""
    admin = check_broker(settings.bootstrap_servers)
    storage = build_storage(settings)
    storage.check_bucket()
    metadata_partitions = ensure_metadata_topic(
        settings.bootstrap_servers,
        settings.metadata_topic,
        settings.metadata_partitions,
        settings.metadata_replication_factor,
    )
    return Started(storage, metadata_partitions, admin)


def check_worker(settings: Settings) -> Started:
    """The worker's start-up checks: the shared ones, plus source topics configured."""
    if not settings.topics:
        raise ConfigError("PROCESSOR_TOPICS: no source topics configured (comma-separated list)")
    started = check_shared(settings)
    missing = set(settings.topics) - set(partition_counts(started.admin, list(settings.topics)))
    if missing:
        log.warning(
            "source topics not found (yet): %s; they are offloaded once they exist",
            ", ".join(sorted(missing)),
        )
    return started
