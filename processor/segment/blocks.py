"""Data blocks of any format version: one dispatch on the header's ``format_version``.

The common header layout (bytes 0..37) is in ``block_header``; bytes 38..127 and the payload of each
version in ``blocks_v1`` (one entry per record, read only), ``blocks_v2`` (one entry per Kafka
record batch, written) and ``blocks_v3`` (a version 2 block encrypted at rest). Every reader (remote
reads, Spark, verify, tests) goes through here, so a new version is one module and one branch below.

A version 3 header decodes here like any other (header-only readers and scans need no key), but its
payload does not: :func:`block_payload` and :func:`decode_block` refuse an encrypted block, which
``blocks_v3.open_block`` first turns back into the version 2 block it sealed, with the segment's
data key.
"""

from __future__ import annotations

from collections.abc import Iterator

import cramjam

from processor.errors import FormatError
from processor.segment.block_header import (
    BLOCK_FORMAT_V1,
    BLOCK_FORMAT_V2,
    BLOCK_FORMAT_V3,
    BLOCK_HEADER_LEN,
    BLOCK_MAGIC,
    CODEC_NONE,
    CODEC_ZSTD,
    COMMON,
    BlockHeader,
)
from processor.segment.blocks_v1 import decode_header_v1, decode_records_v1
from processor.segment.blocks_v2 import decode_header_v2, decode_records_v2
from processor.segment.blocks_v3 import decode_header_v3
from processor.segment.checksums import crc32
from processor.segment.records import KafkaRecord


def is_encrypted_block(data: bytes | bytearray | memoryview) -> bool:
    """True when ``data`` starts with a block header of format version 3 (encrypted); nothing past
    the common 38 bytes is checked."""
    if len(data) < COMMON.size:
        return False
    magic, _header_len, _block_len, _first, _ledger, version = COMMON.unpack_from(data, 0)
    return bool(magic == BLOCK_MAGIC and version == BLOCK_FORMAT_V3)


def decode_block_header(data: bytes | bytearray | memoryview, *, where: str = "block") -> BlockHeader:
    if len(data) < BLOCK_HEADER_LEN:
        raise FormatError(f"{where}: header needs {BLOCK_HEADER_LEN} bytes, got {len(data)}")
    magic, _header_len, _block_len, _first, _ledger, version = COMMON.unpack_from(data, 0)
    if magic != BLOCK_MAGIC:
        raise FormatError(f"{where}: bad block magic 0x{magic:08X}")
    if version == BLOCK_FORMAT_V1:
        header = decode_header_v1(data, where=where)
    elif version == BLOCK_FORMAT_V2:
        header = decode_header_v2(data, where=where)
    elif version == BLOCK_FORMAT_V3:
        header = decode_header_v3(data, where=where)
    else:
        raise FormatError(f"{where}: unsupported block format version {version}")
    if header.block_len < BLOCK_HEADER_LEN:
        raise FormatError(f"{where}: block length {header.block_len} is shorter than its header")
    if header.payload_codec not in (CODEC_NONE, CODEC_ZSTD):
        raise FormatError(f"{where}: unknown payload codec {header.payload_codec}")
    return header


def block_payload(
    data: bytes | bytearray | memoryview, *, where: str = "block", payload_crc: bool = True
) -> tuple[BlockHeader, memoryview]:
    """Verify a whole block and return its header and its (decompressed) payload. Format 1 or 2:
    an encrypted block (format 3) is opened with ``blocks_v3.open_block`` first. ``payload_crc``
    False: the payload's CRC is not computed again, for bytes the caller knows to be those of a
    block verified before (a block cache's copy, checked against the CRC-32 of the whole block)."""
    header = decode_block_header(data, where=where)
    if header.format_version == BLOCK_FORMAT_V3:
        raise FormatError(
            f"{where}: block is encrypted (format 3); open it with the segment's data key first"
        )
    if len(data) != header.block_len:
        raise FormatError(f"{where}: expected {header.block_len} bytes, got {len(data)}")
    payload = memoryview(data)[BLOCK_HEADER_LEN:]
    if payload_crc and crc32(payload) != header.payload_crc32:
        raise FormatError(f"{where}: payload CRC mismatch")
    if header.payload_codec == CODEC_ZSTD:
        try:
            # the decompressed buffer itself, not a bytes copy of it
            raw = memoryview(cramjam.zstd.decompress(payload))
        except Exception as exc:  # cramjam raises DecompressionError; any failure is bad bytes
            raise FormatError(f"{where}: zstd payload does not decompress: {exc}") from exc
        payload = raw
    if header.format_version == BLOCK_FORMAT_V2 and len(payload) != header.raw_payload_len:
        raise FormatError(f"{where}: payload is {len(payload)} bytes, header says {header.raw_payload_len}")
    return header, payload


def decode_block(
    data: bytes | bytearray | memoryview, *, where: str = "block", min_offset: int | None = None
) -> list[KafkaRecord]:
    """Verify and decode one whole block (header + payload), format version 1 or 2.

    ``min_offset``: records below it are not returned; in version 2, batches that end below it are
    not even decoded (their framing and the payload CRC are still checked).
    """
    header, payload = block_payload(data, where=where)
    if header.format_version == BLOCK_FORMAT_V1:
        return decode_records_v1(header, payload, where=where, min_offset=min_offset)
    return decode_records_v2(header, payload, where=where, min_offset=min_offset)


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
