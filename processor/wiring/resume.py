"""Where newly led partitions resume: the metadata-topic loader and the resume planner."""

from __future__ import annotations

from processor.config import Settings
from processor.kafka.admin import topic_ids
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.leader.offload_engine import RemoteStateLoader
from processor.leader.ports import CachedRemoteState
from processor.leader.resume import ArchivedManifests, ResumePlanner
from processor.metadata.codec import metadata_partition_for
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import MetadataPublisher, load_remote_state
from processor.segment.object_keys import MANIFEST_SUFFIX, ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.read_side import remote_states


def remote_state_loader(
    settings: Settings, metadata_partitions: int, storage: ChunkStorage | None = None
) -> RemoteStateLoader:
    """Reads the metadata partitions holding ``tps`` and folds them into their remote state; with
    ``storage``, from their snapshots and the topic's tail (processor/wiring/read_side.py)."""

    def load(tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        if storage is not None:
            return remote_states(settings, metadata_partitions, tps, storage)
        partitions = sorted({metadata_partition_for(tp, metadata_partitions) for tp in tps})
        state, _skipped = load_remote_state(settings.kafka, settings.metadata_topic, partitions, set(tps))
        return {tp: state.partition(tp) for tp in tps}

    return load


def archived_manifests(storage: ChunkStorage, keys: ObjectKeyFactory) -> ArchivedManifests:
    """Whether a partition's folder (of a topic id) holds a segment manifest: one LIST that stops at
    the first one (asked only for partitions whose metadata knows nothing)."""

    def ask(tp: TopicPartition, topic_id: str | None) -> bool:
        prefix = keys.partition_prefix(tp.topic, tp.partition, topic_id)
        return any(info.key.endswith(MANIFEST_SUFFIX) for info in storage.list(prefix))

    return ask


def build_planner(
    settings: Settings,
    metadata_partitions: int,
    follower: CachedRemoteState | None = None,
    storage: ChunkStorage | None = None,
) -> ResumePlanner:
    """Claims, topic ids and resume points of newly assigned partitions (see
    processor/leader/resume.py); reads back through the follower's cache when it is caught up.
    With ``storage``: refuses partitions whose archive the metadata does not know."""
    admin = new_admin(settings.kafka, "processor-admin")
    claims = MetadataPublisher(
        settings.kafka, settings.metadata_topic, metadata_partitions, "processor-claims"
    )
    return ResumePlanner(
        settings.worker_id,
        metadata_partitions,
        remote_state_loader(settings, metadata_partitions, storage),
        lambda topics: topic_ids(admin, topics),
        claims,
        follower,
        archived_manifests=None
        if storage is None
        else archived_manifests(storage, ObjectKeyFactory(settings.s3_prefix)),
    )
