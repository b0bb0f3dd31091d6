"""Records of the restore progress topic: keys, framing and the Avro body. Pure (fastavro only).

The topic (default ``__processor_restore_progress``, ``cleanup.policy=compact``) lives on the
*target* cluster. Each restore transaction writes, for every source partition it restored records
of, one record in the same transaction as those records::

    key    UTF-8 "{restore_id}/{source_partition}/{sequence:012d}"
    value  [framing_version u8 = 1][record_type u8 = 0][Avro binary body, schemaless]
           body schema: schemas/RestoreProgress.avsc

Every transaction adds a new key, so compaction keeps the whole offset map (one chunk per
transaction in ``offset_map``); the record with the highest sequence holds the partition's position.
All records of one restore go to one partition of the progress topic (``crc32(restore_id) mod N``),
so one read of one partition recovers the restore. A reader rejects a value whose framing version
or record type it does not know, that does not decode, or that has trailing bytes; new fields are
added to the schema with defaults and keep the framing version.
"""

from __future__ import annotations

import io
import json
import re
import struct
import zlib
from dataclasses import dataclass
from functools import cache
from typing import Any

import fastavro

from processor.errors import ConfigError, FormatError
from processor.metadata.codec import schema_dir
from processor.restore import offset_map
from processor.restore.offset_map import OffsetMap

FRAMING_VERSION = 1
TYPE_PROGRESS = 0
SCHEMA_FILE = "RestoreProgress.avsc"
_FRAME = struct.Struct(">BB")
_RESTORE_ID = re.compile(r"[A-Za-z0-9._=-]{1,200}")
_KEY = re.compile(r"([A-Za-z0-9._=-]{1,200})/(\d+)/(\d{12})")


def validate_restore_id(restore_id: str) -> str:
    if not _RESTORE_ID.fullmatch(restore_id):
        raise ConfigError(
            f"invalid restore id {restore_id!r}: letters, digits, '.', '_', '=' and '-' only (1 to 200)"
        )
    return restore_id


@dataclass(frozen=True, slots=True)
class RestoreSource:
    """Where a restore reads from and what it was asked for: a rerun must ask the same."""

    bucket: str
    prefix: str
    topic: str
    topic_id: str | None
    target_topic: str
    range_from: str
    range_to: str
    partitioner: str


@dataclass(frozen=True, slots=True)
class RestoreProgress:
    restore_id: str
    source: RestoreSource
    source_partition: int
    target_partition: int
    sequence: int
    next_source_offset: int
    records_total: int
    bytes_total: int
    offset_map: OffsetMap
    written_at_ms: int

    def __post_init__(self) -> None:
        if self.sequence < 0 or self.records_total < 0 or self.bytes_total < 0:
            raise ValueError("sequence and totals are never negative")
        if (self.offset_map.source_partition, self.offset_map.target_partition) != (
            self.source_partition,
            self.target_partition,
        ):
            raise ValueError("the offset map chunk names other partitions than the record")
        if self.offset_map.covered_end != self.next_source_offset:
            raise ValueError("the offset map chunk must end at next_source_offset")


@cache
def _schema() -> Any:
    text = (schema_dir() / SCHEMA_FILE).read_text(encoding="utf-8")
    return fastavro.parse_schema(json.loads(text), named_schemas={})


def progress_partition(restore_id: str, partitions: int) -> int:
    """The progress topic partition holding every record of ``restore_id``."""
    return zlib.crc32(restore_id.encode()) % partitions


def progress_key(restore_id: str, source_partition: int, sequence: int) -> bytes:
    return f"{restore_id}/{source_partition}/{sequence:012d}".encode()


def parse_key(key: bytes) -> tuple[str, int, int] | None:
    """(restore_id, source_partition, sequence) of a progress key; None for anything else."""
    try:
        m = _KEY.fullmatch(key.decode())
    except UnicodeDecodeError:
        return None
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def encode_value(progress: RestoreProgress) -> bytes:
    s = progress.source
    body = {
        "restore_id": progress.restore_id,
        "source_bucket": s.bucket,
        "source_prefix": s.prefix,
        "source_topic": s.topic,
        "source_topic_id": s.topic_id,
        "source_partition": progress.source_partition,
        "target_topic": s.target_topic,
        "target_partition": progress.target_partition,
        "range_from": s.range_from,
        "range_to": s.range_to,
        "partitioner": s.partitioner,
        "sequence": progress.sequence,
        "next_source_offset": progress.next_source_offset,
        "records_total": progress.records_total,
        "bytes_total": progress.bytes_total,
        "offset_map": offset_map.encode(progress.offset_map),
        "written_at_ms": progress.written_at_ms,
    }
    out = io.BytesIO()
    out.write(_FRAME.pack(FRAMING_VERSION, TYPE_PROGRESS))
    fastavro.schemaless_writer(out, _schema(), body)
    return out.getvalue()


def decode_value(value: bytes | None, *, where: str = "restore progress record") -> RestoreProgress:
    if value is None or len(value) < _FRAME.size:
        raise FormatError(f"{where}: empty or shorter than its framing")
    version, record_type = _FRAME.unpack_from(value, 0)
    if version != FRAMING_VERSION:
        raise FormatError(f"{where}: unsupported framing version {version}")
    if record_type != TYPE_PROGRESS:
        raise FormatError(f"{where}: unknown record type {record_type}")
    stream = io.BytesIO(value)
    stream.seek(_FRAME.size)
    try:
        d: Any = fastavro.schemaless_reader(stream, _schema(), None)
    except Exception as exc:  # fastavro raises many types on garbage: EOFError, ValueError, ...
        raise FormatError(f"{where}: does not decode: {type(exc).__name__}: {exc}") from exc
    if stream.tell() != len(value):
        raise FormatError(f"{where}: {len(value) - stream.tell()} trailing bytes")
    chunk = offset_map.decode(d["offset_map"], where=f"{where}: offset_map")
    source = RestoreSource(
        d["source_bucket"],
        d["source_prefix"],
        d["source_topic"],
        d["source_topic_id"],
        d["target_topic"],
        d["range_from"],
        d["range_to"],
        d["partitioner"],
    )
    try:
        return RestoreProgress(
            d["restore_id"],
            source,
            d["source_partition"],
            d["target_partition"],
            d["sequence"],
            d["next_source_offset"],
            d["records_total"],
            d["bytes_total"],
            chunk,
            d["written_at_ms"],
        )
    except ValueError as exc:
        raise FormatError(f"{where}: {exc}") from None
