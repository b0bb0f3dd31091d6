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

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from rocksdict import Rdict, WriteBatch

from processor import metrics
from processor.follower.cache_keys import I64, O_VALUE, U32, U64, offset_key, tp_key
from processor.follower.cache_queries import CacheQueries
from processor.metadata.codec import encode_value
from processor.metadata.fold import Change, Fold, PartitionHeader, encode_header
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicPartition

log = logging.getLogger(__name__)


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
    # (metadata partition, offset) -> accepted, for every record of the batch (read-your-write)
    verdicts: dict[tuple[int, int], bool] = field(default_factory=dict)
    # source partitions with at least one accepted record in the batch
    active: set[TopicPartition] = field(default_factory=set)


class RocksFoldStore:
    """The fold's store over the cache database, for one batch at a time (:meth:`begin`)."""

    def __init__(self, db: Rdict, queries: CacheQueries) -> None:
        self._db = db
        self.queries = queries
        self.begin()

    def begin(self) -> None:
        self.batch = WriteBatch(raw_mode=True)
        self.segments: dict[uuid.UUID, RemoteLogSegmentMetadata | None] = {}
        self.headers: dict[TopicPartition, PartitionHeader] = {}
        self.served_changes: dict[TopicPartition, dict[uuid.UUID, RemoteLogSegmentMetadata | None]] = {}

    def written(self) -> None:
        """The batch was written: what it changed is what the database says now."""
        self.queries.remember_headers(self.headers)
        self.begin()

    # -- reads -----------------------------------------------------------------------------------

    def header(self, tp: TopicPartition) -> PartitionHeader:
        header = self.headers.get(tp)
        return header if header is not None else self.queries.header(tp)

    def segment(self, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        if sid in self.segments:
            return self.segments[sid]
        return self.queries.segment(sid)

    def served_overlapping(self, tp: TopicPartition, start: int, end: int) -> list[RemoteLogSegmentMetadata]:
        return list(self._served(tp, start, end).values())

    def served(self, tp: TopicPartition) -> list[RemoteLogSegmentMetadata]:
        return list(self._served(tp).values())

    def _served(
        self, tp: TopicPartition, start: int = 0, end: int | None = None
    ) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
        """The served (``O``) segments of ``tp`` reaching into ``start..end`` (default: all), with
        this batch's changes. Reads only the range: applying a record stays O(log n)."""
        out: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for key, _value in self.queries.scan_keys(b"O", tp, start):
            if end is not None and U64.unpack(key[-24:-16])[0] > end:
                break
            sid = uuid.UUID(bytes=key[-16:])
            seg = self.segment(sid)
            if seg is not None:
                out[sid] = seg
        for sid, changed in self.served_changes.get(tp, {}).items():
            if changed is None:
                out.pop(sid, None)
            elif end is None or (changed.start_offset <= end and changed.end_offset >= start):
                out[sid] = changed
            else:  # changed in this batch, but outside the range asked for
                out.pop(sid, None)
        return out

    # -- writes ----------------------------------------------------------------------------------

    def commit(self, tp: TopicPartition, change: Change) -> None:
        # every key first: a key that cannot be built fails here, before anything is changed
        ptp = tp_key(tp)
        batch = self.batch
        served = self.served_changes.setdefault(tp, {})
        for seg in change.unserve:
            batch.delete(offset_key(b"O", seg.topic_partition, seg.start_offset, seg.segment_id.id))
            served[seg.segment_id.id] = None
        if change.dropped is not None:
            seg = change.dropped
            sid = seg.segment_id.id
            batch.delete(b"S" + sid.bytes)
            batch.delete(offset_key(b"O", seg.topic_partition, seg.start_offset, sid))
            batch.delete(offset_key(b"L", seg.topic_partition, seg.start_offset, sid))
            self.segments[sid] = None
            served[sid] = None
        if change.put is not None:
            new = change.put
            sid = new.segment_id.id
            suffix = tp_key(new.topic_partition) + U64.pack(new.start_offset) + sid.bytes
            # a snapshot as it arrived is stored as it arrived (no re-encoding)
            batch.put(b"S" + sid.bytes, change.put_raw if change.put_raw is not None else encode_value(new))
            if new.state is SegmentState.DELETE_SEGMENT_FINISHED:  # kept for the state machine, not listed
                batch.delete(b"L" + suffix)
            else:
                batch.put(b"L" + suffix, I64.pack(new.end_offset))
            if change.served:
                batch.put(b"O" + suffix, O_VALUE.pack(new.end_offset, new.max_timestamp_ms))
                served[sid] = new
            else:
                batch.delete(b"O" + suffix)
                served[sid] = None
            self.segments[sid] = new
        if change.header is not None:
            batch.put(b"E" + ptp, encode_header(change.header))
            self.headers[tp] = change.header
        if change.shadow is not None:
            key, on = change.shadow
            if on:
                batch.put(b"H" + ptp + key, b"")
            else:
                batch.delete(b"H" + ptp + key)
        if change.orphan is not None:
            sid, orphan = change.orphan
            if orphan is None:
                batch.delete(b"X" + ptp + sid.bytes)
            else:
                batch.put(b"X" + ptp + sid.bytes, encode_value(orphan))


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
        next_offsets: dict[int, int] = {}
        claims_before: dict[TopicPartition, int | None] = {}
        try:
            for msg in messages:
                next_offsets[msg.partition] = msg.offset + 1
                verdict = fold.apply_raw(msg.offset, msg.key, msg.value)
                result.verdicts[(msg.partition, msg.offset)] = verdict.accepted
                if verdict.ignored:
                    continue
                if verdict.accepted:
                    result.applied += 1
                    tp = verdict.topic_partition
                    if tp is not None:
                        result.active.add(tp)
                    if tp is not None and tp in store.headers and tp not in claims_before:
                        claims_before[tp] = None  # header changed in this batch: report its claim
                    continue
                reason = verdict.reason or "rejected"
                metrics.METADATA_REJECTED.labels(reason).inc()
                result.skipped += 1
                result.skipped_positions.append((msg.partition, msg.offset, verdict.detail))
                log.warning(
                    "metadata record %d@%d rejected (%s): %s",
                    msg.partition,
                    msg.offset,
                    reason,
                    verdict.detail,
                )
            for tp in claims_before:
                result.claims[tp] = store.headers[tp].current_epoch
            for partition, offset in next_offsets.items():
                store.batch.put(b"C" + U32.pack(partition), I64.pack(offset))
            self._db.write(store.batch)
        except BaseException:
            store.begin()  # nothing of the batch was written: forget it
            raise
        store.written()
        return result
