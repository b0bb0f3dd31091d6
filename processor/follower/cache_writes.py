"""The follower cache's write path: consumed metadata messages applied in one atomic RocksDB write
batch each, fenced (:mod:`processor.metadata.fencing`) and checked by the state machine.

Records from an older writer epoch than the partition's newest, or copies of a retired topic id, are
skipped and counted (``processor_metadata_records_skipped_total{reason="stale_epoch"|"old_topic_id"}``).

Every consumed batch becomes one atomic write batch holding the state it produced *and* the
consumed offsets of its metadata partitions, so a restarted follower resumes exactly where it
stopped and re-reads nothing (KIP-405 asks for this; Kafka itself re-reads the whole topic).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from rocksdict import Rdict, WriteBatch

from processor import metrics
from processor.errors import FormatError, ProcessorError
from processor.follower.cache_keys import I64, O_VALUE, U32, U64, encode_lineage, offset_key, tp_key
from processor.follower.cache_queries import CacheQueries
from processor.metadata.codec import decode_value, encode_value
from processor.metadata.fencing import Lineage, StaleRecordError
from processor.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicPartition,
)
from processor.metadata.state_machine import apply_snapshot, apply_update, check_partition_transition

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
    # newest writer epoch among the segment records applied, per source partition
    epochs: dict[TopicPartition, int] = field(default_factory=dict)


@dataclass
class _Overlay:
    """What a batch changed and has not written yet (RocksDB iterators do not see a WriteBatch)."""

    segments: dict[uuid.UUID, RemoteLogSegmentMetadata | None] = field(default_factory=dict)
    lineages: dict[TopicPartition, Lineage] = field(default_factory=dict)
    served: dict[TopicPartition, dict[uuid.UUID, RemoteLogSegmentMetadata | None]] = field(
        default_factory=dict
    )


class CacheWriter:
    """Applies batches to an open cache database, reading its current state through ``queries``."""

    def __init__(self, db: Rdict, queries: CacheQueries) -> None:
        self._db = db
        self.queries = queries

    def apply_batch(
        self, messages: Iterable[RawMessage], topics: frozenset[str] | None = None
    ) -> ApplyResult:
        """Apply consumed messages in one atomic write, together with their consumed offsets.

        A message that does not decode or breaks the state machine is skipped and counted; its
        offset still advances, so it is never read again. ``topics`` limits which source topics
        are kept (records of others are consumed and ignored).
        """
        result = ApplyResult()
        batch = WriteBatch(raw_mode=True)
        overlay = _Overlay()
        partition_overlay: dict[TopicPartition, PartitionDeleteState] = {}
        start_overlay: dict[TopicPartition, int] = {}
        next_offsets: dict[int, int] = {}
        for msg in messages:
            next_offsets[msg.partition] = msg.offset + 1
            try:
                if msg.value is None:
                    self._apply_tombstone(batch, overlay, msg.key)
                    result.applied += 1
                    continue
                record = decode_value(msg.value)
                if topics is not None and record.topic_partition.topic not in topics:
                    continue
                if isinstance(record, RemotePartitionDeleteMetadata):
                    self._apply_partition(batch, partition_overlay, record)
                elif isinstance(record, RemoteLogStartOffset):
                    self._apply_log_start(batch, start_overlay, record)
                else:
                    self._apply_segment(batch, overlay, record, msg.value)
                    tp = record.topic_partition
                    result.epochs[tp] = max(result.epochs.get(tp, -1), record.writer_epoch)
                result.applied += 1
            except (FormatError, ProcessorError) as exc:
                if isinstance(exc, FormatError):
                    reason = "undecodable"
                elif isinstance(exc, StaleRecordError):
                    reason = exc.reason
                else:
                    reason = "illegal"
                metrics.METADATA_SKIPPED.labels(reason).inc()
                result.skipped += 1
                result.skipped_positions.append((msg.partition, msg.offset, str(exc)))
                log.warning("metadata record %d@%d skipped (%s): %s", msg.partition, msg.offset, reason, exc)
        for partition, offset in next_offsets.items():
            batch.put(b"C" + U32.pack(partition), I64.pack(offset))
        self._db.write(batch)
        return result

    def _current(self, overlay: _Overlay, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        if sid in overlay.segments:
            return overlay.segments[sid]
        return self.queries.segment(sid)

    def _lineage(self, overlay: _Overlay, tp: TopicPartition) -> Lineage:
        lineage = overlay.lineages.get(tp)
        if lineage is None:  # read (and JSON-decoded) once a batch, not once a record
            lineage = overlay.lineages[tp] = self.queries.lineage(tp)
        return lineage

    def _served(
        self, overlay: _Overlay, tp: TopicPartition, start: int = 0, end: int | None = None
    ) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
        """The partition's served (``O``) segments reaching into ``start..end`` (default: all), with
        this batch's changes. Reads only the range: applying a record stays O(log n)."""
        out: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for key, _value in self.queries.scan_keys(b"O", tp, start):
            if end is not None and U64.unpack(key[-24:-16])[0] > end:
                break
            sid = uuid.UUID(bytes=key[-16:])
            seg = self._current(overlay, sid)
            if seg is not None:
                out[sid] = seg
        for sid, changed in overlay.served.get(tp, {}).items():
            if changed is None:
                out.pop(sid, None)
            elif end is None or (changed.start_offset <= end and changed.end_offset >= start):
                out[sid] = changed
            else:  # changed in this batch, but outside the range asked for
                out.pop(sid, None)
        return out

    def _unserve(self, batch: WriteBatch, overlay: _Overlay, seg: RemoteLogSegmentMetadata) -> None:
        tp = seg.topic_partition
        batch.delete(offset_key(b"O", tp, seg.start_offset, seg.segment_id.id))
        overlay.served.setdefault(tp, {})[seg.segment_id.id] = None

    def _apply_segment(
        self,
        batch: WriteBatch,
        overlay: _Overlay,
        record: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate,
        raw: bytes,
    ) -> None:
        sid = record.segment_id.id
        tp = record.topic_partition
        current = self._current(overlay, sid)
        before = self._lineage(overlay, tp)
        after = before.admit(record, current)  # raises StaleRecordError when fenced out
        if isinstance(record, RemoteLogSegmentMetadata):
            new = apply_snapshot(current, record)
        else:
            new = apply_update(current, record)
        overlay.segments[sid] = new
        if after != before:
            overlay.lineages[tp] = after
            batch.put(b"E" + tp_key(tp), encode_lineage(after))
        if after.topic_id != before.topic_id and before.topic_id is not None:
            # The topic was re-created: the old id's history is no longer served for it.
            for old in self._served(overlay, tp).values():
                if not after.serves(old.segment_id.topic_id, after.topic_id):
                    self._unserve(batch, overlay, old)
        suffix = tp_key(new.segment_id.topic_partition) + U64.pack(new.start_offset) + sid.bytes
        o_key = b"O" + suffix
        l_key = b"L" + suffix
        if new.state is SegmentState.DELETE_SEGMENT_FINISHED:
            batch.delete(b"S" + sid.bytes)
            batch.delete(l_key)
        else:
            # A snapshot that passed the state machine is stored as it arrived (no re-encoding).
            batch.put(b"S" + sid.bytes, raw if new is record else encode_value(new))
            batch.put(l_key, I64.pack(new.end_offset))
        served = new.state is SegmentState.COPY_SEGMENT_FINISHED and after.serves(
            new.segment_id.topic_id, after.topic_id
        )
        if served:
            # The newest epoch's lineage wins: older overlapping finished segments stop being served
            # (they are superseded; the partition's next leader deletes them).
            for other in self._served(overlay, tp, new.start_offset, new.end_offset).values():
                overlaps = other.start_offset <= new.end_offset and new.start_offset <= other.end_offset
                if other.segment_id.id != sid and overlaps and other.writer_epoch <= new.writer_epoch:
                    self._unserve(batch, overlay, other)
            batch.put(o_key, O_VALUE.pack(new.end_offset, new.max_timestamp_ms))
            overlay.served.setdefault(tp, {})[sid] = new
        else:
            batch.delete(o_key)
            overlay.served.setdefault(tp, {})[sid] = None

    def _apply_tombstone(self, batch: WriteBatch, overlay: _Overlay, key: bytes | None) -> None:
        try:
            sid = uuid.UUID((key or b"").decode().rsplit("/", 1)[-1])
        except ValueError as exc:
            raise FormatError(f"tombstone with a key that names no segment: {key!r}") from exc
        current = self._current(overlay, sid)
        overlay.segments[sid] = None
        if current is None:
            return
        tp = current.topic_partition
        batch.delete(b"S" + sid.bytes)
        batch.delete(offset_key(b"O", tp, current.start_offset, sid))
        batch.delete(offset_key(b"L", tp, current.start_offset, sid))
        overlay.served.setdefault(tp, {})[sid] = None

    def _apply_partition(
        self,
        batch: WriteBatch,
        overlay: dict[TopicPartition, PartitionDeleteState],
        record: RemotePartitionDeleteMetadata,
    ) -> None:
        tp = record.topic_partition
        current = overlay.get(tp) or self.queries.partition_delete_state(tp)
        check_partition_transition(current, record.state, tp)
        overlay[tp] = record.state
        batch.put(b"P" + tp_key(tp), encode_value(record))

    def _apply_log_start(
        self, batch: WriteBatch, overlay: dict[TopicPartition, int], record: RemoteLogStartOffset
    ) -> None:
        tp = record.topic_partition
        current = overlay.get(tp, self.queries.log_start_offset(tp))
        if record.start_offset > current:  # an older (lower) value arriving late changes nothing
            overlay[tp] = record.start_offset
            batch.put(b"B" + tp_key(tp), I64.pack(record.start_offset))
