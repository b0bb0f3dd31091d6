"""What every data block shares, whatever its format version: the first 38 header bytes, the codecs,
and the header and index models. Pure.

A data object is one or more consecutive blocks. A block is a 128-byte header and a payload of
entries. The header's common part (big-endian); bytes 0..35 are PIP-76's, the rest PIP-76 leaves as
padding::

    byte  size  field
       0     4  magic           u32  0x26A66D32
       4     8  header_len      u64  128
      12     8  block_len       u64  header + stored payload, in bytes
      20     8  first_entry_id  i64  Kafka offset of the block's first entry
      28     8  ledger_id       i64  the source partition (PIP-76's ledger id; one per segment here)
      36     2  format_version  u16  1 (``blocks_v1``, read only), 2 (``blocks_v2``, written) or
                                     3 (``blocks_v3``: a version 2 block encrypted at rest)

Bytes 38..127 depend on the format version (see ``blocks_v1``, ``blocks_v2`` and ``blocks_v3``);
``blocks`` dispatches on ``format_version``.

There is no padding after the payload: ``block_len`` is exact, so blocks follow each other without
gaps and the index records each block's byte position. A block holds whole entries only.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from processor.errors import FormatError
from processor.segment.checksums import crc32

BLOCK_MAGIC = 0x26A66D32
BLOCK_HEADER_LEN = 128
BLOCK_FORMAT_V1 = 1
BLOCK_FORMAT_V2 = 2
BLOCK_FORMAT_V3 = 3  # an encrypted version 2 block (``blocks_v3``)
BLOCK_FORMAT_VERSION = BLOCK_FORMAT_V2  # what the leader writes (unencrypted)
CODEC_NONE = 0
CODEC_ZSTD = 1
MAX_RAW_PAYLOAD = 2**32 - 1

COMMON = struct.Struct(">IQQqqH")  # magic .. format_version (38 bytes)
HEADER_CRC = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class BlockHeader:
    block_len: int
    first_entry_id: int
    ledger_id: int
    entry_count: int
    last_entry_id: int
    payload_crc32: int
    format_version: int = BLOCK_FORMAT_VERSION
    payload_codec: int = CODEC_NONE
    raw_payload_len: int = 0  # v2 and v3 only
    nonce: bytes = b""  # v3 only: the block's AES-GCM nonce


@dataclass(frozen=True, slots=True)
class BlockInfo:
    """What the index records of one block."""

    position: int  # byte position of the block in the data object
    length: int  # block_len
    first_offset: int
    last_offset: int
    min_timestamp: int
    max_timestamp: int


def check_header_crc_and_padding(
    data: bytes | bytearray | memoryview, struct_size: int, header_len: int, *, where: str
) -> None:
    """The checks every version makes: the header CRC (over the ``struct_size`` bytes before it),
    the header length, and zero padding after the CRC up to byte 128."""
    (header_crc,) = HEADER_CRC.unpack_from(data, struct_size)
    if crc32(memoryview(data)[:struct_size]) != header_crc:
        raise FormatError(f"{where}: block header CRC mismatch")
    if header_len != BLOCK_HEADER_LEN:
        raise FormatError(f"{where}: unsupported block header length {header_len}")
    if any(memoryview(data)[struct_size + HEADER_CRC.size : BLOCK_HEADER_LEN]):
        raise FormatError(f"{where}: block header padding is not zero")
