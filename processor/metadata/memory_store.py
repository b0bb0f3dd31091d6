"""The metadata fold's store in memory (:class:`MemoryStore`) and what it knows of one partition
(:class:`PartitionView`), the view every reader of a :class:`~processor.metadata.fold.MetadataFold`
gets."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field

from processor.kafka.partition import TopicPartition
from processor.metadata.fold_state import Change, PartitionHeader
from processor.metadata.model import DELETE_STATES, RemoteLogSegmentMetadata, SegmentState


def _overlaps(a: RemoteLogSegmentMetadata, start: int, end: int) -> bool:
    return a.start_offset <= end and start <= a.end_offset


@dataclass
class PartitionView:
    """What the fold knows of one partition."""

    header: PartitionHeader = field(default_factory=PartitionHeader)
    segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)
    served: set[uuid.UUID] = field(default_factory=set)
    shadowed: set[bytes] = field(default_factory=set)
    orphans: dict[uuid.UUID, RemoteLogSegmentMetadata] = field(default_factory=dict)

    @property
    def log_start_offset(self) -> int:
        return self.header.log_start_offset

    @property
    def current_epoch(self) -> int | None:
        return self.header.current_epoch

    def finished(self) -> list[RemoteLogSegmentMetadata]:
        """The served finished segments, by start offset."""
        return sorted((self.segments[x] for x in self.served), key=lambda s: s.start_offset)


class MemoryStore:
    def __init__(self) -> None:
        self.partitions: dict[TopicPartition, PartitionView] = {}
        self._segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}

    def view(self, tp: TopicPartition) -> PartitionView:
        part = self.partitions.get(tp)
        if part is None:
            part = self.partitions[tp] = PartitionView()
        return part

    def header(self, tp: TopicPartition) -> PartitionHeader:
        part = self.partitions.get(tp)
        return part.header if part is not None else PartitionHeader()

    def segment(self, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        return self._segments.get(sid)

    def served_overlapping(
        self, tp: TopicPartition, start: int, end: int
    ) -> Iterator[RemoteLogSegmentMetadata]:
        part = self.partitions.get(tp)
        if part is None:
            return
        for sid in part.served:
            seg = part.segments[sid]
            if _overlaps(seg, start, end):
                yield seg

    def served(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        part = self.partitions.get(tp)
        return [] if part is None else [part.segments[x] for x in part.served]

    def shadowed_keys(self, tp: TopicPartition) -> set[bytes]:
        part = self.partitions.get(tp)
        return set() if part is None else set(part.shadowed)

    def unserved(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        part = self.partitions.get(tp)
        if part is None:
            return []
        return [
            s
            for s in part.segments.values()
            if s.state in DELETE_STATES
            or (s.state is SegmentState.COPY_SEGMENT_FINISHED and s.segment_id.id not in part.served)
        ]

    def is_shadowed(self, tp: TopicPartition, key: bytes) -> bool:
        part = self.partitions.get(tp)
        return part is not None and key in part.shadowed

    def is_orphan(self, tp: TopicPartition, sid: uuid.UUID) -> bool:
        part = self.partitions.get(tp)
        return part is not None and sid in part.orphans

    def commit(self, tp: TopicPartition, change: Change) -> None:
        part = self.view(tp)
        if change.header is not None:
            part.header = change.header
        for seg in change.unserve:
            part.served.discard(seg.segment_id.id)
        for seg in change.reserve:
            part.served.add(seg.segment_id.id)
        if change.dropped is not None:
            sid = change.dropped.segment_id.id
            part.segments.pop(sid, None)
            part.served.discard(sid)
            self._segments.pop(sid, None)
        if change.put is not None:
            sid = change.put.segment_id.id
            part.segments[sid] = self._segments[sid] = change.put
            if change.served:
                part.served.add(sid)
            else:
                part.served.discard(sid)
        for key, on in (*change.shadows, *(() if change.shadow is None else (change.shadow,))):
            if on:
                part.shadowed.add(key)
            else:
                part.shadowed.discard(key)
        if change.orphan is not None:
            sid, orphan = change.orphan
            if orphan is None:
                part.orphans.pop(sid, None)
            else:
                part.orphans[sid] = orphan
