"""Sanity bounds of metadata records: the one place a record from outside is checked. Pure.

Every record read from the metadata topic or the deletion topic goes through :func:`check_record`
(called by :func:`processor.metadata.codec.decode_value`) before any reader folds it, and through
:func:`check_key` when the message's key is known. A record outside these bounds is rejected as
``invalid`` (a :class:`~processor.errors.FormatError`) and never folded, so one hostile or broken
record cannot unserve, fence or wipe a partition (a ``[0, 2^63-1]`` segment, a negative partition, a
topic name with a NUL, an epoch no owner can hold).

Bounds (all inclusive):

- topic: a legal Kafka topic name (``[A-Za-z0-9._-]``, 1..249 characters, not ``.``/``..``);
  topic id: none, or a lower-case RFC 4122 UUID string;
- partition: 0 .. 2^31-1 (Kafka's int32 partition ids);
- offsets: 0 <= start <= end < 2^62 (MAX_OFFSET); a log start offset in 0 .. 2^62;
- writer epoch: -1 .. 2^62 (a claim epoch is an offset of the metadata topic; -1: none);
- record count: 0 .. end - start + 1; sizes 0 .. 2^62; index CRC-32: 0 .. 2^32-1;
- strings: writer id up to 255 characters, custom metadata up to 1 KiB, segment leader epochs
  1..65,536 entries;
- object keys (1..1024 characters): the segment's own objects in the layout of
  :mod:`processor.segment.object_keys`, whatever the prefix: ``[{prefix}/]{topic}[-{topic_id}]/
  {partition}/{start_offset:020d}-{segment uuid}-e{n}.log`` and that key + ``-index``, prefix parts
  of safe characters only. (Which prefix is this deployment's is checked where objects are read or
  deleted.)
- format version: one of the segment format versions this code reads;
- replaces state: only on a DELETE_SEGMENT_STARTED, and only COPY_SEGMENT_STARTED or
  COPY_SEGMENT_FINISHED (the states a deletion is planned on);
- superseded segments: at most 4,096 ids, none twice, not the segment's own;
- the key of the message must be the record's own key (``codec.record_key``): compaction keeps the
  latest record *per key*, so a record filed under another key would survive in the wrong place.
"""

from __future__ import annotations

import re
import uuid
from functools import lru_cache

from processor.errors import FormatError
from processor.metadata.model import (
    ClaimKind,
    MetadataRecord,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
)

MAX_OFFSET = 2**62 - 1
MAX_PARTITION = 2**31 - 1
MAX_EPOCH = 2**62
MAX_SIZE = 2**62
MAX_WRITER_ID = 255
MAX_OBJECT_KEY = 1024
MAX_CUSTOM_METADATA = 1024
MAX_LEADER_EPOCHS = 65_536
MAX_SUPERSEDES = 4096  # segments one rewrite takes over (a merge's run): ~150 KiB of record at most
SEGMENT_FORMAT_VERSIONS = frozenset({1, 2})
_DELETABLE_FROM = frozenset({SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED})

TOPIC_NAME = _TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_TOPIC_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_PREFIX_PART = re.compile(r"[A-Za-z0-9._=-]{1,255}")
_NAME = re.compile(r"(\d{20})-([0-9a-f-]{36})-e\d{1,20}\.log")


@lru_cache(maxsize=4096)
def uuid_text(id_int: int) -> str:
    """``str(uuid.UUID(int=id_int))`` without making the UUID (its checks cost more than the text;
    cached: a new segment's record asks for it twice, for its key and for its object keys)."""
    h = f"{id_int:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _fail(record: object, what: str) -> FormatError:
    return FormatError(f"invalid metadata record ({type(record).__name__}): {what}")


@lru_cache(maxsize=65_536)
def _tp_problem(topic: str, partition: int, topic_id: str | None) -> str | None:
    """What is wrong with a record's partition, or None (cached: every record of a partition asks)."""
    if not _TOPIC.fullmatch(topic) or topic in {".", ".."}:
        return f"topic {topic!r} is not a legal Kafka topic name"
    if not 0 <= partition <= MAX_PARTITION:
        return f"partition {partition} outside 0..{MAX_PARTITION}"
    if topic_id is not None and not _TOPIC_ID.fullmatch(topic_id):
        return f"topic id {topic_id!r} is not a lower-case UUID"
    return None


def _check_tp(record: MetadataRecord, topic: str, partition: int, topic_id: str | None) -> None:
    problem = _tp_problem(topic, partition, topic_id)
    if problem is not None:
        raise _fail(record, problem)


def _check_writer(record: MetadataRecord, writer_id: str, epoch: int) -> None:
    if len(writer_id) > MAX_WRITER_ID:
        raise _fail(record, f"writer id of {len(writer_id)} characters (at most {MAX_WRITER_ID})")
    if not -1 <= epoch <= MAX_EPOCH:
        raise _fail(record, f"writer epoch {epoch} outside -1..{MAX_EPOCH}")


def check_segment(record: RemoteLogSegmentMetadata) -> None:
    sid = record.segment_id
    problem = _tp_problem(sid.topic, sid.partition, sid.topic_id)
    if problem is not None:
        raise _fail(record, problem)
    if len(record.writer_id) > MAX_WRITER_ID or not -1 <= record.writer_epoch <= MAX_EPOCH:
        _check_writer(record, record.writer_id, record.writer_epoch)  # raises, naming which
    start, end = record.start_offset, record.end_offset
    if not 0 <= start <= end <= MAX_OFFSET:
        raise _fail(record, f"offsets {start}..{end} outside 0 <= start <= end < 2^62")
    if not 0 <= record.record_count <= end - start + 1:
        raise _fail(record, f"record count {record.record_count} does not fit the offsets")
    if not (0 <= record.segment_size_in_bytes <= MAX_SIZE and 0 <= record.index_size_in_bytes <= MAX_SIZE):
        raise _fail(
            record, f"sizes {record.segment_size_in_bytes} / {record.index_size_in_bytes} outside 0..2^62"
        )
    if not 0 <= record.index_crc32 < 2**32:
        raise _fail(record, f"index CRC {record.index_crc32} is not a CRC-32")
    if record.segment_format_version not in SEGMENT_FORMAT_VERSIONS:
        raise _fail(record, f"unknown segment format version {record.segment_format_version}")
    problem = _key_problem(
        record.data_object_key,
        record.index_object_key,
        sid.topic,
        sid.partition,
        sid.topic_id,
        sid.id.int,
        start,
    )
    if problem is not None:
        raise _fail(record, problem)
    if not 0 < len(record.segment_leader_epochs) <= MAX_LEADER_EPOCHS:
        raise _fail(
            record, f"{len(record.segment_leader_epochs)} segment leader epochs (1..{MAX_LEADER_EPOCHS})"
        )
    if record.custom_metadata is not None and len(record.custom_metadata) > MAX_CUSTOM_METADATA:
        raise _fail(
            record, f"custom metadata of {len(record.custom_metadata)} bytes (at most {MAX_CUSTOM_METADATA})"
        )
    replaces = record.replaces_state
    if replaces is not None and (
        record.state is not SegmentState.DELETE_SEGMENT_STARTED or replaces not in _DELETABLE_FROM
    ):
        raise _fail(record, f"{record.state.value} naming replaced state {replaces.value}")
    superseded = record.supersedes
    if superseded:
        if len(superseded) > MAX_SUPERSEDES:
            raise _fail(record, f"{len(superseded)} superseded segments (at most {MAX_SUPERSEDES})")
        if len(set(superseded)) != len(superseded) or sid.id in superseded:
            raise _fail(record, "superseded segments named twice, or the segment itself")


@lru_cache(maxsize=4096)
def _directory_ok(directory: str, folder: str, partition: int) -> bool:
    """Whether a data object's folder is ``prefix/folder/partition`` with legal prefix folders (cached:
    every segment of a partition is filed there)."""
    parts = directory.split("/")
    return (
        len(parts) >= 2
        and parts[-2] == folder
        and parts[-1] == str(partition)
        and not any(p in {".", ".."} or not _PREFIX_PART.fullmatch(p) for p in parts[:-2])
    )


@lru_cache(maxsize=65_536)
def _key_problem(
    data: str, index: str, topic: str, partition: int, topic_id: str | None, id_int: int, start: int
) -> str | None:
    """What is wrong with a segment's object keys, or None (cached: a segment's records repeat them)."""
    if not 0 < len(data) <= MAX_OBJECT_KEY - 6 or index != data + "-index":
        return f"object keys {data!r} / {index!r}: the index must be the data key + '-index'"
    directory, slash, name = data.rpartition("/")
    folder = topic if topic_id is None else f"{topic}-{topic_id}"
    m = _NAME.fullmatch(name)
    if (
        not slash
        or not _directory_ok(directory, folder, partition)
        or m is None
        or int(m.group(1)) != start
        or m.group(2) != uuid_text(id_int)
    ):
        segment = f"{topic}-{partition}/{uuid.UUID(int=id_int)}"
        return f"object key {data!r} is not the data object of segment {segment}"
    return None


def check_record(record: MetadataRecord) -> MetadataRecord:
    """Return ``record`` if it lies within the bounds above, else raise FormatError naming the field."""
    if isinstance(record, RemoteLogSegmentMetadata):
        check_segment(record)
    elif isinstance(record, RemoteLogSegmentMetadataUpdate):
        sid = record.segment_id
        _check_tp(record, sid.topic, sid.partition, sid.topic_id)
        _check_writer(record, record.writer_id, record.writer_epoch)
        if record.custom_metadata is not None and len(record.custom_metadata) > MAX_CUSTOM_METADATA:
            raise _fail(record, f"custom metadata of {len(record.custom_metadata)} bytes")
    elif isinstance(record, RemoteLogStartOffset):
        tp = record.topic_partition
        _check_tp(record, tp.topic, tp.partition, record.topic_id)
        _check_writer(record, record.writer_id, record.writer_epoch)
        if not 0 <= record.start_offset <= MAX_OFFSET + 1:
            raise _fail(record, f"log start offset {record.start_offset} outside 0..2^62")
    elif isinstance(record, RemotePartitionDeleteMetadata):
        tp = record.topic_partition
        _check_tp(record, tp.topic, tp.partition, record.topic_id)
        _check_writer(record, record.writer_id, record.writer_epoch)
    else:
        tp = record.topic_partition
        _check_tp(record, tp.topic, tp.partition, record.topic_id)
        _check_writer(record, record.writer_id, record.released_epoch)
        if (record.kind is ClaimKind.RELEASE) != (record.released_epoch >= 0):
            raise _fail(record, f"a {record.kind.value} claim with released_epoch {record.released_epoch}")
        _check_writer(record, record.writer_id, record.restates_epoch)
        if record.kind is ClaimKind.RELEASE and record.restates_epoch >= 0:
            raise _fail(record, f"a RELEASE claim with restates_epoch {record.restates_epoch}")
    return record


def check_key(key: bytes | None, record: MetadataRecord, expected: bytes) -> None:
    """The message key must be the record's own key (see the module docstring)."""
    if key != expected:
        raise _fail(record, f"message key {key!r} is not the record's key {expected!r}")
