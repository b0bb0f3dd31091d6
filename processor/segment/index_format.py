"""The index object (``{data object key}-index``): where each block is, by offset and by time.

One small object, read whole with one ranged GET, tells a reader which byte range of the data
object holds a given offset or the first record at or after a given timestamp. Layout (format
version 1, big-endian)::

    -- PIP-76 block index header --
       0   4  index_magic          u32  0x3D1FB0BC
       4   4  index_len            u32  total length of this object, trailer included
       8   8  data_object_length   u64
      16   8  data_header_length   u64  128 (the block header length)
    -- index_per_ledger: exactly one "ledger", the segment's source partition --
      24   8  ledger_id            i64  source partition
      32   4  index_entry_count    u32  n = number of blocks
      36   4  ledger_metadata_len  u32  m
      40   m  ledger_metadata      see below
           n x block index         [entry_id i64][part_id u32][offset u64]
                                   first offset of the block, block number (0-based), byte position
    -- KIP-405 remote index entries, one per block, in block order --
           n x entry               [magic i16 = 0][length i16][crc i32]
                                   [firstOffset i64][lastOffset i64]
                                   [firstTimestamp i64][lastTimestamp i64]
                                   [dataLength i32][rdiLength i16][rdi]
               length          bytes of the whole entry
               crc             CRC-32 (zlib) of the bytes from firstOffset to the end of the entry
               firstTimestamp  smallest record timestamp in the block
               lastTimestamp   largest record timestamp in the block (what a time lookup needs:
                               the first record at or after T is in the first block whose largest
                               timestamp is >= T, as in Kafka's time index)
               dataLength      the block's length in bytes
               rdi             remote data identifier: [position u64], the block's byte position in
                               the data object (the object itself is the one this index names)
    -- trailer --
           4  index_crc32          u32  CRC-32 of every byte before it

    ledger_metadata (version 1):
           [format_version u16][segment_uuid 16 bytes][start_offset i64][end_offset i64]
           [record_count i64][max_timestamp i64][topic_len u16][topic utf-8]
"""

from __future__ import annotations

import bisect
import struct
import uuid
import zlib
from dataclasses import dataclass

from processor.errors import FormatError
from processor.segment.block_header import BLOCK_HEADER_LEN, BlockInfo

INDEX_MAGIC = 0x3D1FB0BC
INDEX_FORMAT_VERSION = 1
REMOTE_INDEX_MAGIC = 0

_HEAD = struct.Struct(">IIQQqII")  # magic, index_len, data_len, data_header_len, ledger, count, meta_len
_LEDGER_META = struct.Struct(">H16sqqqqH")
_BLOCK_INDEX = struct.Struct(">qIQ")
_RIE_HEAD = struct.Struct(">hhI")  # magic, length, crc (the int32 read as unsigned)
_RIE_BODY = struct.Struct(">qqqqihQ")  # first, last, first_ts, last_ts, data_len, rdi_len, rdi(position)
_RDI_LEN = 8
_TRAILER = struct.Struct(">I")
_RIE_LEN = _RIE_HEAD.size + _RIE_BODY.size


@dataclass(frozen=True, slots=True)
class SegmentIndex:
    """Decoded index object."""

    topic: str
    partition: int
    segment_id: uuid.UUID
    start_offset: int
    end_offset: int
    record_count: int
    max_timestamp: int
    data_object_length: int
    blocks: tuple[BlockInfo, ...]

    def block_for_offset(self, offset: int) -> int | None:
        """Number of the block holding ``offset`` or, inside a gap, the next record after it."""
        if offset > self.end_offset or not self.blocks:
            return None
        firsts = [b.first_offset for b in self.blocks]
        i = bisect.bisect_right(firsts, offset) - 1
        if i < 0:
            return 0
        if offset > self.blocks[i].last_offset:  # in a gap between blocks
            return i + 1 if i + 1 < len(self.blocks) else None
        return i

    def block_for_timestamp(self, timestamp: int) -> int | None:
        """Number of the first block that holds a record with timestamp >= ``timestamp``."""
        for i, block in enumerate(self.blocks):
            if block.max_timestamp >= timestamp:
                return i
        return None


def encode_index(
    *,
    topic: str,
    partition: int,
    segment_id: uuid.UUID,
    start_offset: int,
    end_offset: int,
    record_count: int,
    max_timestamp: int,
    data_object_length: int,
    blocks: list[BlockInfo],
) -> bytes:
    raw_topic = topic.encode("utf-8")
    meta = (
        _LEDGER_META.pack(
            INDEX_FORMAT_VERSION,
            segment_id.bytes,
            start_offset,
            end_offset,
            record_count,
            max_timestamp,
            len(raw_topic),
        )
        + raw_topic
    )
    parts: list[bytes] = []
    for number, block in enumerate(blocks):
        parts.append(_BLOCK_INDEX.pack(block.first_offset, number, block.position))
    for block in blocks:
        body = _RIE_BODY.pack(
            block.first_offset,
            block.last_offset,
            block.min_timestamp,
            block.max_timestamp,
            block.length,
            _RDI_LEN,
            block.position,
        )
        parts.append(_RIE_HEAD.pack(REMOTE_INDEX_MAGIC, _RIE_LEN, zlib.crc32(body)) + body)
    body_bytes = b"".join(parts)
    index_len = _HEAD.size + len(meta) + len(body_bytes) + _TRAILER.size
    head = _HEAD.pack(
        INDEX_MAGIC, index_len, data_object_length, BLOCK_HEADER_LEN, partition, len(blocks), len(meta)
    )
    without_crc = head + meta + body_bytes
    return without_crc + _TRAILER.pack(zlib.crc32(without_crc))


def index_crc(data: bytes) -> int:
    """The trailer CRC of an encoded index (what metadata records carry to pin the index)."""
    if len(data) < _TRAILER.size:
        raise FormatError("index object too short")
    return int(_TRAILER.unpack_from(data, len(data) - _TRAILER.size)[0])


def decode_index(data: bytes | bytearray | memoryview, *, where: str = "index") -> SegmentIndex:
    view = memoryview(data)
    if len(view) < _HEAD.size + _LEDGER_META.size + _TRAILER.size:
        raise FormatError(f"{where}: too short ({len(view)} bytes)")
    magic, index_len, data_len, data_header_len, ledger, count, meta_len = _HEAD.unpack_from(view, 0)
    if magic != INDEX_MAGIC:
        raise FormatError(f"{where}: bad index magic 0x{magic:08X}")
    if index_len != len(view):
        raise FormatError(f"{where}: index_len {index_len} but object has {len(view)} bytes")
    (crc,) = _TRAILER.unpack_from(view, len(view) - _TRAILER.size)
    if zlib.crc32(view[: len(view) - _TRAILER.size]) != crc:
        raise FormatError(f"{where}: index CRC mismatch")
    if data_header_len != BLOCK_HEADER_LEN:
        raise FormatError(f"{where}: unsupported data header length {data_header_len}")
    pos = _HEAD.size
    expected = pos + meta_len + count * (_BLOCK_INDEX.size + _RIE_LEN) + _TRAILER.size
    if meta_len < _LEDGER_META.size or expected != len(view):
        raise FormatError(f"{where}: section lengths do not add up")
    version, raw_id, start, end, records, max_ts, topic_len = _LEDGER_META.unpack_from(view, pos)
    if version != INDEX_FORMAT_VERSION:
        raise FormatError(f"{where}: unsupported index format version {version}")
    if _LEDGER_META.size + topic_len != meta_len:
        raise FormatError(f"{where}: ledger metadata length mismatch")
    try:
        topic = bytes(view[pos + _LEDGER_META.size : pos + meta_len]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(f"{where}: topic is not UTF-8") from exc
    pos += meta_len
    positions: list[tuple[int, int, int]] = []
    for _ in range(count):
        positions.append(_BLOCK_INDEX.unpack_from(view, pos))
        pos += _BLOCK_INDEX.size
    blocks: list[BlockInfo] = []
    for number in range(count):
        rie_magic, length, rie_crc = _RIE_HEAD.unpack_from(view, pos)
        if rie_magic != REMOTE_INDEX_MAGIC or length != _RIE_LEN:
            raise FormatError(f"{where}: remote index entry {number} has magic {rie_magic}, length {length}")
        body = view[pos + _RIE_HEAD.size : pos + length]
        if zlib.crc32(body) != rie_crc:
            raise FormatError(f"{where}: remote index entry {number} CRC mismatch")
        first, last, first_ts, last_ts, block_len, rdi_len, position = _RIE_BODY.unpack_from(body, 0)
        entry_id, part_id, block_pos = positions[number]
        if rdi_len != _RDI_LEN or part_id != number or entry_id != first or block_pos != position:
            raise FormatError(f"{where}: block index and remote index disagree at block {number}")
        blocks.append(BlockInfo(position, block_len, first, last, first_ts, last_ts))
        pos += length
    _check_layout(blocks, data_len, where)
    return SegmentIndex(
        topic, ledger, uuid.UUID(bytes=raw_id), start, end, records, max_ts, data_len, tuple(blocks)
    )


def _check_layout(blocks: list[BlockInfo], data_len: int, where: str) -> None:
    expected_pos = 0
    previous_last: int | None = None
    for number, block in enumerate(blocks):
        if block.position != expected_pos or block.length < BLOCK_HEADER_LEN:
            raise FormatError(f"{where}: block {number} is not where the previous one ends")
        if block.last_offset < block.first_offset or (
            previous_last is not None and block.first_offset <= previous_last
        ):
            raise FormatError(f"{where}: block {number} offsets are out of order")
        previous_last = block.last_offset
        expected_pos += block.length
    if expected_pos != data_len:
        raise FormatError(f"{where}: blocks cover {expected_pos} bytes of a {data_len}-byte data object")
