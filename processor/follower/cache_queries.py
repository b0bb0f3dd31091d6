"""The follower cache's query API: lookups by offset, time and partition over the key layout of
:mod:`processor.follower.cache_keys` (the RemoteLogMetadataManager API builds on these)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from rocksdict import Rdict

from processor.follower.cache_keys import (
    I64,
    MAX_UUID,
    O_VALUE,
    U32,
    U64,
    decode_lineage,
    tp_key,
    tp_of_key,
)
from processor.metadata.codec import decode_value
from processor.metadata.fencing import Lineage
from processor.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    TopicPartition,
)
from processor.metadata.remote_log_state import PartitionRemoteState


class CacheQueries:
    """Reads of an open cache database (``_db``); :class:`MetadataCache` opens it."""

    _db: Rdict

    # -- consumed offsets -------------------------------------------------------------------------

    def consumed_offsets(self) -> dict[int, int]:
        out: dict[int, int] = {}
        it = self._db.iter()
        it.seek(b"C")
        while it.valid() and it.key()[:1] == b"C":
            out[U32.unpack(it.key()[1:])[0]] = I64.unpack(it.value())[0]
            it.next()
        return out

    # -- lookups (the RLMM API builds on these) -----------------------------------------------------

    def segment(self, segment_id: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        raw = self._db.get(b"S" + segment_id.bytes)
        if raw is None:
            return None
        record = decode_value(raw)
        assert isinstance(record, RemoteLogSegmentMetadata)
        return record

    def lineage(self, tp: TopicPartition) -> Lineage:
        """The partition's newest writer epoch and topic id lineage (empty if nothing was seen)."""
        raw = self._db.get(b"E" + tp_key(tp))
        return Lineage() if raw is None else decode_lineage(raw)

    def max_epoch(self, tp: TopicPartition) -> int:
        return self.lineage(tp).max_epoch

    def remote_state(self, tp: TopicPartition) -> PartitionRemoteState:
        """The partition's remote state as the leader's fold would build it from the metadata topic:
        every segment not yet DELETE_SEGMENT_FINISHED, and the lineage. A worker whose follower is
        caught up resumes from this instead of re-reading the metadata partitions."""
        segments = {s.segment_id.id: s for s in self.listed_segments(tp)}
        served = {s.segment_id.id for s in self.finished_segments(tp)}
        return PartitionRemoteState(
            segments=segments,
            lineage=self.lineage(tp),
            served=served,
            log_start_offset=self.log_start_offset(tp),
            delete_state=self.partition_delete_state(tp),
        )

    def partition_delete_state(self, tp: TopicPartition) -> PartitionDeleteState | None:
        raw = self._db.get(b"P" + tp_key(tp))
        if raw is None:
            return None
        record = decode_value(raw)
        assert isinstance(record, RemotePartitionDeleteMetadata)
        return record.state

    def log_start_offset(self, tp: TopicPartition) -> int:
        """The remote log start offset of ``tp`` (0 when none was published): reads below it are
        "not in remote storage", whatever segments still exist there."""
        raw = self._db.get(b"B" + tp_key(tp))
        return 0 if raw is None else int(I64.unpack(raw)[0])

    def finished_segment_for_offset(self, tp: TopicPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        if offset < 0 or offset < self.log_start_offset(tp):
            return None
        head = b"O" + tp_key(tp)
        it = self._db.iter()
        it.seek_for_prev(head + U64.pack(offset) + MAX_UUID)
        if not it.valid() or not it.key().startswith(head):
            return None
        end, _max_ts = O_VALUE.unpack(it.value())
        if end < offset:
            return None
        return self.segment(uuid.UUID(bytes=it.key()[-16:]))

    def finished_segments(
        self, tp: TopicPartition, from_offset: int = 0
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_FINISHED segments of ``tp`` ending at or after ``from_offset``, by start offset."""
        for key, _value in self.scan_keys(b"O", tp, from_offset):
            seg = self.segment(uuid.UUID(bytes=key[-16:]))
            if seg is not None:
                yield seg

    def listed_segments(self, tp: TopicPartition, from_offset: int = 0) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment of ``tp`` not yet DELETE_SEGMENT_FINISHED that ends at or after ``from_offset``."""
        for key, _value in self.scan_keys(b"L", tp, from_offset):
            seg = self.segment(uuid.UUID(bytes=key[-16:]))
            if seg is not None:
                yield seg

    def scan_keys(self, prefix: bytes, tp: TopicPartition, from_offset: int) -> Iterator[tuple[bytes, bytes]]:
        head = prefix + tp_key(tp)
        it = self._db.iter()
        it.seek_for_prev(head + U64.pack(max(from_offset, 0)) + MAX_UUID)
        if not (it.valid() and it.key().startswith(head)):
            it.seek(head)  # nothing starts at or before from_offset
        else:
            # Step back over segments that start before from_offset yet may still reach it (only
            # unfinished attempts can overlap; finished coverage never does), then start there.
            while True:
                it.prev()
                if not (it.valid() and it.key().startswith(head)):
                    break
                if I64.unpack(it.value()[:8])[0] < from_offset:
                    break
            if it.valid():
                it.next()
            else:
                it.seek(head)
        while it.valid() and it.key().startswith(head):
            end = I64.unpack(it.value()[:8])[0]
            if end >= from_offset:
                yield it.key(), it.value()
            it.next()

    def segment_for_timestamp(self, tp: TopicPartition, timestamp: int) -> RemoteLogSegmentMetadata | None:
        """The first finished segment (by offset) holding a record with timestamp >= ``timestamp``,
        not counting segments wholly below the remote log start offset."""
        head = b"O" + tp_key(tp)
        log_start = self.log_start_offset(tp)
        it = self._db.iter()
        it.seek(head)
        while it.valid() and it.key().startswith(head):
            end, max_ts = O_VALUE.unpack(it.value())
            if max_ts >= timestamp and end >= log_start:
                return self.segment(uuid.UUID(bytes=it.key()[-16:]))
            it.next()
        return None

    def offset_range(self, tp: TopicPartition) -> tuple[int, int] | None:
        """(earliest, highest) offset served from finished segments of ``tp``, or None. The earliest
        is never below the remote log start offset."""
        head = b"O" + tp_key(tp)
        it = self._db.iter()
        it.seek(head)
        if not it.valid() or not it.key().startswith(head):
            return None
        earliest = U64.unpack(it.key()[len(head) : len(head) + 8])[0]
        it.seek_for_prev(head + b"\xff" * 24)
        highest = O_VALUE.unpack(it.value())[0]
        earliest = max(earliest, self.log_start_offset(tp))
        if earliest > highest:
            return None
        return earliest, highest

    def topic_partitions(self) -> list[TopicPartition]:
        out: list[TopicPartition] = []
        it = self._db.iter()
        it.seek(b"L")
        while it.valid() and it.key()[:1] == b"L":
            tp = tp_of_key(it.key()[1:])
            out.append(tp)
            it.seek(b"L" + tp_key(tp) + b"\xff" * 24)  # skip to the next partition
        return out
