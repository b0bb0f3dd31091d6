"""Wire codec of the metadata topic: keys, framing and Avro bodies. Pure (fastavro only).

Value framing (see schemas/README.md)::

    [framing_version u8 = 1][record_type u8][Avro binary body, schemaless]
    record_type 0: RemoteLogSegmentMetadata, 1: RemoteLogSegmentMetadataUpdate,
                2: RemotePartitionDeleteMetadata, 3: RemoteLogStartOffset, 4: PartitionClaim

Key (UTF-8): ``{topic}/{partition}/{segment uuid}`` for segment records in a copy state,
``{topic}/{partition}/{segment uuid}/delete`` for segment records in a delete state (earlier
versions wrote those under the segment key too; still read), ``{topic}/{partition}`` for partition
records, ``{topic}/{partition}/log-start-offset`` for a partition's remote log start offset,
``{topic}/{partition}/claim/{claim uuid}`` for claims. Topic names cannot contain '/', so keys are
unambiguous; a segment's copy states and delete states have a key each, so compaction keeps the
latest of each and a delete record (accepted or not) never replaces the record that finished the
copy; one key per claim keeps every claim.

Schema evolution: a field added to a schema with a default keeps the framing version; the schema
files of earlier versions stay in ``schemas/history/`` and a body that does not decode with the
current schema is read with an earlier one (resolved to the current, defaults filled in). Decoded
records are checked against :mod:`processor.metadata.validation` before anyone folds them.
"""

from __future__ import annotations

import io
import json
import struct
import uuid
import zlib
from collections.abc import Sequence
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import fastavro

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.metadata import segment_batch_decoder, segment_metadata_decoder
from processor.metadata.model import (
    DELETE_STATES,
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
)
from processor.metadata.validation import check_key, check_record, check_segment, uuid_text

FRAMING_VERSION = 1
TYPE_SEGMENT = 0
TYPE_UPDATE = 1
TYPE_PARTITION_DELETE = 2
TYPE_LOG_START_OFFSET = 3
TYPE_CLAIM = 4
LOG_START_OFFSET_KEY_SUFFIX = "log-start-offset"
CLAIM_KEY_PART = "claim"
DELETE_KEY_SUFFIX = "delete"
_SCHEMA_FILES = {
    TYPE_SEGMENT: "RemoteLogSegmentMetadata.avsc",
    TYPE_UPDATE: "RemoteLogSegmentMetadataUpdate.avsc",
    TYPE_PARTITION_DELETE: "RemotePartitionDeleteMetadata.avsc",
    TYPE_LOG_START_OFFSET: "RemoteLogStartOffset.avsc",
    TYPE_CLAIM: "PartitionClaim.avsc",
}
# Earlier writer schemas still readable (schemas/history/), newest first.
_SCHEMA_HISTORY: dict[int, tuple[str, ...]] = {
    TYPE_PARTITION_DELETE: ("RemotePartitionDeleteMetadata.v1.avsc",),  # before writer_epoch
    # v2: before supersedes; v1: before replaces_state
    TYPE_SEGMENT: ("RemoteLogSegmentMetadata.v2.avsc", "RemoteLogSegmentMetadata.v1.avsc"),
    TYPE_CLAIM: ("PartitionClaim.v1.avsc",),  # before restates_epoch
}
_FRAME = struct.Struct(">BB")


def schema_dir() -> Path:
    """The .avsc files: packaged in wheels as processor/schemas, in a checkout at ./schemas."""
    packaged = Path(str(resources.files("processor"))) / "schemas"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "schemas"


@cache
def parsed_schema(record_type: int) -> Any:
    text = (schema_dir() / _SCHEMA_FILES[record_type]).read_text(encoding="utf-8")
    return fastavro.parse_schema(json.loads(text), named_schemas={})


@cache
def _history_schema(name: str) -> Any:
    text = (schema_dir() / "history" / name).read_text(encoding="utf-8")
    return fastavro.parse_schema(json.loads(text), named_schemas={})


@cache
def _segment_metadata_decoder_enabled() -> bool:
    return segment_metadata_decoder.enabled(schema_dir())


def metadata_partition_for(tp: TopicPartition, num_partitions: int) -> int:
    """All records of one source partition go to one metadata partition, so their order holds."""
    return zlib.crc32(f"{tp.topic}/{tp.partition}".encode()) % num_partitions


def segment_key(segment_id: RemoteLogSegmentId) -> bytes:
    return _segment_key(segment_id.topic, segment_id.partition, segment_id.id.int)


@lru_cache(maxsize=65_536)
def _segment_key(topic: str, partition: int, id_int: int) -> bytes:
    """Cached (by plain values, hashed in C): a segment's records, their checks and the fold's
    bookkeeping all ask for it, and the UUID's text form costs more than the lookup."""
    return f"{topic}/{partition}/{uuid_text(id_int)}".encode()


def delete_key(segment_id: RemoteLogSegmentId) -> bytes:
    """The key of a segment's delete states (DELETE_SEGMENT_STARTED, DELETE_SEGMENT_FINISHED): apart
    from its copy states, so no delete record can be the one compaction keeps for the copy's key."""
    return _delete_key(segment_id.topic, segment_id.partition, segment_id.id.int)


@lru_cache(maxsize=65_536)
def _delete_key(topic: str, partition: int, id_int: int) -> bytes:
    return _segment_key(topic, partition, id_int) + b"/" + DELETE_KEY_SUFFIX.encode()


def segment_record_key(record: RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate) -> bytes:
    """A segment record's own key: the delete key for delete states, else the segment key."""
    if record.state in _DELETE_STATES:
        return delete_key(record.segment_id)
    return segment_key(record.segment_id)


# DELETE_STATES as a tuple: ``in`` compares by identity first, where the frozenset hashes each state
# through Enum.__hash__, a Python call (every record asks)
_DELETE_STATES = tuple(DELETE_STATES)


def partition_key(tp: TopicPartition) -> bytes:
    return f"{tp.topic}/{tp.partition}".encode()


def log_start_offset_key(tp: TopicPartition) -> bytes:
    """Its own key, so compaction keeps the latest start offset apart from segment and partition
    records (no segment UUID can equal the suffix)."""
    return f"{tp.topic}/{tp.partition}/{LOG_START_OFFSET_KEY_SUFFIX}".encode()


def claim_key(claim: PartitionClaim) -> bytes:
    """One key per claim: compaction keeps every claim, which the fold needs to judge old records."""
    tp = claim.topic_partition
    return f"{tp.topic}/{tp.partition}/{CLAIM_KEY_PART}/{claim.claim_id}".encode()


def _id_to_avro(sid: RemoteLogSegmentId) -> dict[str, Any]:
    return {"topic": sid.topic, "topic_id": sid.topic_id, "partition": sid.partition, "id": str(sid.id)}


def _id_from_avro(d: dict[str, Any]) -> RemoteLogSegmentId:
    raw = d["id"]
    return RemoteLogSegmentId(
        d["topic"], d["partition"], raw if isinstance(raw, uuid.UUID) else uuid.UUID(raw), d["topic_id"]
    )


@cache
def schema_fields(record_type: int) -> tuple[str, ...]:
    """The field names of a record type's schema, in order: the one list of a record's fields (the
    model, the codec, the fast reader and the Spark columns follow it; a test keeps the model equal)."""
    text = (schema_dir() / _SCHEMA_FILES[record_type]).read_text(encoding="utf-8")
    return tuple(f["name"] for f in json.loads(text)["fields"])


_SEGMENT_STATES = {s.value: s for s in SegmentState}
_PARTITION_STATES = {s.value: s for s in PartitionDeleteState}


# Segment fields whose Avro form is not the model's value as it is.
_SEGMENT_TO_AVRO: dict[str, Any] = {
    "segment_id": _id_to_avro,
    "segment_leader_epochs": lambda epochs: [{"epoch": e, "start_offset": o} for e, o in epochs],
    "state": lambda state: state.value,
    "replaces_state": lambda state: None if state is None else state.value,
    "supersedes": lambda ids: [str(i) for i in ids],
}
_SEGMENT_FROM_AVRO: dict[str, Any] = {
    "segment_id": _id_from_avro,
    "segment_leader_epochs": lambda epochs: tuple((e["epoch"], e["start_offset"]) for e in epochs),
    "state": lambda name: _SEGMENT_STATES[name],
    "replaces_state": lambda name: None if name is None else _SEGMENT_STATES[name],
    "supersedes": lambda ids: tuple(i if isinstance(i, uuid.UUID) else uuid.UUID(i) for i in ids),
}


def _to_avro(record: MetadataRecord) -> tuple[int, dict[str, Any]]:
    if isinstance(record, RemoteLogSegmentMetadata):
        plain = _identity
        return TYPE_SEGMENT, {
            name: _SEGMENT_TO_AVRO.get(name, plain)(getattr(record, name))
            for name in schema_fields(TYPE_SEGMENT)
        }
    if isinstance(record, RemoteLogSegmentMetadataUpdate):
        return TYPE_UPDATE, {
            "segment_id": _id_to_avro(record.segment_id),
            "event_timestamp_ms": record.event_timestamp_ms,
            "writer_id": record.writer_id,
            "writer_epoch": record.writer_epoch,
            "state": record.state.value,
            "custom_metadata": record.custom_metadata,
        }
    if isinstance(record, PartitionClaim):
        return TYPE_CLAIM, {
            "topic": record.topic_partition.topic,
            "topic_id": record.topic_id,
            "partition": record.topic_partition.partition,
            "claim_id": str(record.claim_id),
            "kind": record.kind.value,
            "writer_id": record.writer_id,
            "event_timestamp_ms": record.event_timestamp_ms,
            "released_epoch": record.released_epoch,
            "restates_epoch": record.restates_epoch,
        }
    if isinstance(record, RemoteLogStartOffset):
        return TYPE_LOG_START_OFFSET, {
            "topic": record.topic_partition.topic,
            "topic_id": record.topic_id,
            "partition": record.topic_partition.partition,
            "start_offset": record.start_offset,
            "event_timestamp_ms": record.event_timestamp_ms,
            "writer_id": record.writer_id,
            "writer_epoch": record.writer_epoch,
        }
    return TYPE_PARTITION_DELETE, {
        "topic": record.topic_partition.topic,
        "topic_id": record.topic_id,
        "partition": record.topic_partition.partition,
        "state": record.state.value,
        "event_timestamp_ms": record.event_timestamp_ms,
        "writer_id": record.writer_id,
        "writer_epoch": record.writer_epoch,
    }


def _identity(value: Any) -> Any:
    return value


def _from_avro(record_type: int, d: dict[str, Any]) -> MetadataRecord:
    if record_type == TYPE_SEGMENT:
        return RemoteLogSegmentMetadata(
            **{name: _SEGMENT_FROM_AVRO.get(name, _identity)(d[name]) for name in schema_fields(TYPE_SEGMENT)}
        )
    if record_type == TYPE_UPDATE:
        return RemoteLogSegmentMetadataUpdate(
            segment_id=_id_from_avro(d["segment_id"]),
            event_timestamp_ms=d["event_timestamp_ms"],
            writer_id=d["writer_id"],
            writer_epoch=d["writer_epoch"],
            state=_SEGMENT_STATES[d["state"]],
            custom_metadata=d["custom_metadata"],
        )
    if record_type == TYPE_CLAIM:
        raw = d["claim_id"]
        return PartitionClaim(
            topic_partition=TopicPartition(d["topic"], d["partition"]),
            claim_id=raw if isinstance(raw, uuid.UUID) else uuid.UUID(raw),
            kind=ClaimKind(d["kind"]),
            writer_id=d["writer_id"],
            event_timestamp_ms=d["event_timestamp_ms"],
            topic_id=d["topic_id"],
            released_epoch=d["released_epoch"],
            restates_epoch=d["restates_epoch"],
        )
    if record_type == TYPE_LOG_START_OFFSET:
        return RemoteLogStartOffset(
            topic_partition=TopicPartition(d["topic"], d["partition"]),
            start_offset=d["start_offset"],
            event_timestamp_ms=d["event_timestamp_ms"],
            writer_id=d["writer_id"],
            writer_epoch=d["writer_epoch"],
            topic_id=d["topic_id"],
        )
    return RemotePartitionDeleteMetadata(
        topic_partition=TopicPartition(d["topic"], d["partition"]),
        state=_PARTITION_STATES[d["state"]],
        event_timestamp_ms=d["event_timestamp_ms"],
        writer_id=d["writer_id"],
        topic_id=d["topic_id"],
        writer_epoch=d["writer_epoch"],
    )


def record_key(record: MetadataRecord) -> bytes:
    if isinstance(record, RemotePartitionDeleteMetadata):
        return partition_key(record.topic_partition)
    if isinstance(record, RemoteLogStartOffset):
        return log_start_offset_key(record.topic_partition)
    if isinstance(record, PartitionClaim):
        return claim_key(record)
    return segment_record_key(record)


def encode_value(record: MetadataRecord) -> bytes:
    record_type, body = _to_avro(record)
    out = io.BytesIO()
    out.write(_FRAME.pack(FRAMING_VERSION, record_type))
    fastavro.schemaless_writer(out, parsed_schema(record_type), body)
    return out.getvalue()


def decode_message(key: bytes | None, value: bytes | None) -> MetadataRecord:
    """Decode one message of the metadata topic and check it lies within the sanity bounds, its key
    included (:mod:`processor.metadata.validation`); anything else raises FormatError."""
    return _checked(key, _decode_unchecked(value))


# A consumed batch with at least this many plain segment records is read by the compiled batch
# reader (segment_batch_decoder.read_segments): it pays numba's import and compilation (~1-3 s,
# once a process) only where a process folds that many records at once (a follower catching up, a
# CLI call folding a whole metadata topic), not for a handful.
BATCH_DECODE_MIN = 2_000


def decode_messages(
    messages: Sequence[tuple[bytes | None, bytes | None]],
) -> list[MetadataRecord | FormatError | None]:
    """:func:`decode_message` of each (key, value) of a consumed batch, in order: the record, the
    FormatError it raises (returned, not raised: one bad record does not stop the others), or None
    for a tombstone (``value`` None). The same records and errors as one message at a time; a
    batch's plain segment records are read in one compiled walk (see ``BATCH_DECODE_MIN``)."""
    fast: list[MetadataRecord | None] | None = None
    if len(messages) >= BATCH_DECODE_MIN and _segment_metadata_decoder_enabled():
        plain = [
            i
            for i, (_key, value) in enumerate(messages)
            if type(value) is bytes and value[:2] == _PLAIN_SEGMENT_FRAME
        ]
        if len(plain) >= BATCH_DECODE_MIN:
            values = [value for i in plain if (value := messages[i][1]) is not None]
            fast = [None] * len(messages)
            for i, segment in zip(plain, segment_batch_decoder.read_segments(values), strict=True):
                fast[i] = segment
    out: list[MetadataRecord | FormatError | None] = []
    append = out.append
    segment_type = RemoteLogSegmentMetadata
    known_records = fast if fast is not None else [None] * len(messages)
    for (key, value), known in zip(messages, known_records, strict=True):
        try:
            if value is None:
                append(None)
            elif known is None:
                append(decode_message(key, value))
            elif type(known) is segment_type:
                append(_checked_segment(key, known))
            else:
                append(_checked(key, known))
        except FormatError as exc:
            append(exc)
    return out


def _checked_segment(key: bytes | None, record: RemoteLogSegmentMetadata) -> MetadataRecord:
    """:func:`_checked` of a RemoteLogSegmentMetadata (the batch's common record), its key built
    as :func:`segment_record_key` builds it, with two calls less."""
    check_segment(record)
    sid = record.segment_id
    if record.state in _DELETE_STATES:
        expected = _delete_key(sid.topic, sid.partition, sid.id.int)
    else:
        expected = _segment_key(sid.topic, sid.partition, sid.id.int)
    if key != expected:
        return _checked(key, record)  # the rules for another key (an earlier version's), or the error
    return record


_PLAIN_SEGMENT_FRAME = bytes((FRAMING_VERSION, TYPE_SEGMENT))


def _checked(key: bytes | None, decoded: MetadataRecord) -> MetadataRecord:
    """``decoded`` if it lies within the bounds and ``key`` is its own key, else FormatError."""
    record = check_record(decoded)
    expected = segment_record_key(record) if type(record) is RemoteLogSegmentMetadata else record_key(record)
    if key != expected:
        if (
            isinstance(record, RemoteLogSegmentMetadata | RemoteLogSegmentMetadataUpdate)
            and record.state in _DELETE_STATES
            and getattr(record, "replaces_state", None) is None
            and key == segment_key(record.segment_id)
        ):
            return record  # a delete state under the segment key: written by an earlier version
        check_key(key, record, expected)  # raises, naming both keys
    return record


def decode_value(value: bytes | None) -> MetadataRecord:
    """Decode one metadata topic value and check its bounds; anything malformed or out of bounds
    raises FormatError."""
    return check_record(_decode_unchecked(value))


def _decode_unchecked(value: bytes | None) -> MetadataRecord:
    if value is None or len(value) < _FRAME.size:
        raise FormatError("metadata record is empty or shorter than its framing")
    version, record_type = _FRAME.unpack_from(value, 0)
    if version != FRAMING_VERSION:
        raise FormatError(f"unsupported metadata framing version {version}")
    if record_type not in _SCHEMA_FILES:
        raise FormatError(f"unknown metadata record type {record_type}")
    if record_type == TYPE_SEGMENT and type(value) is bytes and _segment_metadata_decoder_enabled():
        fast = segment_metadata_decoder.read_segment_metadata(value, _FRAME.size)  # the hot path
        if fast is not None:
            return fast
    return decode_body_with_fastavro(value, record_type)


def decode_body_with_fastavro(value: bytes, record_type: int) -> MetadataRecord:
    """The general decoder of a framed value (any encoding the schema allows, the current schema or
    an earlier one in schemas/history/); FormatError if none reads it."""
    try:
        return _read_body(value, record_type, parsed_schema(record_type), None)
    except FormatError as current_error:
        for name in _SCHEMA_HISTORY.get(record_type, ()):
            try:
                return _read_body(value, record_type, _history_schema(name), parsed_schema(record_type))
            except FormatError:
                continue
        raise current_error from None


def _read_body(value: bytes, record_type: int, writer: Any, reader: Any) -> MetadataRecord:
    stream = io.BytesIO(value)
    stream.seek(_FRAME.size)
    try:
        body = fastavro.schemaless_reader(stream, writer, reader)
        if stream.tell() != len(value):
            raise FormatError(f"metadata record has {len(value) - stream.tell()} trailing bytes")
        return _from_avro(record_type, body)  # type: ignore[arg-type]
    except FormatError:
        raise
    except Exception as exc:  # fastavro raises many types on garbage: EOFError, ValueError, IndexError...
        raise FormatError(f"metadata record does not decode: {type(exc).__name__}: {exc}") from exc
