"""The metadata fold in memory, its served segments indexed by offset. Pure.

The fold asks its store, for every FINISHED record, which served segments of the partition overlap
the record's offsets. :class:`~processor.metadata.memory_store.MemoryStore` answers by looking at
every served segment of the partition, so folding a partition of n segments costs n^2 / 2 checks:
a second at 1,000 segments a partition, minutes at 10,000. A rebuild folds every partition it plans
and every partition it published, so here the same store keeps each partition's served segments
sorted by start offset as well, and answers from the few whose start lies within reach of the
asked range (its start minus the longest served segment the partition ever had). It answers with
the same segments (in offset order rather than the set's order, which decides nothing but the
order of an overlap's message); the rules are the fold's own, unchanged.
"""

from __future__ import annotations

import uuid
from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator

from processor.kafka.partition import TopicPartition
from processor.metadata.fold import MetadataFold
from processor.metadata.fold_state import Change
from processor.metadata.memory_store import MemoryStore
from processor.metadata.model import RemoteLogSegmentMetadata

_LOWEST = uuid.UUID(int=0)
_HIGHEST = uuid.UUID(int=(1 << 128) - 1)


class _Index:
    __slots__ = ("by_start", "longest", "start_of")

    def __init__(self) -> None:
        self.by_start: list[tuple[int, uuid.UUID]] = []  # the served segments, (start, id), sorted
        self.start_of: dict[uuid.UUID, int] = {}
        self.longest = 0  # the most offsets a served segment of the partition ever spanned, minus one

    def add(self, seg: RemoteLogSegmentMetadata) -> None:
        sid = seg.segment_id.id
        if self.start_of.get(sid) == seg.start_offset:
            return
        self.remove(sid)
        insort(self.by_start, (seg.start_offset, sid))
        self.start_of[sid] = seg.start_offset
        self.longest = max(self.longest, seg.end_offset - seg.start_offset)

    def remove(self, sid: uuid.UUID) -> None:
        start = self.start_of.pop(sid, None)
        if start is not None:
            at = bisect_left(self.by_start, (start, sid))
            del self.by_start[at]


class IndexedStore(MemoryStore):
    """:class:`MemoryStore` with each partition's served segments also sorted by start offset."""

    def __init__(self) -> None:
        super().__init__()
        self._index: dict[TopicPartition, _Index] = {}

    def served_overlapping(
        self, tp: TopicPartition, start: int, end: int
    ) -> Iterator[RemoteLogSegmentMetadata]:
        part, index = self.partitions.get(tp), self._index.get(tp)
        if part is None or index is None:
            return
        entries = index.by_start
        lo = bisect_left(entries, (start - index.longest, _LOWEST))
        hi = bisect_right(entries, (end, _HIGHEST))
        for _start, sid in entries[lo:hi]:
            seg = part.segments[sid]
            if seg.start_offset <= end and start <= seg.end_offset:
                yield seg

    def commit(self, tp: TopicPartition, change: Change) -> None:
        super().commit(tp, change)
        touched = {seg.segment_id.id for seg in (*change.unserve, *change.reserve)}
        for seg in (change.dropped, change.put):
            if seg is not None:
                touched.add(seg.segment_id.id)
        if not touched:
            return
        part = self.partitions[tp]
        index = self._index.get(tp) or self._index.setdefault(tp, _Index())
        for sid in touched:
            if sid in part.served:
                index.add(part.segments[sid])
            else:
                index.remove(sid)


def indexed_fold(topics: frozenset[str] | None = None) -> MetadataFold:
    """A :class:`MetadataFold` (the same rules, verdicts and views) over an :class:`IndexedStore`."""
    fold = MetadataFold(topics)
    fold.memory = IndexedStore()
    fold.store = fold.memory
    return fold
