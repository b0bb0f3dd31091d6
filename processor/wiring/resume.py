"""Where newly led partitions resume: the metadata-topic loader and the resume planner."""

from __future__ import annotations

from processor.config import Settings
from processor.kafka_clients import new_admin, topic_ids
from processor.leader.offload_engine import RemoteStateLoader
from processor.leader.ports import CachedRemoteState
from processor.leader.resume import ResumePlanner
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import MetadataPublisher, load_remote_state


def remote_state_loader(settings: Settings, metadata_partitions: int) -> RemoteStateLoader:
    """Reads the metadata partitions holding ``tps`` and folds them into their remote state."""

    def load(tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        partitions = sorted({metadata_partition_for(tp, metadata_partitions) for tp in tps})
        state, _skipped = load_remote_state(settings.kafka, settings.metadata_topic, partitions, set(tps))
        return {tp: state.partition(tp) for tp in tps}

    return load


def build_planner(
    settings: Settings, metadata_partitions: int, follower: CachedRemoteState | None = None
) -> ResumePlanner:
    """Claims, topic ids and resume points of newly assigned partitions (see
    processor/leader/resume.py); reads back through the follower's cache when it is caught up."""
    admin = new_admin(settings.kafka, "processor-admin")
    claims = MetadataPublisher(
        settings.kafka, settings.metadata_topic, metadata_partitions, "processor-claims"
    )
    return ResumePlanner(
        settings.worker_id,
        metadata_partitions,
        remote_state_loader(settings, metadata_partitions),
        lambda topics: topic_ids(admin, topics),
        claims,
        follower,
    )
