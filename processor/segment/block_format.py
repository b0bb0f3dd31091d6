"""Data blocks (PIP-76 block data format v2) and the format version 1 builder.

A data object is one or more consecutive blocks. A block is a 128-byte header and a payload of
entries. Header layout (big-endian); bytes 0..35 are PIP-76's, the rest PIP-76 leaves as padding::

    byte  size  field
       0     4  magic           u32  0x26A66D32
       4     8  header_len      u64  128
      12     8  block_len       u64  header + stored payload, in bytes
      20     8  first_entry_id  i64  Kafka offset of the block's first entry
      28     8  ledger_id       i64  the source partition (PIP-76's ledger id; one per segment here)
      36     2  format_version  u16  1 or 2 (below)

    format version 1 (one entry per record, see ``record_format``; still read, no longer written):
      38     4  entry_count     u32  records in the block
      42     8  last_entry_id   i64  Kafka offset of the block's last record
      50     4  payload_crc32   u32  CRC-32 (zlib) of the payload bytes
      54     4  header_crc32    u32  CRC-32 of header bytes 0..53
      58    70  padding         zero

    format version 2 (one entry per Kafka record batch, see ``batch_entries``):
      38     4  entry_count     u32  record batches in the block
      42     8  last_entry_id   i64  last offset of the block's last batch (base + lastOffsetDelta)
      50     4  payload_crc32   u32  CRC-32 (zlib) of the payload bytes as stored
      54     1  payload_codec   u8   0: payload stored as is; 1: the whole payload is one zstd frame
                                     (PROCESSOR_ARCHIVE_COMPRESSION=zstd, compression per block)
      55     4  raw_payload_len u32  payload length before compression (= stored length for codec 0)
      59     4  header_crc32    u32  CRC-32 of header bytes 0..58
      63    65  padding         zero

There is no padding after the payload: ``block_len`` is exact, so blocks follow each other without
gaps and the index records each block's byte position. A block holds whole entries only.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import cramjam

from processor.errors import FormatError
from processor.segment.batch_entries import batch_records, iter_batch_entries
from processor.segment.record_format import KafkaRecord, append_entry, iter_entries

BLOCK_MAGIC = 0x26A66D32
BLOCK_HEADER_LEN = 128
BLOCK_FORMAT_V1 = 1
BLOCK_FORMAT_V2 = 2
BLOCK_FORMAT_VERSION = BLOCK_FORMAT_V2  # what the leader writes
CODEC_NONE = 0
CODEC_ZSTD = 1

_COMMON = struct.Struct(">IQQqqH")  # magic .. format_version (38 bytes)
_HEADER = struct.Struct(">IQQqqHIqI")  # v1: everything up to and including payload_crc32 (54 bytes)
_HEADER_V2 = struct.Struct(">IQQqqHIqIBI")  # v2: up to and including raw_payload_len (59 bytes)
_HEADER_CRC = struct.Struct(">I")
_HEADER_PADDING = BLOCK_HEADER_LEN - _HEADER.size - _HEADER_CRC.size
_HEADER_PADDING_V2 = BLOCK_HEADER_LEN - _HEADER_V2.size - _HEADER_CRC.size
MAX_RAW_PAYLOAD = 2**32 - 1


@dataclass(frozen=True, slots=True)
class BlockHeader:
    block_len: int
    first_entry_id: int
    ledger_id: int
    entry_count: int
    last_entry_id: int
    payload_crc32: int
    format_version: int = BLOCK_FORMAT_V1
    payload_codec: int = CODEC_NONE
    raw_payload_len: int = 0  # v2 only


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """What the index records of one block."""

    position: int  # byte position of the block in the data object
    length: int  # block_len
    first_offset: int
    last_offset: int
    min_timestamp: int
    max_timestamp: int


def encode_block_header(header: BlockHeader) -> bytes:
    if header.format_version == BLOCK_FORMAT_V1:
        head = _HEADER.pack(
            BLOCK_MAGIC,
            BLOCK_HEADER_LEN,
            header.block_len,
            header.first_entry_id,
            header.ledger_id,
            header.format_version,
            header.entry_count,
            header.last_entry_id,
            header.payload_crc32,
        )
        return head + _HEADER_CRC.pack(zlib.crc32(head)) + bytes(_HEADER_PADDING)
    head = _HEADER_V2.pack(
        BLOCK_MAGIC,
        BLOCK_HEADER_LEN,
        header.block_len,
        header.first_entry_id,
        header.ledger_id,
        BLOCK_FORMAT_V2,
        header.entry_count,
        header.last_entry_id,
        header.payload_crc32,
        header.payload_codec,
        header.raw_payload_len,
    )
    return head + _HEADER_CRC.pack(zlib.crc32(head)) + bytes(_HEADER_PADDING_V2)


def decode_block_header(data: bytes | bytearray | memoryview, *, where: str = "block") -> BlockHeader:
    if len(data) < BLOCK_HEADER_LEN:
        raise FormatError(f"{where}: header needs {BLOCK_HEADER_LEN} bytes, got {len(data)}")
    magic, header_len, _block_len, _first, _ledger, version = _COMMON.unpack_from(data, 0)
    if magic != BLOCK_MAGIC:
        raise FormatError(f"{where}: bad block magic 0x{magic:08X}")
    if version == BLOCK_FORMAT_V1:
        fields = _HEADER.unpack_from(data, 0)
        codec, raw_len, struct_size, padding = CODEC_NONE, 0, _HEADER.size, _HEADER_PADDING
    elif version == BLOCK_FORMAT_V2:
        fields = _HEADER_V2.unpack_from(data, 0)
        codec, raw_len = fields[9], fields[10]
        struct_size, padding = _HEADER_V2.size, _HEADER_PADDING_V2
    else:
        raise FormatError(f"{where}: unsupported block format version {version}")
    (header_crc,) = _HEADER_CRC.unpack_from(data, struct_size)
    if zlib.crc32(memoryview(data)[:struct_size]) != header_crc:
        raise FormatError(f"{where}: block header CRC mismatch")
    if header_len != BLOCK_HEADER_LEN:
        raise FormatError(f"{where}: unsupported block header length {header_len}")
    if any(memoryview(data)[BLOCK_HEADER_LEN - padding : BLOCK_HEADER_LEN]):
        raise FormatError(f"{where}: block header padding is not zero")
    block_len, first, ledger, count, last, payload_crc = (
        fields[2],
        fields[3],
        fields[4],
        fields[6],
        fields[7],
        fields[8],
    )
    if block_len < BLOCK_HEADER_LEN:
        raise FormatError(f"{where}: block length {block_len} is shorter than its header")
    if codec not in (CODEC_NONE, CODEC_ZSTD):
        raise FormatError(f"{where}: unknown payload codec {codec}")
    return BlockHeader(block_len, first, ledger, count, last, payload_crc, version, codec, raw_len)


def block_payload(
    data: bytes | bytearray | memoryview, *, where: str = "block"
) -> tuple[BlockHeader, memoryview]:
    """Verify a whole block and return its header and its (decompressed) payload."""
    header = decode_block_header(data, where=where)
    if len(data) != header.block_len:
        raise FormatError(f"{where}: expected {header.block_len} bytes, got {len(data)}")
    payload = memoryview(data)[BLOCK_HEADER_LEN:]
    if zlib.crc32(payload) != header.payload_crc32:
        raise FormatError(f"{where}: payload CRC mismatch")
    if header.payload_codec == CODEC_ZSTD:
        try:
            raw = bytes(cramjam.zstd.decompress(payload))
        except Exception as exc:  # cramjam raises DecompressionError; any failure is bad bytes
            raise FormatError(f"{where}: zstd payload does not decompress: {exc}") from exc
        payload = memoryview(raw)
    if header.format_version == BLOCK_FORMAT_V2 and len(payload) != header.raw_payload_len:
        raise FormatError(f"{where}: payload is {len(payload)} bytes, header says {header.raw_payload_len}")
    return header, payload


def block_batches(header: BlockHeader, payload: memoryview, *, where: str) -> list[memoryview]:
    """The record batches of a verified version 2 payload, after checking their framing, their
    number and the first/last offsets against the block header."""
    batches = list(iter_batch_entries(payload, where=where))
    if len(batches) != header.entry_count:
        raise FormatError(f"{where}: header says {header.entry_count} entries, payload has {len(batches)}")
    if batches:
        first = int.from_bytes(batches[0][:8], "big", signed=True)
        last_batch = batches[-1]
        last = int.from_bytes(last_batch[:8], "big", signed=True) + int.from_bytes(
            last_batch[23:27], "big", signed=True
        )
        if first != header.first_entry_id or last != header.last_entry_id:
            raise FormatError(f"{where}: entry ids do not match the header's first/last")
    return batches


def decode_block(
    data: bytes | bytearray | memoryview, *, where: str = "block", min_offset: int | None = None
) -> list[KafkaRecord]:
    """Verify and decode one whole block (header + payload), format version 1 or 2.

    ``min_offset``: records below it are not returned; in version 2, batches that end below it are
    not even decoded (their framing and the payload CRC are still checked).
    """
    header, payload = block_payload(data, where=where)
    if header.format_version == BLOCK_FORMAT_V1:
        records = list(iter_entries(payload))
        if len(records) != header.entry_count:
            raise FormatError(
                f"{where}: header says {header.entry_count} entries, payload has {len(records)}"
            )
        if records and (
            records[0].offset != header.first_entry_id or records[-1].offset != header.last_entry_id
        ):
            raise FormatError(f"{where}: entry ids do not match the header's first/last")
        if min_offset is not None:
            return [r for r in records if r.offset >= min_offset]
        return records
    batches = block_batches(header, payload, where=where)
    out: list[KafkaRecord] = []
    for batch in batches:
        if min_offset is not None:
            last_of_batch = int.from_bytes(batch[:8], "big", signed=True) + int.from_bytes(
                batch[23:27], "big", signed=True
            )
            if last_of_batch < min_offset:
                continue
            out.extend(r for r in batch_records(batch, where=where) if r.offset >= min_offset)
        else:
            out.extend(batch_records(batch, where=where))
    return out


def iter_blocks(
    data: bytes | bytearray | memoryview, *, where: str = "data object"
) -> Iterator[list[KafkaRecord]]:
    """Decode a whole data object block by block (tools, tests, audits)."""
    view = memoryview(data)
    pos = 0
    while pos < len(view):
        header = decode_block_header(view[pos:], where=f"{where} @ {pos}")
        yield decode_block(view[pos : pos + header.block_len], where=f"{where} @ {pos}")
        pos += header.block_len


@dataclass(slots=True)
class SealedSegment:
    """A finished, immutable segment ready for upload: its blocks and their index information."""

    partition: int
    start_offset: int  # inclusive; may be below the first record's offset (gaps are covered)
    end_offset: int  # inclusive; the last record's offset
    blocks: list[bytes | bytearray]
    block_infos: list[BlockInfo]
    record_count: int
    size_bytes: int  # data object length
    max_timestamp: int
    leader_epochs: list[tuple[int, int]]  # (epoch, first offset of that epoch in the segment)
    format_version: int = BLOCK_FORMAT_V1
    held_bytes: int = -1  # bytes the offload buffer counted for it (before archive compression)
    archive_compression: str = "keep"  # PROCESSOR_ARCHIVE_COMPRESSION, applied on the way to S3

    def __post_init__(self) -> None:
        if self.held_bytes < 0:
            self.held_bytes = self.size_bytes

    def views(self) -> list[memoryview]:
        return [memoryview(block) for block in self.blocks]


class SegmentBuilder:
    """Format version 1: fills blocks with one entry per record (kept to write v1 objects in tests
    and tools; the leader writes version 2 with ``SegmentAssembler``). Pure, no I/O.

    ``start_offset`` is where this segment's coverage begins (the previous segment's end + 1), so
    coverage stays contiguous even where the source log has offset gaps (compaction, transactions).
    """

    __slots__ = (
        "_block",
        "_block_count",
        "_block_first",
        "_block_max_ts",
        "_block_min_ts",
        "_closed_records",
        "_epoch",
        "_target_block_bytes",
        "blocks",
        "epochs",
        "infos",
        "last_offset",
        "max_timestamp",
        "partition",
        "size_bytes",
        "start_offset",
    )

    def __init__(self, partition: int, start_offset: int, block_bytes: int) -> None:
        if block_bytes <= BLOCK_HEADER_LEN:
            raise ValueError("block size must be larger than the block header")
        self.partition = partition
        self.start_offset = start_offset
        self._target_block_bytes = block_bytes
        self.blocks: list[bytes | bytearray] = []
        self.infos: list[BlockInfo] = []
        self.size_bytes = 0  # bytes of closed blocks plus the open block
        self._closed_records = 0
        self._epoch: int | None = None
        self.last_offset = start_offset - 1
        self.max_timestamp = -1
        self.epochs: list[tuple[int, int]] = []
        self._block: bytearray | None = None
        self._reset_block_stats()

    def _reset_block_stats(self) -> None:
        self._block_count = 0
        self._block_first = -1
        self._block_min_ts = 2**63 - 1
        self._block_max_ts = -(2**63)

    @property
    def empty(self) -> bool:
        return self.record_count == 0

    def append(
        self,
        offset: int,
        timestamp_type: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
        leader_epoch: int = -1,
    ) -> int:
        """Add one record (offsets must increase); return the bytes it added to the segment."""
        if offset <= self.last_offset:
            raise ValueError(f"offset {offset} does not follow {self.last_offset}")
        block = self._block
        if block is None:
            block = self._block = bytearray(BLOCK_HEADER_LEN)
            self._block_first = offset
            added = BLOCK_HEADER_LEN + append_entry(
                block, offset, timestamp_type, timestamp, key, value, headers
            )
        else:
            added = append_entry(block, offset, timestamp_type, timestamp, key, value, headers)
        self._block_count += 1
        if timestamp < self._block_min_ts:
            self._block_min_ts = timestamp
        if timestamp > self._block_max_ts:
            self._block_max_ts = timestamp
        if leader_epoch != self._epoch:
            self._epoch = leader_epoch
            self.epochs.append((leader_epoch, offset))
        self.last_offset = offset
        self.size_bytes += added
        if len(block) >= self._target_block_bytes:
            self._close_block()
        return added

    @property
    def record_count(self) -> int:
        return self._closed_records + self._block_count

    def _close_block(self) -> None:
        block = self._block
        if block is None:
            return
        payload_crc = zlib.crc32(memoryview(block)[BLOCK_HEADER_LEN:])
        block[:BLOCK_HEADER_LEN] = encode_block_header(
            BlockHeader(
                len(block),
                self._block_first,
                self.partition,
                self._block_count,
                self.last_offset,
                payload_crc,
                BLOCK_FORMAT_V1,
            )
        )
        last = self.infos[-1] if self.infos else None
        position = last.position + last.length if last else 0
        self.infos.append(
            BlockInfo(
                position,
                len(block),
                self._block_first,
                self.last_offset,
                self._block_min_ts,
                self._block_max_ts,
            )
        )
        if self._block_max_ts > self.max_timestamp:
            self.max_timestamp = self._block_max_ts
        self.blocks.append(block)
        self._closed_records += self._block_count
        self._block = None
        self._reset_block_stats()

    def seal(self) -> SealedSegment:
        """Close the open block and hand the segment over; the builder must not be used after."""
        if self.empty:
            raise ValueError("cannot seal an empty segment")
        self._close_block()
        segment = SealedSegment(
            partition=self.partition,
            start_offset=self.start_offset,
            end_offset=self.last_offset,
            blocks=self.blocks,
            block_infos=self.infos,
            record_count=self.record_count,
            size_bytes=self.size_bytes,
            max_timestamp=self.max_timestamp,
            leader_epochs=self.epochs,
        )
        self.blocks, self.infos = [], []
        return segment
