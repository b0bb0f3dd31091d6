"""Folding metadata records into the remote state of partitions. Pure.

The leader uses it to resume (highest finished offset, segments to clean up); tests use it to check
coverage. Every record goes through the state machine; an illegal one raises and changes nothing.

Two fences sit in front of the state machine (the follower cache applies the same rules, see
:mod:`processor.metadata.fencing`):

- **Writer epoch.** A segment record whose ``writer_epoch`` is older than the newest epoch already
  seen for the partition is rejected (a zombie writer that was paused past its session timeout).
- **Topic id.** A topic deleted and re-created under the same name is a new partition history: a
  COPY_SEGMENT_STARTED carrying a new topic id starts a new lineage, and segments of the old id
  (and legacy segments without an id) are no longer served for the topic. Deletes of old-lineage
  segments stay accepted, so retention can remove them.

When segments overlap, the newest epoch's lineage is served and the older overlapping finished
segments are *superseded*: never served, cleaned up by the next leader (Kafka serves the current
leader-epoch lineage and deletes the other one).
"""

from __future__ import annotations

import itertools
import uuid
from dataclasses import dataclass, field, replace

from processor.metadata.fencing import Lineage
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

_CLEANUP_STATES = (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED)


def _overlaps(a: RemoteLogSegmentMetadata, b: RemoteLogSegmentMetadata) -> bool:
    return a.start_offset <= b.end_offset and b.start_offset <= a.end_offset


@dataclass
class PartitionRemoteState:
    segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)
    log_start_offset: int = 0  # remote log start offset (retention, delete-before); only grows
    delete_state: PartitionDeleteState | None = None  # of the whole partition (delete-topic)
    lineage: Lineage = field(default_factory=Lineage)
    # Finished segments served, decided as records arrive (as the follower cache does): a finished
    # segment stops being served when a finished one of the same or a newer epoch overlaps it.
    served: set[uuid.UUID] = field(default_factory=set)
    # Set by a leader about to resume: the topic id the broker reports now (None: unknown), and the
    # epoch and writer id its cleanup records carry (a new leader's epoch is newer than any seen).
    current_topic_id: str | None = None
    cleanup_epoch: int | None = None
    cleanup_writer: str | None = None

    @property
    def max_epoch(self) -> int:
        return self.lineage.max_epoch

    def apply(
        self, record: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate
    ) -> RemoteLogSegmentMetadata:
        """Apply one record; raises StaleRecordError (fenced) or IllegalTransitionError."""
        current = self.segments.get(record.segment_id.id)
        after = self.lineage.admit(record, current)
        if isinstance(record, RemoteLogSegmentMetadata):
            new = apply_snapshot(current, record)
        else:
            new = apply_update(current, record)
        sid = record.segment_id.id
        self.segments[sid] = new
        if after.topic_id != self.lineage.topic_id and self.lineage.topic_id is not None:
            self.served = {
                x for x in self.served if after.serves(self.segments[x].segment_id.topic_id, after.topic_id)
            }
        self.lineage = after
        if new.state == SegmentState.COPY_SEGMENT_FINISHED and after.serves(
            new.segment_id.topic_id, after.topic_id
        ):
            self.served = {
                x
                for x in self.served
                if x == sid
                or not _overlaps(self.segments[x], new)
                or self.segments[x].writer_epoch > new.writer_epoch
            }
            self.served.add(sid)
        else:
            self.served.discard(sid)
        return new

    def _topic_id(self) -> str | None:
        return self.current_topic_id if self.current_topic_id is not None else self.lineage.topic_id

    def in_lineage(self, seg: RemoteLogSegmentMetadata) -> bool:
        return self.lineage.serves(seg.segment_id.topic_id, self._topic_id())

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        """The finished segments served for the partition: the current topic id's, newest epoch
        lineage where segments overlap; by start offset."""
        return sorted(
            (self.segments[x] for x in self.served if self.in_lineage(self.segments[x])),
            key=lambda s: s.start_offset,
        )

    def set_log_start_offset(self, offset: int) -> None:
        self.log_start_offset = max(self.log_start_offset, offset)

    def superseded(self) -> list[RemoteLogSegmentMetadata]:
        """Finished segments of the current topic id that an overlapping newer epoch replaced."""
        served = {s.segment_id.id for s in self.finished()}
        return [
            s
            for s in self.segments.values()
            if s.state == SegmentState.COPY_SEGMENT_FINISHED
            and self.in_lineage(s)
            and s.segment_id.id not in served
        ]

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
        """Segments to clean up: copies that started and never finished, deletes that started and
        never finished (a writer crashed, was revoked, or a delete failed), and finished segments
        superseded by a newer epoch. Stamped with ``cleanup_epoch``/``cleanup_writer`` when set, so
        the cleanup's records are not fenced as stale."""
        out = [s for s in self.segments.values() if s.state in _CLEANUP_STATES]
        out.extend(self.superseded())
        out.sort(key=lambda s: (s.start_offset, str(s.segment_id.id)))
        if self.cleanup_epoch is None:
            return out
        writer = self.cleanup_writer
        return [
            replace(
                s,
                writer_epoch=max(s.writer_epoch, self.cleanup_epoch),
                writer_id=writer if writer is not None else s.writer_id,
            )
            for s in out
        ]

    def next_writer_epoch(self, generation: int) -> int:
        """The epoch a new leader writes with: its group generation, or newer than any epoch seen
        for the partition (a group that was emptied and re-created restarts its generations)."""
        return max(generation, self.lineage.max_epoch + 1)


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
