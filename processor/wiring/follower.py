"""The metadata follower (cache, materializer, RLMM API) and the remote reader over it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from processor.config import Settings
from processor.errors import ConfigError
from processor.follower.materializer import Materializer
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.kafka_clients import new_admin, new_consumer, partition_counts
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import TopicPartition
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage


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


def build_follower(settings: Settings, metadata_partitions: int, cache_dir: Path | None = None) -> Follower:
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
