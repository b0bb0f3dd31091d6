"""The follower cache's query API: lookups by offset, time and partition over the key layout of
:mod:`processor.follower.cache_keys` (the RemoteLogMetadataManager API builds on these)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from rocksdict import Rdict, RdictIter, ReadOptions

from processor.follower.cache_keys import I64, MAX_UUID, O_VALUE, U32, U64, tp_key, tp_of_key
from processor.follower.listing_rows import Row, model_row, rows_of_values
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import decode_value
from processor.metadata.fold_state import PartitionHeader
from processor.metadata.model import PartitionDeleteState, RemoteLogSegmentMetadata
from processor.metadata.partition_header_codec import decode_header
from processor.metadata.remote_log_state import PartitionRemoteState


def _segment_of(raw: bytes) -> RemoteLogSegmentMetadata:
    """A segment's record as the cache stores it under its ``S`` key."""
    record = decode_value(raw)
    assert isinstance(record, RemoteLogSegmentMetadata)
    return record


def _prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix`` (an iterator's upper bound)."""
    stem = prefix.rstrip(b"\xff")
    return stem[:-1] + bytes((stem[-1] + 1,))


class CacheQueries:
    """Reads of an open cache database (``_db``); :class:`MetadataCache` opens it."""

    _db: Rdict
    _headers: dict[TopicPartition, PartitionHeader]  # decoded once; the writer keeps them current

    def header(self, tp: TopicPartition) -> PartitionHeader:
        """The fold's per-partition state (claim, topic ids, log start offset, delete state)."""
        header = self._headers.get(tp)
        if header is None:
            raw = self._db.get(b"E" + tp_key(tp))
            header = PartitionHeader() if raw is None else decode_header(raw)
            if len(self._headers) > 65_536:
                self._headers.clear()
            self._headers[tp] = header
        return header

    def remember_headers(self, headers: dict[TopicPartition, PartitionHeader]) -> None:
        self._headers.update(headers)

    _bookkeeping: dict[TopicPartition, tuple[frozenset[bytes], frozenset[uuid.UUID]]]
    _served_end_bounds: dict[TopicPartition, int]

    def served_end_bound(self, tp: TopicPartition) -> int:
        """An upper bound of the highest end offset served for ``tp`` (-1: nothing served): what the
        write path asks before it looks for overlaps. Read once from the ``O`` keys, then raised as
        segments are served (never lowered when one stops being served: still an upper bound)."""
        bound = self._served_end_bounds.get(tp)
        if bound is None:
            bound = -1
            head = b"O" + tp_key(tp)
            it = self._db.iter()
            it.seek_for_prev(head + b"\xff" * 24)
            if it.valid() and it.key().startswith(head):  # served segments never overlap: the last ends last
                bound = O_VALUE.unpack(it.value())[0]
            if len(self._served_end_bounds) > 65_536:
                self._served_end_bounds.clear()
            self._served_end_bounds[tp] = bound
        return bound

    def raise_served_end_bound(self, tp: TopicPartition, end: int) -> None:
        self._served_end_bounds[tp] = max(self.served_end_bound(tp), end)

    def bookkeeping(self, tp: TopicPartition) -> tuple[frozenset[bytes], frozenset[uuid.UUID]]:
        """The partition's shadowed keys and orphan segment ids (loaded once, kept current)."""
        kept = self._bookkeeping.get(tp)
        if kept is None:
            head = tp_key(tp)
            shadowed = frozenset(key[len(head) + 1 :] for key, _ in self._prefixed(b"H" + head))
            orphans = frozenset(uuid.UUID(bytes=key[-16:]) for key, _ in self._prefixed(b"X" + head))
            if len(self._bookkeeping) > 65_536:
                self._bookkeeping.clear()
            kept = self._bookkeeping[tp] = (shadowed, orphans)
        return kept

    def remember_bookkeeping(self, changed: dict[TopicPartition, tuple[set[bytes], set[uuid.UUID]]]) -> None:
        for tp, (shadowed, orphans) in changed.items():
            self._bookkeeping[tp] = (frozenset(shadowed), frozenset(orphans))

    def current_epoch(self, tp: TopicPartition) -> int | None:
        """The epoch of the partition's current claim (None: nobody holds one)."""
        return self.header(tp).current_epoch

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
        return None if raw is None else _segment_of(raw)

    def remote_state(self, tp: TopicPartition) -> PartitionRemoteState:
        """The partition's remote state exactly as the in-memory fold builds it from the metadata
        topic (the same fold decided it): every segment not yet DELETE_SEGMENT_FINISHED, the served
        ones, the header, shadowed keys and orphans. A worker whose follower is caught up resumes
        and cleans up from this instead of re-reading the metadata partitions.

        Every key is read through one iterator. A RocksDB iterator sees the database as it was when
        the iterator was made, and the follower thread writes each batch atomically, so the state is
        the fold after some batch, never a mix of two (read key by key, a segment served by the newer
        batch could be missing from the older one's list). rocksdict's ``Snapshot.iter`` does not
        read at its snapshot (0.3.29), hence the one iterator rather than a snapshot."""
        it = self._db.iter()
        head = tp_key(tp)

        def prefixed(prefix: bytes) -> list[tuple[bytes, bytes]]:
            return list(self._prefixed(prefix, it))  # read whole: the next read moves ``it``

        def get(key: bytes) -> bytes | None:
            it.seek(key)
            return it.value() if it.valid() and it.key() == key else None

        raw_header = get(b"E" + head)
        header = PartitionHeader() if raw_header is None else decode_header(raw_header)
        listed = [uuid.UUID(bytes=key[-16:]) for key, _ in prefixed(b"L" + head)]
        served_ids = [uuid.UUID(bytes=key[-16:]) for key, _ in prefixed(b"O" + head)]
        shadowed = {key[len(head) + 1 :] for key, _ in prefixed(b"H" + head)}
        orphans: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for key, value in prefixed(b"X" + head):
            record = decode_value(value)
            if isinstance(record, RemoteLogSegmentMetadata):
                orphans[uuid.UUID(bytes=key[-16:])] = record
        segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for segment_id in dict.fromkeys(listed + served_ids):
            raw = get(b"S" + segment_id.bytes)
            if raw is not None:
                segments[segment_id] = _segment_of(raw)
        served = {x for x in served_ids if x in segments}
        return PartitionRemoteState(segments, served, header, shadowed, orphans)

    def prefixed(self, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Every key under ``prefix`` with its value (a scan: for rare work only)."""
        return self._prefixed(prefix)

    def _prefixed(self, prefix: bytes, it: RdictIter | None = None) -> Iterator[tuple[bytes, bytes]]:
        """The keys under ``prefix``, through ``it`` when given (one consistent view)."""
        if it is None:
            it = self._db.iter()
        it.seek(prefix)
        while it.valid() and it.key().startswith(prefix):
            yield it.key(), it.value()
            it.next()

    def partition_delete_state(self, tp: TopicPartition) -> PartitionDeleteState | None:
        return self.header(tp).delete_state

    def log_start_offset(self, tp: TopicPartition) -> int:
        """The remote log start offset of ``tp`` (0 when none was published): reads below it are
        "not in remote storage", whatever segments still exist there."""
        return self.header(tp).log_start_offset

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
        return self._segments_of(self.scan_keys(b"O", tp, from_offset))

    def listed_segments(self, tp: TopicPartition, from_offset: int = 0) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment of ``tp`` not yet DELETE_SEGMENT_FINISHED that ends at or after ``from_offset``."""
        return self._segments_of(self.scan_keys(b"L", tp, from_offset))

    def listed_rows(self, tps: list[TopicPartition]) -> list[Row]:
        """The listing rows (:mod:`processor.follower.listing_rows`) of every segment of ``tps`` not
        yet DELETE_SEGMENT_FINISHED, partition by partition in order of start offset: the rows of
        ``listed_segments`` of each, read from the stored bytes without a model per segment.

        Each partition's ``L`` keys come from one iterator bounded to its prefix and the ``S`` values
        from one multi-get (rocksdict: a call for all, not a Python step a key). Where an ``L`` value
        is not the 8-byte end offset the fold writes (a damaged cache), the listing is that of
        ``listed_segments``, which decides what such a cache lists and raises what it raises."""
        keys: list[bytes | str | int | float | bool] = []  # rocksdict's key type (raw mode: bytes)
        for tp in tps:
            head = b"L" + tp_key(tp)
            bounded = ReadOptions()
            bounded.set_iterate_upper_bound(_prefix_end(head))
            # raw mode: keys and values are bytes (rocksdict types them as any key type)
            entries: list[tuple[bytes, bytes]] = list(self._db.items(from_key=head, read_opt=bounded))  # type: ignore[arg-type]
            if not all(len(end) >= 8 and end[0] < 0x80 for _key, end in entries):  # I64 >= 0
                return [model_row(s) for tp in tps for s in self.listed_segments(tp)]
            keys.extend(b"S" + key[-16:] for key, _end in entries)
        values: list[bytes | None] = self._db.get(keys) if keys else []  # type: ignore[assignment]
        return rows_of_values(values, _segment_of)

    def _segments_of(self, keys: Iterator[tuple[bytes, bytes]]) -> Iterator[RemoteLogSegmentMetadata]:
        """The ``S`` record of each ``O``/``L`` key's segment (its id's bytes end the key: no UUID
        made and taken apart again per segment)."""
        get = self._db.get
        for key, _value in keys:
            raw = get(b"S" + key[-16:])
            if raw is not None:
                yield _segment_of(raw)

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
