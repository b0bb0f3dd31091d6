"""The readiness probes of a long-running role: S3, Kafka and (when there is one) the follower."""

from __future__ import annotations

from processor.config import Settings
from processor.follower.materializer import Materializer
from processor.kafka.clients import list_topics_or_unavailable, new_admin
from processor.probes import ReadinessWatch, follower_probe, kafka_probe, storage_probe
from processor.storage.chunk_storage import ChunkStorage


def build_readiness_watch(
    settings: Settings, materializer: Materializer | None, probe_storage: ChunkStorage
) -> ReadinessWatch:
    admin = new_admin(settings.kafka, f"{settings.app_id}-{settings.worker_id}-probe")
    probes = [
        storage_probe(probe_storage.check_bucket),
        kafka_probe(lambda timeout: list_topics_or_unavailable(admin, timeout), settings.bootstrap_servers),
    ]
    if materializer is not None:
        follower = materializer
        probes.append(follower_probe(lambda: follower.state))
    return ReadinessWatch(probes, settings.storage_probe_interval_ms / 1000)
