"""Format version 2 blocks: one entry per Kafka record batch (``entries_v2``). What the leader writes.

Header bytes 38..127 of a version 2 block (big-endian; bytes 0..37 in ``block_header``)::

    byte  size  field
      38     4  entry_count     u32  record batches in the block
      42     8  last_entry_id   i64  last offset of the block's last batch (base + lastOffsetDelta)
      50     4  payload_crc32   u32  CRC-32 (zlib) of the payload bytes as stored
      54     1  payload_codec   u8   0: payload stored as is; 1: the whole payload is one zstd frame
                                     (PROCESSOR_ARCHIVE_COMPRESSION=zstd, compression per block)
      55     4  raw_payload_len u32  payload length before compression (= stored length for codec 0)
      59     4  header_crc32    u32  CRC-32 of header bytes 0..58
      63    65  padding         zero
"""

from __future__ import annotations

import bisect
import struct
import zlib

from processor.errors import FormatError
from processor.segment.block_header import (
    BLOCK_FORMAT_V2,
    BLOCK_HEADER_LEN,
    BLOCK_MAGIC,
    HEADER_CRC,
    BlockHeader,
    check_header_crc_and_padding,
)
from processor.segment.entries_v2 import batch_records, iter_batch_entries
from processor.segment.records import KafkaRecord

HEADER_V2 = struct.Struct(">IQQqqHIqIBI")  # everything up to and including raw_payload_len (59 bytes)
_PADDING_V2 = BLOCK_HEADER_LEN - HEADER_V2.size - HEADER_CRC.size


def encode_header_v2(header: BlockHeader) -> bytes:
    head = HEADER_V2.pack(
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
    return head + HEADER_CRC.pack(zlib.crc32(head)) + bytes(_PADDING_V2)


def decode_header_v2(data: bytes | bytearray | memoryview, *, where: str) -> BlockHeader:
    """A version 2 header (the magic and version already checked by the caller)."""
    fields = HEADER_V2.unpack_from(data, 0)
    check_header_crc_and_padding(data, HEADER_V2.size, fields[1], where=where)
    _magic, _len, block_len, first, ledger, _version, count, last, payload_crc, codec, raw_len = fields
    return BlockHeader(block_len, first, ledger, count, last, payload_crc, BLOCK_FORMAT_V2, codec, raw_len)


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


def decode_records_v2(
    header: BlockHeader, payload: memoryview, *, where: str, min_offset: int | None = None
) -> list[KafkaRecord]:
    """The records of a verified version 2 payload; batches that end below ``min_offset`` are not
    even decoded (their framing and the payload CRC are still checked)."""
    batches = block_batches(header, payload, where=where)
    out: list[KafkaRecord] = []
    for batch in batches:
        if min_offset is not None:
            last_of_batch = int.from_bytes(batch[:8], "big", signed=True) + int.from_bytes(
                batch[23:27], "big", signed=True
            )
            if last_of_batch < min_offset:
                continue
            records = batch_records(batch, where=where)  # in offset order: the first kept found by bisection
            out.extend(records[bisect.bisect_left(records, min_offset, key=_offset_of) :])
        else:
            out.extend(batch_records(batch, where=where))
    return out


def _offset_of(record: KafkaRecord) -> int:
    return record.offset
