"""The metadata follower (cache, materializer, RLMM API) and the remote reader over it."""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass
from pathlib import Path

from processor.config import Settings
from processor.errors import ConfigError, ProcessorError
from processor.follower.materializer import ConsumerPeek, Materializer
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.follower.snapshot_writer import (
    SnapshotSchedule,
    WrittenSnapshot,
    due_partitions,
    write_snapshots,
)
from processor.follower.snapshots import SnapshotStore, load_snapshots
from processor.kafka.admin import partition_counts, topic_ids
from processor.kafka.clients import new_admin, new_consumer
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for
from processor.metadata.topic_io import MIN_COMPACTION_LAG_MS
from processor.reader.block_cache import BlockCache
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.data_dir import DataDirLock
from processor.wiring.encryption import segment_decryption


def followed_partitions(settings: Settings, metadata_partitions: int, own_topics: bool = False) -> list[int]:
    """Metadata partitions this process follows: the configured ones, those holding the configured
    source topics, or (by default) all of them; with ``own_topics`` (a worker) also those holding
    its source topics, whose claims and records it must read back."""
    if own_topics and (settings.follow_metadata_partitions or settings.follow_topics):
        own = settings.model_copy(update={"follow_metadata_partitions": (), "follow_topics": settings.topics})
        extra = set(followed_partitions(own, metadata_partitions))
        return sorted(extra | set(followed_partitions(settings, metadata_partitions)))
    if settings.follow_metadata_partitions:
        bad = [p for p in settings.follow_metadata_partitions if p >= metadata_partitions]
        if bad:
            raise ConfigError(
                f"PROCESSOR_FOLLOW_METADATA_PARTITIONS: {bad} not below the topic's "
                f"{metadata_partitions} partitions"
            )
        return sorted(set(settings.follow_metadata_partitions))
    if settings.follow_topics:
        counts = partition_counts(new_admin(settings.kafka, "processor-admin"), list(settings.follow_topics))
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
    data_dir_lock: DataDirLock | None = None  # held while the cache in PROCESSOR_DATA_DIR is open
    snapshots: SnapshotStore | None = None  # the metadata snapshots in the bucket (with a storage)
    metadata_partitions: int = 0
    # it keeps every topic of the partitions it follows: its state is whole, it may write snapshots
    whole: bool = True

    def write_snapshots(self, partitions: list[int], keep: int) -> list[WrittenSnapshot]:
        """Snapshots of ``partitions`` (of those it follows) from this follower's cache."""
        if self.snapshots is None or not self.whole:
            raise ProcessorError("this follower keeps some topics only: its snapshots would be partial")
        followed = [p for p in partitions if p in self.materializer.partitions]
        return write_snapshots(
            self.cache, self.snapshots, self.materializer.peek(), followed, self.metadata_partitions, keep
        )

    def snapshot_schedule(self, interval_ms: int, keep: int) -> SnapshotSchedule | None:
        """A worker's snapshots every ``interval_ms``, once caught up (None: it may not write them)."""
        if self.snapshots is None or not self.whole or interval_ms <= 0:
            return None
        store, partitions, materializer = self.snapshots, self.materializer.partitions, self.materializer

        def due() -> list[int]:
            if not materializer.wait_caught_up(partitions, timeout_s=60):
                return []
            return due_partitions(self.cache, store, partitions, interval_ms, int(time.time() * 1000))

        return SnapshotSchedule(lambda ps: self.write_snapshots(ps, keep), due, interval_ms / 1000)

    def close(self) -> None:
        self.materializer.stop()
        self.cache.close()
        if self.data_dir_lock is not None:
            self.data_dir_lock.release()


def build_follower(
    settings: Settings,
    metadata_partitions: int,
    cache_dir: Path | None = None,
    own_topics: bool = False,
    storage: ChunkStorage | None = None,
) -> Follower:
    """The follower; ``own_topics`` (a worker): it also keeps the worker's own source topics. A cache
    on disk built from another metadata topic, or from an earlier incarnation of this one, is rebuilt
    (its records are not this topic's: acting on them could lead and delete by another view). With
    ``storage``, a metadata partition the cache never read starts from its newest valid snapshot."""
    with contextlib.ExitStack() as undo:  # what was opened is closed again if a step fails
        # The data directory's cache is this process's alone: refused with the setting to change
        # when another worker or follower holds it.
        lock = DataDirLock(settings.data_dir) if cache_dir is None else None
        if lock is not None:
            undo.callback(lock.release)
        cache = MetadataCache(cache_dir or settings.data_dir / "metadata-cache")
        undo.callback(cache.close)
        origin = metadata_origin(settings)
        cache.ensure_origin(origin)
        kept = frozenset(settings.follow_topics) or None
        if own_topics and kept is not None:
            kept |= frozenset(settings.topics)
        materializer = Materializer(
            cache,
            lambda: new_consumer(settings.kafka, f"{settings.app_id}-{settings.worker_id}-follower"),
            settings.metadata_topic,
            followed_partitions(settings, metadata_partitions, own_topics),
            kept,
        )
        store = SnapshotStore(storage, settings.s3_prefix, origin) if storage is not None else None
        if store is not None and settings.snapshot_load:

            def bootstrap(peek: ConsumerPeek, never: list[int]) -> object:
                return load_snapshots(
                    cache, store, peek, never, metadata_partitions, kept, MIN_COMPACTION_LAG_MS
                )

            materializer.bootstrap = bootstrap
        undo.pop_all()
    return Follower(
        cache, materializer, RemoteLogMetadataManager(cache), lock, store, metadata_partitions, kept is None
    )


def metadata_origin(settings: Settings) -> str:
    """``{metadata topic}/{its topic id}``: what a follower cache records it was built from."""
    topic = settings.metadata_topic
    found = topic_ids(new_admin(settings.kafka, "processor-admin"), [topic])
    return f"{topic}/{found.get(topic, '')}"


def build_reader(
    settings: Settings,
    storage: ChunkStorage,
    rlmm: RemoteLogMetadataManager,
    block_cache: BlockCache | None = None,
) -> RemoteReader:
    return RemoteReader(
        storage,
        rlmm,
        ObjectKeyFactory(settings.s3_prefix),
        decryption=segment_decryption(settings),
        block_cache=block_cache,
    )
