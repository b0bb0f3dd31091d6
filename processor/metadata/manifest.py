"""Segment manifests: each archived segment's full metadata, in the bucket next to its objects. Pure.

The metadata topic is the only other place a segment's metadata lives; a manifest makes the bucket
self-describing, so the metadata topic can be rebuilt from a listing and one small read per
segment. It is written once the segment's COPY_SEGMENT_FINISHED record was accepted, and deleted
before the segment's other objects, so a rebuild never brings back a segment that was deleted.

Object key: the data object's key with ``-manifest`` appended (next to ``-index``)::

    {prefix}/{topic}-{topic_id}/{partition}/{start_offset:020d}-{segment_uuid}-e{writer_epoch}.log-manifest

Byte layout (format version 1, big-endian)::

     0   4  magic       "KTSM" (0x4B 0x54 0x53 0x4D)
     4   1  version     u8 = 1
     5   1  flags       u8 = 0 (reserved; a reader rejects other values)
     6   2  reserved    u16 = 0
     8  16  claim_id    the UUID of the partition claim the segment was written under (16 zero
                        bytes: written by a version without claims)
    24   4  body_len    u32
    28   n  body        the segment's COPY_SEGMENT_FINISHED record exactly as on the metadata topic:
                        [framing_version u8 = 1][record_type u8 = 0][Avro RemoteLogSegmentMetadata]
                        (schemas/RemoteLogSegmentMetadata.avsc): topic, topic id, partition, segment
                        id, offsets, timestamps, writer id and epoch, sizes, index CRC, object keys
    ..   4  crc32       zlib CRC-32 of every byte before it

The body goes through the metadata topic's codec, so every schema version the topic reads is read
here too, and a schema change needs no new manifest version.
"""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import dataclass

from processor.errors import FormatError
from processor.metadata.codec import decode_value, encode_value
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.segment.object_keys import MANIFEST_SUFFIX

MAGIC = b"KTSM"
VERSION = 1
_HEAD = struct.Struct(">4sBBH16sI")
_CRC = struct.Struct(">I")
_NO_CLAIM = bytes(16)


def manifest_key(data_object_key: str) -> str:
    return data_object_key + MANIFEST_SUFFIX


@dataclass(frozen=True, slots=True)
class SegmentManifest:
    segment: RemoteLogSegmentMetadata  # in state COPY_SEGMENT_FINISHED
    claim_id: uuid.UUID | None  # None: written before partition claims existed

    def __post_init__(self) -> None:
        if self.segment.state is not SegmentState.COPY_SEGMENT_FINISHED:
            raise ValueError(f"a manifest holds a COPY_SEGMENT_FINISHED record, not {self.segment.state}")


def encode_manifest(manifest: SegmentManifest) -> bytes:
    body = encode_value(manifest.segment)
    claim = _NO_CLAIM if manifest.claim_id is None else manifest.claim_id.bytes
    out = bytearray(_HEAD.pack(MAGIC, VERSION, 0, 0, claim, len(body)))
    out += body
    out += _CRC.pack(zlib.crc32(out))
    return bytes(out)


def decode_manifest(data: bytes | bytearray | memoryview, *, where: str = "manifest") -> SegmentManifest:
    view = memoryview(data)
    if len(view) < _HEAD.size + _CRC.size:
        raise FormatError(f"{where}: {len(view)} bytes is too short for a segment manifest")
    magic, version, flags, _reserved, claim, body_len = _HEAD.unpack_from(view)
    if magic != MAGIC:
        raise FormatError(f"{where}: bad magic {bytes(magic)!r}, expected {MAGIC!r}")
    if version != VERSION:
        raise FormatError(f"{where}: manifest version {version} is not supported (this reader knows 1)")
    if flags != 0:
        raise FormatError(f"{where}: unknown flags {flags:#x}")
    if _HEAD.size + body_len + _CRC.size != len(view):
        raise FormatError(f"{where}: body length {body_len} does not match the object's {len(view)} bytes")
    (crc,) = _CRC.unpack_from(view, len(view) - _CRC.size)
    if zlib.crc32(view[: len(view) - _CRC.size]) != crc:
        raise FormatError(f"{where}: CRC-32 mismatch")
    record = decode_value(bytes(view[_HEAD.size : _HEAD.size + body_len]))
    if (
        not isinstance(record, RemoteLogSegmentMetadata)
        or record.state is not SegmentState.COPY_SEGMENT_FINISHED
    ):
        raise FormatError(f"{where}: the body is not a COPY_SEGMENT_FINISHED segment record")
    return SegmentManifest(record, None if claim == _NO_CLAIM else uuid.UUID(bytes=claim))
