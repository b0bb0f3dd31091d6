"""The follower cache's write path: consumed metadata messages applied through the one fold
(:mod:`processor.metadata.fold`), in one atomic RocksDB write batch per consumed batch.

The fold decides every record exactly as every other reader does; this module is only its store
(:class:`RocksFoldStore`): it reads the cache's current state plus what the batch changed so far
(RocksDB iterators do not see an unwritten WriteBatch), and turns each decision into puts and deletes
of the key layout in :mod:`processor.follower.cache_keys`.

Every consumed batch becomes one atomic write batch holding the state it produced *and* the consumed
offsets of its metadata partitions, so a restarted follower resumes exactly where it stopped and
re-reads nothing (KIP-405 asks for this; Kafka itself re-reads the whole topic). A rejected record
is counted by reason (``processor_metadata_records_rejected_total{reason}``), logged with its
position, and its offset still advances: it is never read again.
"""

from __future__ import annotations

import bisect
import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from rocksdict import Rdict, WriteBatch

from processor import metrics
from processor.follower.cache_keys import I64, MAX_UUID, O_VALUE, U32, U64, offset_key, tp_key
from processor.follower.cache_queries import CacheQueries
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import encode_value
from processor.metadata.fold import Fold
from processor.metadata.fold_state import Change, PartitionHeader
from processor.metadata.model import DELETE_STATES, RemoteLogSegmentMetadata, SegmentState
from processor.metadata.partition_header_codec import encode_header

log = logging.getLogger(__name__)

_DELETE_FINISHED = SegmentState.DELETE_SEGMENT_FINISHED
_UNKNOWN = object()  # not changed by the batch so far


class RawMessage(NamedTuple):
    """One message of the metadata topic, as consumed."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class ApplyResult:
    applied: int = 0
    skipped: int = 0
    skipped_positions: list[tuple[int, int, str]] = field(default_factory=list)
    # the current claim epoch (None: released) of each source partition whose claim this batch changed
    claims: dict[TopicPartition, int | None] = field(default_factory=dict)
    # read-your-write: (metadata partition, offset) of the batch's records NOT accepted -> False
    # (rejected) or None (of a topic this follower does not keep: unknown here); every other
    # record of the batch was accepted
    not_accepted: dict[tuple[int, int], bool | None] = field(default_factory=dict)
    # source partitions with at least one accepted record in the batch
    active: set[TopicPartition] = field(default_factory=set)


class _ServedAdds:
    """The segments a batch made served in one partition and that are still served, by start offset
    (served segments never overlap, so those overlapping a range are a run ending at the last start
    inside it). A segment the batch unserves again is taken out: left in, a rewrite's sources (each
    inside the rewrite's range) would end the walk back before it reached the rewrite."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.segments: list[RemoteLogSegmentMetadata] = []
        self.start_of: dict[int, int] = {}  # where each listed segment (by its id's int) is filed
        self.max_end = -1  # of every segment ever added: a bound, not exact

    def add(self, seg: RemoteLogSegmentMetadata) -> None:
        self.remove(seg)
        self.max_end = max(self.max_end, seg.end_offset)
        i = bisect.bisect_right(self.starts, seg.start_offset)
        self.starts.insert(i, seg.start_offset)
        self.segments.insert(i, seg)
        self.start_of[seg.segment_id.id.int] = seg.start_offset

    def remove(self, seg: RemoteLogSegmentMetadata) -> None:
        """Take out the entry of ``seg``'s id, if there is one (filed under the start it was added
        with: a record of the same id may state another)."""
        sid = seg.segment_id.id.int
        start = self.start_of.pop(sid, None)
        if start is None:
            return
        i = bisect.bisect_left(self.starts, start)
        while self.segments[i].segment_id.id.int != sid:
            i += 1
        del self.starts[i], self.segments[i]

    def overlapping(self, start: int, end: int) -> Iterator[RemoteLogSegmentMetadata]:
        i = bisect.bisect_right(self.starts, end) - 1
        while i >= 0 and self.segments[i].end_offset >= start:
            yield self.segments[i]
            i -= 1


class RocksFoldStore:
    """The fold's store over the cache database, for one batch at a time (:meth:`begin`)."""

    def __init__(self, db: Rdict, queries: CacheQueries) -> None:
        self._db = db
        self.queries = queries
        self.begin()

    def begin(self) -> None:
        # the batch's writes, the last of each key only (None: a delete), written as one WriteBatch:
        # a segment's records in one batch rewrite the same keys (its copy records: every key twice)
        self.writes: dict[bytes, bytes | None] = {}
        # segments by their id's int, not the UUID: a UUID's hash is a Python call, several a record
        self.segments: dict[int, RemoteLogSegmentMetadata | None] = {}
        self.headers: dict[TopicPartition, PartitionHeader] = {}
        self.served_changes: dict[TopicPartition, dict[int, RemoteLogSegmentMetadata | None]] = {}
        self.served_adds: dict[TopicPartition, _ServedAdds] = {}
        self.bookkeeping: dict[TopicPartition, tuple[set[bytes], set[uuid.UUID]]] = {}
        # the last partition asked for and its entry: a record's checks ask twice in a row (a
        # TopicPartition's hash is a Python call)
        self._kept_tp: TopicPartition | None = None
        self._kept: tuple[set[bytes], set[uuid.UUID]] = (set(), set())

    def written(self) -> None:
        """The batch was written: what it changed is what the database says now."""
        self.queries.remember_headers(self.headers)
        self.queries.remember_bookkeeping(self.bookkeeping)
        for tp, adds in self.served_adds.items():
            self.queries.raise_served_end_bound(tp, adds.max_end)
        self.begin()

    # -- reads -----------------------------------------------------------------------------------

    def header(self, tp: TopicPartition) -> PartitionHeader:
        header = self.headers.get(tp) if self.headers else None  # a batch changes few, often none
        return header if header is not None else self.queries.header(tp)

    def segment(self, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        seg = self.segments.get(sid.int, _UNKNOWN)
        if seg is _UNKNOWN:
            return self.queries.segment(sid)
        return seg  # type: ignore[return-value]

    def _bookkept(self, tp: TopicPartition) -> tuple[set[bytes], set[uuid.UUID]]:
        if tp is self._kept_tp:
            return self._kept
        kept = self.bookkeeping.get(tp)
        if kept is None:
            shadowed, orphans = self.queries.bookkeeping(tp)
            kept = self.bookkeeping[tp] = (set(shadowed), set(orphans))
        self._kept_tp, self._kept = tp, kept
        return kept

    def is_shadowed(self, tp: TopicPartition, key: bytes) -> bool:
        shadowed = self._bookkept(tp)[0]
        return bool(shadowed) and key in shadowed

    def shadowed_keys(self, tp: TopicPartition) -> set[bytes]:
        return set(self._bookkept(tp)[0])

    def is_orphan(self, tp: TopicPartition, sid: uuid.UUID) -> bool:
        orphans = self._bookkept(tp)[1]
        return bool(orphans) and sid in orphans  # none, nearly always: no UUID hash (a Python call)

    def served_overlapping(self, tp: TopicPartition, start: int, end: int) -> list[RemoteLogSegmentMetadata]:
        """Served segments of ``tp`` reaching into ``start..end``, this batch's changes included: one
        seek and a short walk back (served segments never overlap), not a scan of the partition."""
        changes = self.served_changes.get(tp, {})
        adds = self.served_adds.get(tp)
        if start > self.queries.served_end_bound(tp) and (adds is None or start > adds.max_end):
            return []  # the common case: a segment after everything served (no iterator needed)
        out: dict[int, RemoteLogSegmentMetadata] = {}
        head = b"O" + tp_key(tp)
        it = self._db.iter()
        it.seek_for_prev(head + U64.pack(end) + MAX_UUID)
        while it.valid() and it.key().startswith(head):
            if O_VALUE.unpack(it.value())[0] < start:
                break
            sid = int.from_bytes(it.key()[-16:])
            if sid not in changes:
                seg = self.queries.segment(uuid.UUID(int=sid))
                if seg is not None:
                    out[sid] = seg
            it.prev()
        if adds is not None:
            for seg in adds.overlapping(start, end):
                sid = seg.segment_id.id.int
                if changes.get(sid) is seg:
                    out[sid] = seg
        return list(out.values())

    def served(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        """Every served segment of ``tp`` (a topic re-created: rare), this batch's changes included."""
        changes = self.served_changes.get(tp, {})
        out: dict[int, RemoteLogSegmentMetadata] = {}
        for key, _value in self.queries.scan_keys(b"O", tp, 0):
            sid = int.from_bytes(key[-16:])
            seg = self.segment(uuid.UUID(int=sid))
            if seg is not None and sid not in changes:
                out[sid] = seg
        out.update({sid: seg for sid, seg in changes.items() if seg is not None})
        return list(out.values())

    def unserved(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        """Segments of ``tp`` not served (in a delete state, or finished and superseded), this
        batch's changes included. A finished deletion is kept under its id only (not listed by
        partition): this reads every segment the cache holds, which happens only when a claim's
        records are to be re-published (a tombstone under a claim's key: rare)."""
        served = {s.segment_id.id.int for s in self.served(tp)}

        def wanted(seg: RemoteLogSegmentMetadata) -> bool:
            return seg.topic_partition == tp and (
                seg.state in DELETE_STATES
                or (seg.state is SegmentState.COPY_SEGMENT_FINISHED and seg.segment_id.id.int not in served)
            )

        out: dict[int, RemoteLogSegmentMetadata] = {}
        for key, _value in self.queries.prefixed(b"S"):
            sid = int.from_bytes(key[1:17])
            if sid in self.segments:
                continue
            seg = self.queries.segment(uuid.UUID(int=sid))
            if seg is not None and wanted(seg):
                out[sid] = seg
        for sid, change in self.segments.items():
            if change is not None and wanted(change):
                out[sid] = change
        return list(out.values())

    # -- writes ----------------------------------------------------------------------------------

    def _served_adds(self, tp: TopicPartition) -> _ServedAdds:
        adds = self.served_adds.get(tp)
        if adds is None:
            adds = self.served_adds[tp] = _ServedAdds()
        return adds

    def _no_longer_served(self, tp: TopicPartition, seg: RemoteLogSegmentMetadata) -> None:
        adds = self.served_adds.get(tp)
        if adds is not None:
            adds.remove(seg)

    def commit(self, tp: TopicPartition, change: Change) -> None:
        # the partition's key first: a key that cannot be built fails here, before anything changes
        ptp = tp_key(tp)
        writes = self.writes
        served = self.served_changes.get(tp)
        if served is None:
            served = self.served_changes[tp] = {}
        for seg in change.unserve:
            writes[offset_key(b"O", seg.topic_partition, seg.start_offset, seg.segment_id.id)] = None
            served[seg.segment_id.id.int] = None
            self._no_longer_served(tp, seg)
        for seg in change.reserve:
            key = offset_key(b"O", seg.topic_partition, seg.start_offset, seg.segment_id.id)
            writes[key] = O_VALUE.pack(seg.end_offset, seg.max_timestamp_ms)
            served[seg.segment_id.id.int] = seg
            self._served_adds(tp).add(seg)
        if change.dropped is not None:
            seg = change.dropped
            sid = seg.segment_id.id
            writes[b"S" + sid.bytes] = None
            writes[offset_key(b"O", seg.topic_partition, seg.start_offset, sid)] = None
            writes[offset_key(b"L", seg.topic_partition, seg.start_offset, sid)] = None
            self.segments[sid.int] = None
            served[sid.int] = None
            self._no_longer_served(tp, seg)
        if change.put is not None:
            new = change.put
            key_int = new.segment_id.id.int
            sid_bytes = key_int.to_bytes(16)
            suffix = ptp + U64.pack(new.start_offset) + sid_bytes
            # a snapshot as it arrived is stored as it arrived (no re-encoding)
            raw = change.put_raw
            writes[b"S" + sid_bytes] = raw if raw is not None else encode_value(new)
            if new.state is _DELETE_FINISHED:  # kept for the state machine, not listed
                writes[b"L" + suffix] = None
            else:
                writes[b"L" + suffix] = I64.pack(new.end_offset)
            if change.served:
                writes[b"O" + suffix] = O_VALUE.pack(new.end_offset, new.max_timestamp_ms)
                served[key_int] = new
                self._served_adds(tp).add(new)
            else:
                writes[b"O" + suffix] = None
                if served.get(key_int) is not None:  # served by this batch (listed in served_adds)
                    self._no_longer_served(tp, new)
                served[key_int] = None
            self.segments[key_int] = new
        if change.header is not None:
            writes[b"E" + ptp] = encode_header(change.header)
            self.headers[tp] = change.header
        if change.shadow is not None or change.shadows:
            shadowed = self._bookkept(tp)[0]
            for key, on in (*change.shadows, *(() if change.shadow is None else (change.shadow,))):
                if on:
                    writes[b"H" + ptp + key] = b""
                    shadowed.add(key)
                else:
                    writes[b"H" + ptp + key] = None
                    shadowed.discard(key)
        if change.orphan is not None:
            sid, orphan = change.orphan
            orphans = self._bookkept(tp)[1]
            if orphan is None:
                writes[b"X" + ptp + sid.bytes] = None
                orphans.discard(sid)
            else:
                writes[b"X" + ptp + sid.bytes] = encode_value(orphan)
                orphans.add(sid)


class CacheWriter:
    """Applies batches to an open cache database through the fold."""

    def __init__(self, db: Rdict, queries: CacheQueries) -> None:
        self._db = db
        self.store = RocksFoldStore(db, queries)

    def apply_batch(
        self, messages: Iterable[RawMessage], topics: frozenset[str] | None = None
    ) -> ApplyResult:
        """Apply consumed messages in one atomic write, together with their consumed offsets.
        ``topics`` limits which source topics are kept (records of others are consumed and ignored)."""
        result = ApplyResult()
        store = self.store
        fold = Fold(store, topics)
        applied = 0
        messages = messages if isinstance(messages, list) else list(messages)
        try:
            verdicts = fold.apply_messages([(offset, key, value) for _p, offset, key, value in messages])
            for message, verdict in zip(messages, verdicts, strict=True):
                if verdict.accepted and not verdict.ignored:
                    applied += 1
                    continue
                partition, offset = message.partition, message.offset
                if verdict.ignored:
                    result.not_accepted[(partition, offset)] = None
                    continue
                result.not_accepted[(partition, offset)] = False
                reason = verdict.reason or "rejected"
                metrics.METADATA_REJECTED.labels(reason).inc()
                result.skipped += 1
                result.skipped_positions.append((partition, offset, verdict.detail))
                log.warning(
                    "metadata record %d@%d rejected (%s): %s", partition, offset, reason, verdict.detail
                )
            result.applied = applied
            # each partition's last message (a consumed batch holds each partition's in order)
            next_offsets = {partition: offset + 1 for partition, offset, _key, _value in messages}
            # the partitions whose header (claim) changed, and those with an accepted record
            result.claims = {tp: header.current_epoch for tp, header in store.headers.items()}
            result.active = set(store.headers) | {
                seg.segment_id.topic_partition for seg in store.segments.values() if seg is not None
            }
            for partition, offset in next_offsets.items():
                store.writes[b"C" + U32.pack(partition)] = I64.pack(offset)
            batch = WriteBatch(raw_mode=True)
            put, delete = batch.put, batch.delete
            for key, value in store.writes.items():
                if value is None:
                    delete(key)
                else:
                    put(key, value)
            self._db.write(batch)
        except BaseException:
            store.begin()  # nothing of the batch was written: forget it
            raise
        store.written()
        return result
