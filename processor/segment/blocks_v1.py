"""Format version 1 blocks: one entry per record (``entries_v1``). Read only: the leader writes
version 2; the version 1 writer lives in the test support (tests/support/segment_v1_writer.py).

Header bytes 38..127 of a version 1 block (big-endian; bytes 0..37 in ``block_header``)::

    byte  size  field
      38     4  entry_count     u32  records in the block
      42     8  last_entry_id   i64  Kafka offset of the block's last record
      50     4  payload_crc32   u32  CRC-32 (zlib) of the payload bytes
      54     4  header_crc32    u32  CRC-32 of header bytes 0..53
      58    70  padding         zero
"""

from __future__ import annotations

import struct

from processor.errors import FormatError
from processor.segment.block_header import (
    BLOCK_FORMAT_V1,
    CODEC_NONE,
    BlockHeader,
    check_header_crc_and_padding,
)
from processor.segment.entries_v1 import iter_entries
from processor.segment.records import KafkaRecord

HEADER_V1 = struct.Struct(">IQQqqHIqI")  # everything up to and including payload_crc32 (54 bytes)


def decode_header_v1(data: bytes | bytearray | memoryview, *, where: str) -> BlockHeader:
    """A version 1 header (the magic and version already checked by the caller)."""
    fields = HEADER_V1.unpack_from(data, 0)
    check_header_crc_and_padding(data, HEADER_V1.size, fields[1], where=where)
    _magic, _len, block_len, first, ledger, _version, count, last, payload_crc = fields
    return BlockHeader(block_len, first, ledger, count, last, payload_crc, BLOCK_FORMAT_V1, CODEC_NONE, 0)


def decode_records_v1(
    header: BlockHeader, payload: memoryview, *, where: str, min_offset: int | None = None
) -> list[KafkaRecord]:
    """The records of a verified version 1 payload, checked against the header's count and ids."""
    records = list(iter_entries(payload))
    if len(records) != header.entry_count:
        raise FormatError(f"{where}: header says {header.entry_count} entries, payload has {len(records)}")
    if records and (records[0].offset != header.first_entry_id or records[-1].offset != header.last_entry_id):
        raise FormatError(f"{where}: entry ids do not match the header's first/last")
    if min_offset is not None:
        return [r for r in records if r.offset >= min_offset]
    return records
