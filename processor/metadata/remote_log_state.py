"""Folding metadata records into the remote state of partitions. Pure.

The leader uses it to resume (highest finished offset, dangling copies); tests use it to check
coverage. Every record goes through the state machine; an illegal one raises and changes nothing.
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field

from processor.metadata.model import (
    MetadataRecord,
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicPartition,
)
from processor.metadata.state_machine import apply_snapshot, apply_update, check_partition_transition


@dataclass
class PartitionRemoteState:
    segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)
    log_start_offset: int = 0  # remote log start offset (retention, delete-before); only grows
    delete_state: PartitionDeleteState | None = None  # of the whole partition (delete-topic)

    def apply(
        self, record: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        current = self.segments.get(record.segment_id.id)
        if isinstance(record, RemoteLogSegmentMetadata):
            new = apply_snapshot(current, record)
        else:
            new = apply_update(current, record)
        self.segments[record.segment_id.id] = new
        return new

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        return sorted(
            (s for s in self.segments.values() if s.state == SegmentState.COPY_SEGMENT_FINISHED),
            key=lambda s: s.start_offset,
        )

    def set_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = max(self.log_start_offset, offset)

    def highest_finished_offset(self) -> int | None:
        """The highest offset copied, or deliberately deleted below the remote log start offset:
        after retention deleted every segment, a resuming leader continues at the start offset
        instead of copying the deleted history again."""
        done = self.finished()
        highest = max(s.end_offset for s in done) if done else None
        if self.log_start_offset > 0 and (highest is None or highest < self.log_start_offset - 1):
            return self.log_start_offset - 1
        return highest

    def dangling(self) -> list[RemoteLogSegmentMetadata]:
        """Copies that started and never finished (a writer crashed or was revoked mid-copy)."""
        return [s for s in self.segments.values() if s.state == SegmentState.COPY_SEGMENT_STARTED]


@dataclass
class RemoteLogState:
    partitions: dict[TopicPartition, PartitionRemoteState] = field(default_factory=dict)

    def apply(self, record: MetadataRecord) -> None:
        if isinstance(record, RemotePartitionDeleteMetadata):
            part = self.partitions.setdefault(record.topic_partition, PartitionRemoteState())
            check_partition_transition(part.delete_state, record.state, record.topic_partition)
            part.delete_state = record.state
            return
        if isinstance(record, RemoteLogStartOffset):
            self.partitions.setdefault(record.topic_partition, PartitionRemoteState()).set_log_start_offset(
                record.start_offset
            )
            return
        tp = record.segment_id.topic_partition
        self.partitions.setdefault(tp, PartitionRemoteState()).apply(record)

    def partition(self, tp: TopicPartition) -> PartitionRemoteState:
        return self.partitions.get(tp) or PartitionRemoteState()


def coverage_gaps_and_overlaps(segments: list[RemoteLogSegmentMetadata]) -> list[str]:
    """Problems in a partition's finished coverage: each segment must start at the previous end + 1."""
    problems: list[str] = []
    ordered = sorted(segments, key=lambda s: s.start_offset)
    for prev, cur in itertools.pairwise(ordered):
        if cur.start_offset <= prev.end_offset:
            problems.append(
                f"overlap: {prev.segment_id} ends at {prev.end_offset}, "
                f"{cur.segment_id} starts at {cur.start_offset}"
            )
        elif cur.start_offset != prev.end_offset + 1:
            problems.append(f"gap: {prev.end_offset + 1}..{cur.start_offset - 1} not covered")
    return problems
