"""Start-up checks, with clear errors: broker reachable, bucket usable, metadata topic present."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from processor.config import Settings
from processor.errors import ConfigError
from processor.kafka.admin import broker_group_session_bounds, check_broker, partition_counts
from processor.metadata.topic_io import ensure_metadata_topic
from processor.storage.chunk_storage import ChunkStorage
from processor.web.handlers import read_api_token as web_access_token
from processor.wiring.storage import build_storage

log = logging.getLogger(__name__)


@dataclass
class Started:
    """What the checks opened: the data path's storage, the metadata partition count, an admin."""

    storage: ChunkStorage
    metadata_partitions: int
    admin: Any  # confluent_kafka AdminClient


def check_shared(settings: Settings, read_threads: int = 0) -> Started:
    """The checks every long-running role shares (worker, read-only follower). ``read_threads``:
    threads that read the archive at once (the storage keeps a connection for each)."""
    admin = check_broker(settings.kafka)
    storage = build_storage(settings, read_threads=read_threads)
    storage.check_bucket()
    metadata_partitions = ensure_metadata_topic(
        settings.kafka,
        settings.metadata_topic,
        settings.metadata_partitions,
        settings.metadata_replication_factor,
    )
    return Started(storage, metadata_partitions, admin)


def require_topics(settings: Settings) -> None:
    if not settings.topics:
        raise ConfigError("PROCESSOR_TOPICS: no source topics configured (comma-separated list)")


def check_worker(settings: Settings) -> Started:
    """The worker's start-up checks: the shared ones, plus source topics configured."""
    require_topics(settings)
    started = check_shared(settings)
    check_session_timeout(settings, started.admin)
    missing = set(settings.topics) - set(partition_counts(started.admin, list(settings.topics)))
    if missing:
        log.warning(
            "source topics not found (yet): %s; they are offloaded once they exist",
            ", ".join(sorted(missing)),
        )
    return started


def check_session_timeout(settings: Settings, admin: Any) -> None:
    """The group coordinator refuses a member whose session timeout lies outside its
    ``group.min.session.timeout.ms`` .. ``group.max.session.timeout.ms`` (6 s .. 30 min by default)
    with a fatal JoinGroup error that the group client only logs: the worker would run on without
    ever leading a partition. Checked at start against the broker's own settings."""
    bounds = broker_group_session_bounds(admin)
    if bounds is None:
        return
    low, high = bounds
    if not low <= settings.session_timeout_ms <= high:
        raise ConfigError(
            f"PROCESSOR_SESSION_TIMEOUT_MS={settings.session_timeout_ms}: the broker accepts a group "
            f"member's session timeout from {low} to {high} ms (group.min.session.timeout.ms, "
            "group.max.session.timeout.ms); it would refuse the worker's every join"
        )


def read_api_token(settings: Settings) -> str | None:
    """The bearer token /fetch, /segments and POST /offload require (None: open), decided before
    anything connects: a worker or follower that would serve them open off loopback without
    PROCESSOR_WEB_AUTH=none refuses to start (ConfigError naming the settings to choose from)."""
    if not settings.web_enabled:
        return None
    token = settings.web_token.get_secret_value() if settings.web_token else None
    return web_access_token(settings.web_host, token, settings.web_auth)
