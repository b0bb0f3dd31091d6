"""The one read-side factory of the CLI commands (``segments``, ``fetch``, ``verify``): a throwaway
follower scoped to one topic, and a remote reader over it; and the throwaway follower of some
metadata partitions (:func:`scratch_follower`) that replaces the in-memory folds of the whole topic:
a worker's remote state of partitions it starts to lead (:func:`remote_states`) and rebuild-metadata's
check. Each starts from the newest valid snapshot of its metadata partitions (when given the bucket)
and folds the topic's tail: the same fold, so it holds what a fold of the whole topic holds."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from processor.config import Settings
from processor.errors import ProcessorError
from processor.kafka.admin import check_broker, partition_counts
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.reader.remote_reader import RemoteReader
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.follower import Follower, build_follower, build_reader
from processor.wiring.storage import build_storage


@dataclass
class ReadSide:
    """A throwaway follower for one-off CLI reads, and what must be released after."""

    follower: Follower
    reader: RemoteReader
    cache_dir: tempfile.TemporaryDirectory[str]

    def close(self) -> None:
        self.follower.close()
        self.reader.storage.close()
        self.cache_dir.cleanup()


def open_read_side(settings: Settings, topic: str, partition: int | None) -> ReadSide:
    """Materialize only the metadata partitions that hold the topic's partitions into a temporary
    cache, then read through it. Works whether or not a worker runs."""
    admin = check_broker(settings.kafka)
    with contextlib.ExitStack() as undo:  # what was opened is closed again if a step fails
        storage = build_storage(settings)
        undo.callback(storage.close)
        # The bucket too, before anything is read: a misspelt bucket or missing credentials fail
        # every command that reads, not only those that reach an object.
        storage.check_bucket()
        counts = partition_counts(admin, [settings.metadata_topic, topic])
        if settings.metadata_topic not in counts:
            raise ProcessorError(
                f"metadata topic {settings.metadata_topic} does not exist: nothing was offloaded yet"
            )
        meta_parts = counts[settings.metadata_topic]
        if partition is None and topic not in counts:
            # the topic is gone from the cluster (deleted, or a restore after a disaster): its
            # partitions are wherever the metadata says, so every metadata partition is read
            wanted = list(range(meta_parts))
        else:
            partitions = [partition] if partition is not None else list(range(counts[topic]))
            tps = [TopicPartition(topic, p) for p in partitions]
            wanted = sorted({metadata_partition_for(tp, meta_parts) for tp in tps})
        cache_dir = tempfile.TemporaryDirectory(prefix="processor-cli-cache-")
        undo.callback(cache_dir.cleanup)
        scoped = settings.model_copy(
            update={"follow_metadata_partitions": tuple(wanted) or (0,), "follow_topics": (topic,)}
        )
        follower = build_follower(scoped, meta_parts, cache_dir=Path(cache_dir.name), storage=storage)
        undo.callback(follower.close)
        follower.materializer.catch_up()
        side = ReadSide(follower, build_reader(settings, storage, follower.rlmm), cache_dir)
        undo.pop_all()
    return side


@contextlib.contextmanager
def scratch_follower(
    settings: Settings,
    metadata_partitions: int,
    partitions: Iterable[int],
    topics: Iterable[str] | None,
    storage: ChunkStorage | None,
    timeout_s: float = 60.0,
) -> Iterator[Follower]:
    """A follower of ``partitions`` of ``settings.metadata_topic`` in a temporary cache, keeping
    ``topics`` (None: all), caught up to the ends they had when it started: from their newest valid
    snapshots when ``storage`` is given, then the topic's tail. Its cache is on disk (memory does
    not grow with the partitions' history) and removed after."""
    wanted = sorted(set(partitions))
    scoped = settings.model_copy(
        update={
            "follow_metadata_partitions": tuple(wanted) or (0,),
            "follow_topics": tuple(sorted(set(topics))) if topics is not None else (),
        }
    )
    with tempfile.TemporaryDirectory(prefix="processor-scratch-cache-") as cache_dir:
        follower = build_follower(scoped, metadata_partitions, cache_dir=Path(cache_dir), storage=storage)
        try:
            follower.materializer.catch_up(timeout_s=timeout_s)
            yield follower
        finally:
            follower.close()


def remote_states(
    settings: Settings,
    metadata_partitions: int,
    tps: list[TopicPartition],
    storage: ChunkStorage | None,
) -> dict[TopicPartition, PartitionRemoteState]:
    """The remote state of ``tps`` as the fold of their metadata partitions holds it (what
    :func:`processor.metadata.topic_io.load_remote_state` folds in memory from the whole topic),
    from those partitions' snapshots and the topic's tail."""
    parts = {metadata_partition_for(tp, metadata_partitions) for tp in tps}
    with scratch_follower(
        settings, metadata_partitions, parts, {tp.topic for tp in tps}, storage
    ) as follower:
        return {tp: follower.cache.remote_state(tp) for tp in tps}
