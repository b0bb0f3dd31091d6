"""Format version 3 blocks: a version 2 block (``blocks_v2``) encrypted at rest. Pure.

Envelope encryption: each segment has its own 32-byte AES-256-GCM data key (wrapped by a key
provider elsewhere; this module only ever sees the raw key). Every block of the segment is sealed
with that key and a fresh random 12-byte nonce. The v2 payload *as stored* (after the archive codec:
compression happens before encryption) is the plaintext; the stored v3 payload is its ciphertext
followed by the 16-byte GCM tag, so a v3 block is exactly 16 bytes longer than the v2 block it seals.

Header bytes 38..127 of a version 3 block (big-endian; bytes 0..37 in ``block_header``, with
``block_len`` the v3 block's own length and ``format_version`` 3)::

    byte  size  field
      38     4  entry_count     u32  record batches in the block (as v2)
      42     8  last_entry_id   i64  last offset of the block's last batch (as v2)
      50     4  payload_crc32   u32  CRC-32 (zlib) of the payload as stored (ciphertext + tag), so a
                                     block damaged in transit is told apart from one that does not
                                     authenticate
      54     1  payload_codec   u8   codec applied before encryption (as v2: 0 none, 1 zstd)
      55     4  raw_payload_len u32  v2 payload length before compression (as v2)
      59    12  nonce                AES-GCM nonce, random per block
      71     4  header_crc32    u32  CRC-32 of header bytes 0..70
      75    53  padding         zero

Payload: ``AESGCM(data_key).encrypt(nonce, v2_stored_payload, aad)`` (ciphertext, then 16-byte tag).

Associated data (authenticated, not stored)::

    b"KTS-block-v3"            12  domain label
    header bytes 0..49         50  magic .. last_entry_id
    header bytes 54..70        17  payload_codec, raw_payload_len, nonce
    segment_id                 16  the segment's UUID (``uuid.UUID.bytes``)
    position                8 u64  the block's byte position in the (encrypted) data object

Every header field but ``payload_crc32`` is authenticated (that one is computed over the
ciphertext, so it cannot be an input to it; the header CRC and the tag cover it), and so are the
segment and the block's place in it: a block moved to another position, two blocks swapped, a
block taken from another segment, an edited header or a wrong key all fail authentication.

:func:`open_block` gives back the exact version 2 block that was sealed (its header rebuilt with
``encode_header_v2``), so every v2 reader works unchanged on opened blocks. Header-only readers
(``blocks.decode_block_header``) read a v3 header without the key.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import uuid
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from processor.errors import FormatError
from processor.segment.block_header import (
    BLOCK_FORMAT_V2,
    BLOCK_FORMAT_V3,
    BLOCK_HEADER_LEN,
    BLOCK_MAGIC,
    CODEC_NONE,
    CODEC_ZSTD,
    COMMON,
    HEADER_CRC,
    BlockHeader,
    BlockInfo,
    check_header_crc_and_padding,
)
from processor.segment.blocks_v2 import decode_header_v2, encode_header_v2
from processor.segment.checksums import crc32
from processor.segment.sealed_segment import SealedSegment

DATA_KEY_LEN = 32  # AES-256
NONCE_LEN = 12
TAG_LEN = 16
BLOCK_AAD_LABEL = b"KTS-block-v3"

HEADER_V3 = struct.Struct(">IQQqqHIqIBI12s")  # everything up to and including the nonce (71 bytes)
_PADDING_V3 = BLOCK_HEADER_LEN - HEADER_V3.size - HEADER_CRC.size
_PAYLOAD_CRC_AT = 50  # the one header field left out of the associated data
_POSITION = struct.Struct(">Q")
_MAX_POSITION = 2**64 - 1


class BlockAuthenticationError(FormatError):
    """A version 3 block whose ciphertext, header or place does not authenticate under the key."""


def data_key_cipher(key: bytes) -> AESGCM:
    """The AES-256-GCM cipher of a raw data key (exactly 32 bytes)."""
    if len(key) != DATA_KEY_LEN:
        raise ValueError(f"a data key is {DATA_KEY_LEN} bytes, got {len(key)}")
    return AESGCM(key)


def encode_header_v3(header: BlockHeader) -> bytes:
    head = _head_v3(header)
    return head + HEADER_CRC.pack(crc32(head)) + bytes(_PADDING_V3)


def _head_v3(header: BlockHeader) -> bytes:
    if len(header.nonce) != NONCE_LEN:
        raise ValueError(f"a version 3 block nonce is {NONCE_LEN} bytes, got {len(header.nonce)}")
    return HEADER_V3.pack(
        BLOCK_MAGIC,
        BLOCK_HEADER_LEN,
        header.block_len,
        header.first_entry_id,
        header.ledger_id,
        BLOCK_FORMAT_V3,
        header.entry_count,
        header.last_entry_id,
        header.payload_crc32,
        header.payload_codec,
        header.raw_payload_len,
        header.nonce,
    )


def decode_header_v3(data: bytes | bytearray | memoryview, *, where: str) -> BlockHeader:
    """A version 3 header (the magic and version already checked by the caller). Needs no key."""
    fields = HEADER_V3.unpack_from(data, 0)
    check_header_crc_and_padding(data, HEADER_V3.size, fields[1], where=where)
    _magic, _len, block_len, first, ledger, _version, count, last, payload_crc, codec, raw_len, nonce = fields
    return BlockHeader(
        block_len, first, ledger, count, last, payload_crc, BLOCK_FORMAT_V3, codec, raw_len, nonce
    )


def _aad(head: bytes | bytearray | memoryview, segment_id: uuid.UUID, position: int) -> bytes:
    """The associated data of a block whose header bytes 0..70 are ``head``."""
    view = memoryview(head)
    return b"".join(
        (
            BLOCK_AAD_LABEL,
            view[:_PAYLOAD_CRC_AT],
            view[_PAYLOAD_CRC_AT + 4 : HEADER_V3.size],
            segment_id.bytes,
            _POSITION.pack(position),
        )
    )


def _check_position(position: int) -> None:
    if not 0 <= position <= _MAX_POSITION:
        raise ValueError(f"block position {position} is not a u64")


def _checked_header(
    data: bytes | bytearray | memoryview,
    version_wanted: int,
    decode: Callable[..., BlockHeader],
    wrong_version: str,
    where: str,
) -> BlockHeader:
    """The header of a block that must be of ``version_wanted``: magic, version, header CRC, codec."""
    if len(data) < BLOCK_HEADER_LEN:
        raise FormatError(f"{where}: header needs {BLOCK_HEADER_LEN} bytes, got {len(data)}")
    magic, _header_len, _block_len, _first, _ledger, version = COMMON.unpack_from(data, 0)
    if magic != BLOCK_MAGIC:
        raise FormatError(f"{where}: bad block magic 0x{magic:08X}")
    if version != version_wanted:
        raise FormatError(f"{where}: {wrong_version} (format version {version})")
    header = decode(data, where=where)
    if header.payload_codec not in (CODEC_NONE, CODEC_ZSTD):
        raise FormatError(f"{where}: unknown payload codec {header.payload_codec}")
    return header


def _verified_v2(data: bytes | bytearray | memoryview, *, where: str) -> BlockHeader:
    """The header of a whole, intact version 2 block (payload CRC included)."""
    header = _checked_header(
        data, BLOCK_FORMAT_V2, decode_header_v2, "only a format 2 block can be sealed", where
    )
    if len(data) != header.block_len:
        raise FormatError(f"{where}: expected {header.block_len} bytes, got {len(data)}")
    if crc32(memoryview(data)[BLOCK_HEADER_LEN:]) != header.payload_crc32:
        raise FormatError(f"{where}: payload CRC mismatch")
    return header


def _seal(
    cipher: AESGCM,
    v2_block: bytes | bytearray | memoryview,
    segment_id: uuid.UUID,
    position: int,
) -> bytearray:
    _check_position(position)
    v2 = _verified_v2(v2_block, where=f"block @ {position}")
    plain = memoryview(v2_block)[BLOCK_HEADER_LEN:]
    header = dataclasses.replace(
        v2,
        block_len=v2.block_len + TAG_LEN,
        payload_crc32=0,  # not in the associated data; set once the ciphertext exists
        format_version=BLOCK_FORMAT_V3,
        nonce=os.urandom(NONCE_LEN),
    )
    out = bytearray(header.block_len)
    stored = memoryview(out)[BLOCK_HEADER_LEN:]
    cipher.encrypt_into(header.nonce, plain, _aad(_head_v3(header), segment_id, position), stored)
    out[:BLOCK_HEADER_LEN] = encode_header_v3(dataclasses.replace(header, payload_crc32=crc32(stored)))
    return out


def seal_block(
    v2_block: bytes | bytearray | memoryview, key: bytes, segment_id: uuid.UUID, position: int
) -> bytes:
    """Encrypt one whole version 2 block (as stored, any codec) into the version 3 block that goes
    at byte ``position`` of segment ``segment_id``'s data object. The input is verified first
    (header, length, payload CRC): corrupt bytes are never sealed."""
    return bytes(_seal(data_key_cipher(key), v2_block, segment_id, position))


def open_block(
    v3_block: bytes | bytearray | memoryview,
    key: bytes,
    segment_id: uuid.UUID,
    position: int,
    *,
    where: str,
) -> bytearray:
    """Verify and decrypt one whole version 3 block read at byte ``position`` of segment
    ``segment_id``'s data object: the exact version 2 block that was sealed.

    Raises ``FormatError`` for damaged bytes (header, length, payload CRC) and
    :class:`BlockAuthenticationError` when the bytes are intact but do not authenticate."""
    cipher = data_key_cipher(key)
    _check_position(position)
    data = memoryview(v3_block)
    header = _checked_header(data, BLOCK_FORMAT_V3, decode_header_v3, "not an encrypted block", where)
    if header.block_len < BLOCK_HEADER_LEN + TAG_LEN:
        raise FormatError(f"{where}: block length {header.block_len} is too short for an encrypted block")
    if len(data) != header.block_len:
        raise FormatError(f"{where}: expected {header.block_len} bytes, got {len(data)}")
    stored = data[BLOCK_HEADER_LEN:]
    if crc32(stored) != header.payload_crc32:
        raise FormatError(f"{where}: payload CRC mismatch")
    out = bytearray(header.block_len - TAG_LEN)
    plain = memoryview(out)[BLOCK_HEADER_LEN:]
    try:
        cipher.decrypt_into(header.nonce, stored, _aad(data[: HEADER_V3.size], segment_id, position), plain)
    except InvalidTag:
        raise BlockAuthenticationError(
            f"{where}: block does not authenticate (wrong key, or a block moved, swapped or altered)"
        ) from None
    out[:BLOCK_HEADER_LEN] = encode_header_v2(
        dataclasses.replace(
            header,
            block_len=len(out),
            payload_crc32=crc32(plain),
            format_version=BLOCK_FORMAT_V2,
            nonce=b"",
        )
    )
    return out


def encrypt_segment(segment: SealedSegment, key: bytes, segment_id: uuid.UUID) -> SealedSegment:
    """The segment with every block sealed under ``key`` (pure; the input is not changed), like
    ``compress_segment`` (which must run first: it only reads format 2 segments). Block positions
    and lengths move by the 16-byte tag of each block before them; ``format_version`` becomes 3."""
    if segment.format_version != BLOCK_FORMAT_V2:
        raise ValueError(f"only a format 2 segment can be encrypted, got format {segment.format_version}")
    cipher = data_key_cipher(key)
    blocks: list[bytes | bytearray] = []
    infos: list[BlockInfo] = []
    position = 0
    for block, info in zip(segment.blocks, segment.block_infos, strict=True):
        sealed = _seal(cipher, block, segment_id, position)
        blocks.append(sealed)
        infos.append(dataclasses.replace(info, position=position, length=len(sealed)))
        position += len(sealed)
    return dataclasses.replace(
        segment, blocks=blocks, block_infos=infos, size_bytes=position, format_version=BLOCK_FORMAT_V3
    )
