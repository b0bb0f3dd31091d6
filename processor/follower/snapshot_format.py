"""The snapshot format: one metadata partition's folded state, as the follower cache holds it. Pure.

A snapshot is the cache's own keys and values (the layout of :mod:`processor.follower.cache_keys`)
for every source partition of one metadata partition, plus the offset the fold reached there. A
reader bulk-loads it and folds the topic from that offset on: KRaft's snapshot plus the log's tail.
The state is the fold's, key for key, so a reader from a snapshot and its tail holds what a reader of
the whole topic holds (``tests/unit/test_snapshot_model.py`` compares them at every step).

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
      origin_len u16, origin utf-8     the metadata topic: ``name/topic id``
      tp_count u32, then tp_count times: topic_len u16, topic utf-8, partition u32
      header_crc          u32   CRC-32C of every header byte before it
    blocks, each
      codec               u8    0 none, 1 zstd (one frame)
      entry_count         u32
      raw_len             u32   the payload's length once decoded
      stored_len          u32
      crc                 u32   CRC-32C of the stored payload
      payload             entry_count times: tp_index u32, key_len u32, key, value_len u32, value
    trailer
      magic               4  b"KTME"
      block_count         u32
      entry_count         u64
      chain_crc           u32   CRC-32C over header_crc and every block's crc, in order
      trailer_crc         u32   CRC-32C of the trailer bytes before it

Keys are strictly increasing across the whole snapshot (RocksDB's bulk load needs them sorted, and
a key twice is a corrupt snapshot). The consumed-offsets key (``C``) is not inside: ``next_offset``
is. A snapshot that fails any check (magic, version, a CRC, counts, order, a truncated object) is
refused as a whole with :class:`SnapshotFormatError`; readers then use an older one or the topic.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

import cramjam

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.segment.checksums import crc32c_of

MAGIC = b"KTMS"
TRAILER_MAGIC = b"KTME"
VERSION = 1
CODEC_NONE = 0
CODEC_ZSTD = 1
BLOCK_RAW_BYTES = 1 << 20  # entries per block, before compression
MAX_BLOCK_BYTES = 64 << 20  # a block claiming more is corrupt (bounded memory for readers)
MAX_HEADER_BYTES = 64 << 20
MAX_KEY_BYTES = 1 << 16
MAX_VALUE_BYTES = 16 << 20
ZSTD_LEVEL = 3

_FIXED = struct.Struct(">4sHHIIqqIqq")  # magic .. written_ms
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_BLOCK = struct.Struct(">BIIII")  # codec, entry_count, raw_len, stored_len, crc
_ENTRY_HEAD = struct.Struct(">II")  # tp_index, key_len
_TRAILER = struct.Struct(">4sIQI")  # magic, block_count, entry_count, chain_crc
_I32 = struct.Struct(">i")


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
        )
    )
    out += _U16.pack(len(origin)) + origin
    out += _U32.pack(len(header.partitions))
    for tp in header.partitions:
        topic = tp.topic.encode()
        out += _U16.pack(len(topic)) + topic + _U32.pack(tp.partition)
    out += _U32.pack(crc32c_of(out))
    return bytes(out)


class SnapshotEncoder:
    """Builds a snapshot piece by piece (bounded memory: a block at a time). ``add`` entries in key
    order, then ``finish``; every piece returned is to be written in order."""

    def __init__(self, header: SnapshotHeader, compress: bool = True) -> None:
        self.header = header
        self._tp_index = {tp: i for i, tp in enumerate(header.partitions)}
        if len(self._tp_index) != len(header.partitions):
            raise ValueError("a partition is listed twice in the snapshot header")
        self._compress = compress
        head = encode_header(header)
        self._chain = bytearray(head[-4:])
        self._pending: list[bytes] = [head]
        self._block = bytearray()
        self._block_entries = 0
        self._blocks = 0
        self.entries = 0
        self._last_key: bytes | None = None

    def add(self, tp: TopicPartition, key: bytes, value: bytes) -> list[bytes]:
        if self._last_key is not None and key <= self._last_key:
            raise ValueError(f"snapshot keys out of order: {key!r} after {self._last_key!r}")
        if len(key) > MAX_KEY_BYTES or len(value) > MAX_VALUE_BYTES:
            raise ValueError(f"snapshot entry too large: key {len(key)} B, value {len(value)} B")
        self._last_key = key
        self._block += _ENTRY_HEAD.pack(self._tp_index[tp], len(key)) + key + _U32.pack(len(value)) + value
        self._block_entries += 1
        self.entries += 1
        if len(self._block) >= BLOCK_RAW_BYTES:
            self._seal()
        return self.take()

    def _seal(self) -> None:
        if not self._block_entries:
            return
        raw = bytes(self._block)
        codec, stored = CODEC_NONE, raw
        if self._compress:
            packed = bytes(cramjam.zstd.compress(raw, ZSTD_LEVEL))
            if len(packed) < len(raw):
                codec, stored = CODEC_ZSTD, packed
        crc = crc32c_of(stored)
        self._pending.append(_BLOCK.pack(codec, self._block_entries, len(raw), len(stored), crc) + stored)
        self._chain += _U32.pack(crc)
        self._blocks += 1
        self._block = bytearray()
        self._block_entries = 0

    def take(self) -> list[bytes]:
        out, self._pending = self._pending, []
        return out

    def finish(self) -> list[bytes]:
        self._seal()
        trailer = _TRAILER.pack(TRAILER_MAGIC, self._blocks, self.entries, crc32c_of(self._chain))
        self._pending.append(trailer + _U32.pack(crc32c_of(trailer)))
        return self.take()


def encode_snapshot(header: SnapshotHeader, entries: list[tuple[TopicPartition, bytes, bytes]]) -> bytes:
    """A whole snapshot in memory (tests and small partitions)."""
    encoder = SnapshotEncoder(header)
    pieces = encoder.take()
    for tp, key, value in entries:
        pieces += encoder.add(tp, key, value)
    pieces += encoder.finish()
    return b"".join(pieces)


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


def decode_header(source: ByteSource) -> SnapshotHeader:
    fixed = _exactly(source, _FIXED.size, "header")
    magic, version, layout, mp, mps, next_offset, last_offset, last_crc, last_ts, written = _FIXED.unpack(
        fixed
    )
    if magic != MAGIC:
        raise SnapshotFormatError(f"not a metadata snapshot (magic {magic!r})")
    if version != VERSION:
        raise SnapshotFormatError(f"snapshot format version {version} is not readable here (reads {VERSION})")
    raw = bytearray(fixed)
    origin_len = _exactly(source, 2, "header")
    raw += origin_len
    origin_raw = _exactly(source, _U16.unpack(origin_len)[0], "header")
    raw += origin_raw
    count_raw = _exactly(source, 4, "header")
    raw += count_raw
    count = _U32.unpack(count_raw)[0]
    if count * 6 > MAX_HEADER_BYTES:
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
    crc = _U32.unpack(_exactly(source, 4, "header"))[0]
    if crc != crc32c_of(raw):
        raise SnapshotFormatError("snapshot header CRC mismatch")
    if not 0 <= next_offset < 1 << 62 or last_offset >= next_offset or last_offset < -1:
        raise SnapshotFormatError(f"snapshot offsets out of bounds (next {next_offset}, last {last_offset})")
    if mp >= mps:
        raise SnapshotFormatError(f"snapshot of metadata partition {mp} of {mps}")
    try:
        origin = origin_raw.decode()
    except UnicodeDecodeError:
        raise SnapshotFormatError("snapshot header: the origin is not UTF-8") from None
    return SnapshotHeader(
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
        version=version,
    )


@dataclass
class SnapshotReader:
    """Decodes a snapshot after its header: ``entries()`` yields ``(tp, key, value)`` in key order,
    checking every block as it comes and the trailer at the end. A failure raises
    :class:`SnapshotFormatError` (entries already yielded must then be thrown away)."""

    source: ByteSource
    header: SnapshotHeader
    header_crc: int
    blocks: int = 0
    count: int = 0
    _chain: bytearray = field(default_factory=bytearray)

    @classmethod
    def open(cls, source: ByteSource) -> SnapshotReader:
        header = decode_header(source)
        return cls(source, header, crc32c_of(encode_header(header)[:-4]))

    def entries(self) -> Iterator[tuple[TopicPartition, bytes, bytes]]:
        self._chain = bytearray(_U32.pack(self.header_crc))
        partitions = self.header.partitions
        last_key = b""
        first = True
        while True:
            tag = _exactly(self.source, 4, "blocks or trailer")
            if tag == TRAILER_MAGIC:
                break
            head = tag + _exactly(self.source, _BLOCK.size - 4, "block header")
            codec, count, raw_len, stored_len, crc = _BLOCK.unpack(head)
            if codec not in (CODEC_NONE, CODEC_ZSTD):
                raise SnapshotFormatError(f"snapshot block {self.blocks}: unknown codec {codec}")
            if stored_len > MAX_BLOCK_BYTES or raw_len > MAX_BLOCK_BYTES:
                raise SnapshotFormatError(f"snapshot block {self.blocks}: {max(raw_len, stored_len)} B")
            stored = _exactly(self.source, stored_len, f"block {self.blocks}")
            if crc32c_of(stored) != crc:
                raise SnapshotFormatError(f"snapshot block {self.blocks}: CRC mismatch")
            payload = stored
            if codec == CODEC_ZSTD:
                # into a buffer of the stated size: a frame that would grow past it fails (bounded)
                out = bytearray(raw_len)
                try:
                    written = cramjam.zstd.decompress_into(stored, out)
                except Exception as exc:  # cramjam raises its own DecompressionError: bad bytes
                    raise SnapshotFormatError(f"snapshot block {self.blocks}: {exc}") from None
                payload = bytes(out) if written == raw_len else bytes(out[:written])
            if len(payload) != raw_len:
                raise SnapshotFormatError(f"snapshot block {self.blocks}: {len(payload)} B, not {raw_len}")
            view = memoryview(payload)
            at = 0
            for _ in range(count):
                if at + 8 > raw_len:
                    raise SnapshotFormatError(f"snapshot block {self.blocks}: entries overrun the block")
                index, key_len = _ENTRY_HEAD.unpack_from(view, at)
                at += 8
                key = bytes(view[at : at + key_len])
                at += key_len
                if at + 4 > raw_len or len(key) != key_len:
                    raise SnapshotFormatError(f"snapshot block {self.blocks}: entries overrun the block")
                (value_len,) = _U32.unpack_from(view, at)
                at += 4
                value = bytes(view[at : at + value_len])
                at += value_len
                if len(value) != value_len or index >= len(partitions):
                    raise SnapshotFormatError(f"snapshot block {self.blocks}: a malformed entry")
                if not first and key <= last_key:
                    raise SnapshotFormatError(f"snapshot block {self.blocks}: keys out of order")
                first = False
                last_key = key
                self.count += 1
                yield partitions[index], key, value
            if at != raw_len:
                raise SnapshotFormatError(f"snapshot block {self.blocks}: bytes after its last entry")
            self._chain += _U32.pack(crc)
            self.blocks += 1
        rest = _exactly(self.source, _TRAILER.size - 4 + 4, "trailer")
        trailer = TRAILER_MAGIC + rest[:-4]
        _magic, blocks, count, chain = _TRAILER.unpack(trailer)
        if crc32c_of(trailer) != _U32.unpack(rest[-4:])[0]:
            raise SnapshotFormatError("snapshot trailer CRC mismatch")
        if blocks != self.blocks or count != self.count or chain != crc32c_of(self._chain):
            raise SnapshotFormatError(
                f"snapshot trailer: {blocks} blocks and {count} entries, read {self.blocks} and {self.count}"
            )
        if self.source.read(1):
            raise SnapshotFormatError("snapshot has bytes after its trailer")


def decode_snapshot(data: bytes) -> tuple[SnapshotHeader, list[tuple[TopicPartition, bytes, bytes]]]:
    """A whole snapshot from memory, checked (tests and small partitions)."""
    reader = SnapshotReader.open(BytesSource(data))
    return reader.header, list(reader.entries())
