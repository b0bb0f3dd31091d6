"""The follower's metadata cache: the metadata topic materialized into RocksDB (rocksdict).

The only module that imports rocksdict. Key layout (binary; ``tp`` is ``topic utf-8, 0x00,
partition u32 BE``; offsets and timestamps are u64/i64 BE so byte order is numeric order)::

    b"S" uuid(16)                      -> the segment's latest metadata (codec.encode_value bytes)
    b"O" tp start(u64) uuid(16)        -> [end i64][max_timestamp i64]   COPY_SEGMENT_FINISHED only
    b"L" tp start(u64) uuid(16)        -> [end i64]                      all but DELETE_SEGMENT_FINISHED
    b"P" tp                            -> partition delete state (codec bytes)
    b"B" tp                            -> [remote log start offset i64]  (highest seen; only grows)
    b"E" tp                            -> the partition's lineage: newest writer epoch, topic id (JSON)
    b"C" metadata_partition(u32)       -> [next offset to consume i64]
    b"V"                               -> [cache layout version u16]

``O`` holds only the finished segments that are *served*: those of the partition's current topic id,
and of the newest epoch where segments overlap (see :mod:`processor.metadata.fencing`). Records from
an older writer epoch than the partition's newest, or copies of a retired topic id, are skipped and
counted (``processor_metadata_records_skipped_total{reason="stale_epoch"|"old_topic_id"}``).

"The finished segment containing offset O of tp" is one ``seek_for_prev`` on ``O tp O ff..``;
"segments of tp from offset O" is a forward scan from the same place. Neither scans the cache.

Every consumed batch becomes one atomic write batch holding the state it produced *and* the
consumed offsets of its metadata partitions, so a restarted follower resumes exactly where it
stopped and re-reads nothing (KIP-405 asks for this; Kafka itself re-reads the whole topic).
"""

from __future__ import annotations

import functools
import json
import logging
import struct
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from rocksdict import BlockBasedOptions, Options, Rdict, WriteBatch

from processor import metrics
from processor.errors import FormatError, ProcessorError
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
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.state_machine import apply_snapshot, apply_update, check_partition_transition

log = logging.getLogger(__name__)

CACHE_VERSION = 1
_U64 = struct.Struct(">Q")
_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_O_VALUE = struct.Struct(">qq")
_VERSION_KEY = b"V"
_MAX_UUID = b"\xff" * 16


@functools.lru_cache(maxsize=65536)
def tp_key(tp: TopicPartition) -> bytes:
    return tp.topic.encode() + b"\x00" + _U32.pack(tp.partition)


def _offset_key(prefix: bytes, tp: TopicPartition, start: int, sid: uuid.UUID | None) -> bytes:
    return prefix + tp_key(tp) + _U64.pack(start) + (sid.bytes if sid else _MAX_UUID)


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


def _encode_lineage(lineage: Lineage) -> bytes:
    return json.dumps(
        {
            "max_epoch": lineage.max_epoch,
            "topic_id": lineage.topic_id,
            "retired": sorted(lineage.retired),
            "legacy_retired": lineage.legacy_retired,
        }
    ).encode()


def _decode_lineage(raw: bytes) -> Lineage:
    d = json.loads(raw)
    return Lineage(d["max_epoch"], d["topic_id"], frozenset(d["retired"]), d["legacy_retired"])


@dataclass
class _Overlay:
    """What a batch changed and has not written yet (RocksDB iterators do not see a WriteBatch)."""

    segments: dict[uuid.UUID, RemoteLogSegmentMetadata | None] = field(default_factory=dict)
    lineages: dict[TopicPartition, Lineage] = field(default_factory=dict)
    served: dict[TopicPartition, dict[uuid.UUID, RemoteLogSegmentMetadata | None]] = field(
        default_factory=dict
    )


class MetadataCache:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        # Every new segment's first record looks up a key that is not there yet: whole-key bloom
        # filters (memtable and files) answer most of those misses without a skip-list or block seek.
        options.set_memtable_prefix_bloom_ratio(0.1)
        options.set_memtable_whole_key_filtering(True)
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        options.set_block_based_table_factory(table)
        try:
            self._db = Rdict(str(self.path), options)
        except Exception as exc:  # rocksdict raises plain Exception, e.g. when another process holds the lock
            raise ProcessorError(f"cannot open the metadata cache at {self.path}: {exc}") from None
        version = self._db.get(_VERSION_KEY)
        if version is None:
            self._db[_VERSION_KEY] = struct.pack(">H", CACHE_VERSION)
        elif struct.unpack(">H", version)[0] != CACHE_VERSION:
            raise ProcessorError(
                f"metadata cache at {self.path} has layout {version!r}; delete it to rebuild"
            )

    def close(self) -> None:
        self._db.close()

    # -- consumed offsets -------------------------------------------------------------------------

    def consumed_offsets(self) -> dict[int, int]:
        out: dict[int, int] = {}
        it = self._db.iter()
        it.seek(b"C")
        while it.valid() and it.key()[:1] == b"C":
            out[_U32.unpack(it.key()[1:])[0]] = _I64.unpack(it.value())[0]
            it.next()
        return out

    # -- applying ---------------------------------------------------------------------------------

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
            batch.put(b"C" + _U32.pack(partition), _I64.pack(offset))
        self._db.write(batch)
        return result

    def _current(self, overlay: _Overlay, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        if sid in overlay.segments:
            return overlay.segments[sid]
        return self.segment(sid)

    def _lineage(self, overlay: _Overlay, tp: TopicPartition) -> Lineage:
        lineage = overlay.lineages.get(tp)
        if lineage is None:  # read (and JSON-decoded) once a batch, not once a record
            lineage = overlay.lineages[tp] = self.lineage(tp)
        return lineage

    def _served(
        self, overlay: _Overlay, tp: TopicPartition, start: int = 0, end: int | None = None
    ) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
        """The partition's served (``O``) segments reaching into ``start..end`` (default: all), with
        this batch's changes. Reads only the range: applying a record stays O(log n)."""
        out: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for key, _value in self._scan(b"O", tp, start):
            if end is not None and _U64.unpack(key[-24:-16])[0] > end:
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
        batch.delete(_offset_key(b"O", tp, seg.start_offset, seg.segment_id.id))
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
            batch.put(b"E" + tp_key(tp), _encode_lineage(after))
        if after.topic_id != before.topic_id and before.topic_id is not None:
            # The topic was re-created: the old id's history is no longer served for it.
            for old in self._served(overlay, tp).values():
                if not after.serves(old.segment_id.topic_id, after.topic_id):
                    self._unserve(batch, overlay, old)
        suffix = tp_key(new.segment_id.topic_partition) + _U64.pack(new.start_offset) + sid.bytes
        o_key = b"O" + suffix
        l_key = b"L" + suffix
        if new.state is SegmentState.DELETE_SEGMENT_FINISHED:
            batch.delete(b"S" + sid.bytes)
            batch.delete(l_key)
        else:
            # A snapshot that passed the state machine is stored as it arrived (no re-encoding).
            batch.put(b"S" + sid.bytes, raw if new is record else encode_value(new))
            batch.put(l_key, _I64.pack(new.end_offset))
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
            batch.put(o_key, _O_VALUE.pack(new.end_offset, new.max_timestamp_ms))
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
        batch.delete(_offset_key(b"O", tp, current.start_offset, sid))
        batch.delete(_offset_key(b"L", tp, current.start_offset, sid))
        overlay.served.setdefault(tp, {})[sid] = None

    def _apply_partition(
        self,
        batch: WriteBatch,
        overlay: dict[TopicPartition, PartitionDeleteState],
        record: RemotePartitionDeleteMetadata,
    ) -> None:
        tp = record.topic_partition
        current = overlay.get(tp) or self.partition_delete_state(tp)
        check_partition_transition(current, record.state, tp)
        overlay[tp] = record.state
        batch.put(b"P" + tp_key(tp), encode_value(record))

    def _apply_log_start(
        self, batch: WriteBatch, overlay: dict[TopicPartition, int], record: RemoteLogStartOffset
    ) -> None:
        tp = record.topic_partition
        current = overlay.get(tp, self.log_start_offset(tp))
        if record.start_offset > current:  # an older (lower) value arriving late changes nothing
            overlay[tp] = record.start_offset
            batch.put(b"B" + tp_key(tp), _I64.pack(record.start_offset))

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
        return Lineage() if raw is None else _decode_lineage(raw)

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
        return 0 if raw is None else int(_I64.unpack(raw)[0])

    def finished_segment_for_offset(self, tp: TopicPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        if offset < 0 or offset < self.log_start_offset(tp):
            return None
        head = b"O" + tp_key(tp)
        it = self._db.iter()
        it.seek_for_prev(head + _U64.pack(offset) + _MAX_UUID)
        if not it.valid() or not it.key().startswith(head):
            return None
        end, _max_ts = _O_VALUE.unpack(it.value())
        if end < offset:
            return None
        return self.segment(uuid.UUID(bytes=it.key()[-16:]))

    def finished_segments(
        self, tp: TopicPartition, from_offset: int = 0
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """COPY_SEGMENT_FINISHED segments of ``tp`` ending at or after ``from_offset``, by start offset."""
        for key, _value in self._scan(b"O", tp, from_offset):
            seg = self.segment(uuid.UUID(bytes=key[-16:]))
            if seg is not None:
                yield seg

    def listed_segments(self, tp: TopicPartition, from_offset: int = 0) -> Iterator[RemoteLogSegmentMetadata]:
        """Every segment of ``tp`` not yet DELETE_SEGMENT_FINISHED that ends at or after ``from_offset``."""
        for key, _value in self._scan(b"L", tp, from_offset):
            seg = self.segment(uuid.UUID(bytes=key[-16:]))
            if seg is not None:
                yield seg

    def _scan(self, prefix: bytes, tp: TopicPartition, from_offset: int) -> Iterator[tuple[bytes, bytes]]:
        head = prefix + tp_key(tp)
        it = self._db.iter()
        it.seek_for_prev(head + _U64.pack(max(from_offset, 0)) + _MAX_UUID)
        if not (it.valid() and it.key().startswith(head)):
            it.seek(head)  # nothing starts at or before from_offset
        else:
            # Step back over segments that start before from_offset yet may still reach it (only
            # unfinished attempts can overlap; finished coverage never does), then start there.
            while True:
                it.prev()
                if not (it.valid() and it.key().startswith(head)):
                    break
                if _I64.unpack(it.value()[:8])[0] < from_offset:
                    break
            if it.valid():
                it.next()
            else:
                it.seek(head)
        while it.valid() and it.key().startswith(head):
            end = _I64.unpack(it.value()[:8])[0]
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
            end, max_ts = _O_VALUE.unpack(it.value())
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
        earliest = _U64.unpack(it.key()[len(head) : len(head) + 8])[0]
        it.seek_for_prev(head + b"\xff" * 24)
        highest = _O_VALUE.unpack(it.value())[0]
        earliest = max(earliest, self.log_start_offset(tp))
        if earliest > highest:
            return None
        return earliest, highest

    def topic_partitions(self) -> list[TopicPartition]:
        out: list[TopicPartition] = []
        it = self._db.iter()
        it.seek(b"L")
        while it.valid() and it.key()[:1] == b"L":
            raw = it.key()[1:]
            sep = raw.index(b"\x00")
            tp = TopicPartition(raw[:sep].decode(), _U32.unpack(raw[sep + 1 : sep + 5])[0])
            out.append(tp)
            it.seek(b"L" + tp_key(tp) + b"\xff" * 24)  # skip to the next partition
        return out
