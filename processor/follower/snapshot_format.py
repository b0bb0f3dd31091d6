"""The snapshot format: one metadata partition's folded state, as the follower cache holds it. Pure.

A snapshot is the cache's own keys and values (the layout of :mod:`processor.follower.cache_keys`)
for every source partition of one metadata partition, plus the offset the fold reached there. A
reader bulk-loads it and folds the topic from that offset on: KRaft's snapshot plus the log's tail.
The state is the fold's, key for key, so a reader from a snapshot and its tail holds what a reader of
the whole topic holds (``tests/unit/test_snapshot_model.py`` compares them at every step).

The keys and values are carried as a RocksDB table file (an SST, written by RocksDB's
SstFileWriter, keys sorted), so that loading one is RocksDB's file ingestion: no put per key and
no decoding in Python (a per-entry format cost ~6 us an entry to decode and load; an SST is read at
the disk's speed). This module checks everything around it; what the table holds is checked when it
is loaded (:mod:`processor.follower.snapshots`: only the fold's key prefixes, only partitions of
this metadata partition), and RocksDB checks the table's own block checksums as it reads it.

Byte layout, version 1 (integers big-endian)::

    header
      magic               4  b"KTMS"
      version             u16 = 1
      cache_layout        u16   cache_keys.CACHE_VERSION of the keys inside (another: not loaded)
      metadata_partition  u32
      metadata_partitions u32   the metadata topic's partition count (it maps source partitions)
      next_offset         i64   the first offset not folded in: the tail starts here
      last_offset         i64   the offset of the last record folded in (-1: none)
      last_record_crc     u32   CRC-32C of that record's [key_len i32][key][value_len i32][value]
                                (-1 for a missing key or a tombstone's value)
      last_timestamp_ms   i64   that record's timestamp (-1: none)
      written_ms          i64   when the snapshot was taken
      entries             u64   keys in the table
      payload_len         u64   bytes of the table (0: no keys)
      payload_crc         u32   CRC-32C of the table's bytes
      origin_len u16, origin utf-8     the metadata topic: ``name/topic id``
      tp_count u32, then tp_count times: topic_len u16, topic utf-8, partition u32
                                the source partitions whose state is inside
      header_crc          u32   CRC-32C of every header byte before it
    payload               payload_len bytes: the SST file
    trailer
      magic               4  b"KTME"
      header_crc          u32   the header's, again (a trailer of another snapshot does not fit)
      trailer_crc         u32   CRC-32C of the 8 trailer bytes before it

A snapshot that fails any check (magic, version, a CRC, a length, a truncated object, bytes after
the trailer) is refused as a whole with :class:`SnapshotFormatError`; readers then use an older one
or the topic.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.segment.checksums import crc32c_of

MAGIC = b"KTMS"
TRAILER_MAGIC = b"KTME"
VERSION = 1
MAX_PARTITIONS = 1 << 20  # source partitions one snapshot may name (bounded header)
MAX_PAYLOAD_BYTES = 1 << 40

_FIXED = struct.Struct(">4sHHIIqqIqqQQI")  # magic .. payload_crc
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_I32 = struct.Struct(">i")
_TRAILER = struct.Struct(">4sI")
TRAILER_LEN = _TRAILER.size + 4


class SnapshotFormatError(FormatError):
    """A snapshot that fails a check of its format: never loaded, in part or whole."""


@dataclass(frozen=True)
class SnapshotHeader:
    metadata_partition: int
    metadata_partitions: int
    next_offset: int
    origin: str
    partitions: tuple[TopicPartition, ...]
    last_offset: int = -1
    last_record_crc: int = 0
    last_timestamp_ms: int = -1
    written_ms: int = 0
    cache_layout: int = 0
    entries: int = 0
    payload_len: int = 0
    payload_crc: int = 0
    version: int = VERSION


def record_crc(key: bytes | None, value: bytes | None) -> int:
    """What ``last_record_crc`` holds for a record: its key and value, nulls told from empties."""
    parts = bytearray()
    for part in (key, value):
        if part is None:
            parts += _I32.pack(-1)
        else:
            parts += _I32.pack(len(part)) + part
    return crc32c_of(parts)


def encode_header(header: SnapshotHeader) -> bytes:
    origin = header.origin.encode()
    out = bytearray(
        _FIXED.pack(
            MAGIC,
            VERSION,
            header.cache_layout,
            header.metadata_partition,
            header.metadata_partitions,
            header.next_offset,
            header.last_offset,
            header.last_record_crc,
            header.last_timestamp_ms,
            header.written_ms,
            header.entries,
            header.payload_len,
            header.payload_crc,
        )
    )
    out += _U16.pack(len(origin)) + origin
    out += _U32.pack(len(header.partitions))
    for tp in header.partitions:
        topic = tp.topic.encode()
        out += _U16.pack(len(topic)) + topic + _U32.pack(tp.partition)
    out += _U32.pack(crc32c_of(out))
    return bytes(out)


def encode_trailer(header_bytes: bytes) -> bytes:
    trailer = _TRAILER.pack(TRAILER_MAGIC, _U32.unpack(header_bytes[-4:])[0])
    return trailer + _U32.pack(crc32c_of(trailer))


def encode_snapshot(header: SnapshotHeader, payload: bytes) -> bytes:
    """A whole snapshot in memory (tests); ``payload_len`` and ``payload_crc`` are set from it."""
    head = encode_header(replace(header, payload_len=len(payload), payload_crc=crc32c_of(payload)))
    return head + payload + encode_trailer(head)


class ByteSource:
    """Where a decoder reads from: ``read(n)`` returns exactly ``n`` bytes or fewer at the end."""

    def read(self, n: int) -> bytes:  # pragma: no cover - protocol
        raise NotImplementedError


class BytesSource(ByteSource):
    def __init__(self, data: bytes) -> None:
        self._data = memoryview(data)
        self._at = 0

    def read(self, n: int) -> bytes:
        out = bytes(self._data[self._at : self._at + n])
        self._at += len(out)
        return out


def _exactly(source: ByteSource, n: int, what: str) -> bytes:
    data = source.read(n)
    if len(data) != n:
        raise SnapshotFormatError(f"snapshot truncated in its {what} ({len(data)} of {n} bytes)")
    return data


def decode_header(source: ByteSource) -> tuple[SnapshotHeader, bytes]:
    """The header, checked, and its bytes (the trailer names its CRC)."""
    fixed = _exactly(source, _FIXED.size, "header")
    (magic, version, layout, mp, mps, next_offset, last_offset, last_crc, last_ts, written, entries,
     payload_len, payload_crc) = _FIXED.unpack(fixed)  # fmt: skip
    if magic != MAGIC:
        raise SnapshotFormatError(f"not a metadata snapshot (magic {magic!r})")
    if version != VERSION:
        raise SnapshotFormatError(f"snapshot format version {version} is not readable here (reads {VERSION})")
    raw = bytearray(fixed)
    origin_len = _exactly(source, 2, "header")
    origin_raw = _exactly(source, _U16.unpack(origin_len)[0], "header")
    count_raw = _exactly(source, 4, "header")
    raw += origin_len + origin_raw + count_raw
    count = _U32.unpack(count_raw)[0]
    if count > MAX_PARTITIONS:
        raise SnapshotFormatError(f"snapshot header lists {count} partitions: too many")
    partitions: list[TopicPartition] = []
    for _ in range(count):
        tlen = _exactly(source, 2, "header")
        topic = _exactly(source, _U16.unpack(tlen)[0], "header")
        part = _exactly(source, 4, "header")
        raw += tlen + topic + part
        try:
            partitions.append(TopicPartition(topic.decode(), _U32.unpack(part)[0]))
        except UnicodeDecodeError:
            raise SnapshotFormatError("snapshot header: a topic name is not UTF-8") from None
    crc_raw = _exactly(source, 4, "header")
    if _U32.unpack(crc_raw)[0] != crc32c_of(raw):
        raise SnapshotFormatError("snapshot header CRC mismatch")
    raw += crc_raw
    if not 0 <= next_offset < 1 << 62 or last_offset >= next_offset or last_offset < -1:
        raise SnapshotFormatError(f"snapshot offsets out of bounds (next {next_offset}, last {last_offset})")
    if mp >= mps:
        raise SnapshotFormatError(f"snapshot of metadata partition {mp} of {mps}")
    if payload_len > MAX_PAYLOAD_BYTES or (payload_len == 0) != (entries == 0):
        raise SnapshotFormatError(f"snapshot payload of {payload_len} bytes for {entries} entries")
    if len(set(partitions)) != len(partitions):
        raise SnapshotFormatError("snapshot header lists a partition twice")
    try:
        origin = origin_raw.decode()
    except UnicodeDecodeError:
        raise SnapshotFormatError("snapshot header: the origin is not UTF-8") from None
    header = SnapshotHeader(
        metadata_partition=mp,
        metadata_partitions=mps,
        next_offset=next_offset,
        origin=origin,
        partitions=tuple(partitions),
        last_offset=last_offset,
        last_record_crc=last_crc,
        last_timestamp_ms=last_ts,
        written_ms=written,
        cache_layout=layout,
        entries=entries,
        payload_len=payload_len,
        payload_crc=payload_crc,
        version=version,
    )
    return header, bytes(raw)


def check_trailer(source: ByteSource, header_bytes: bytes) -> None:
    """The trailer after the payload, and nothing after it."""
    trailer = _exactly(source, TRAILER_LEN, "trailer")
    magic, header_crc = _TRAILER.unpack(trailer[: _TRAILER.size])
    if magic != TRAILER_MAGIC or _U32.unpack(trailer[-4:])[0] != crc32c_of(trailer[: _TRAILER.size]):
        raise SnapshotFormatError("snapshot trailer damaged")
    if header_crc != _U32.unpack(header_bytes[-4:])[0]:
        raise SnapshotFormatError("snapshot trailer of another snapshot")
    if source.read(1):
        raise SnapshotFormatError("snapshot has bytes after its trailer")


def decode_snapshot(data: bytes) -> tuple[SnapshotHeader, bytes]:
    """A whole snapshot from memory, checked (tests): its header and its payload."""
    source = BytesSource(data)
    header, raw = decode_header(source)
    payload = _exactly(source, header.payload_len, "payload")
    if crc32c_of(payload) != header.payload_crc:
        raise SnapshotFormatError("snapshot payload CRC mismatch")
    check_trailer(source, raw)
    return header, payload
