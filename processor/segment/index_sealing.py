"""A whole index object (``index_format``) encrypted at rest with the segment's data key. Pure.

The index says where each block is and which offsets and timestamps it holds, so an encrypted
segment's index is sealed whole with the same AES-256-GCM data key as its blocks
(``blocks_v3``), under a fresh random nonce. Layout (big-endian)::

    byte  size  field
       0     4  magic        b"KTSI"
       4     1  version      u8  1
       5    12  nonce        AES-GCM nonce, random
      17     n  ciphertext   AESGCM(data_key).encrypt(nonce, plain index object, aad)
    17+n    16  tag          GCM tag (the last 16 bytes of what ``encrypt`` returns)

Associated data (authenticated, not stored)::

    b"KTS-index-v1"   12  domain label
    magic, version     5  bytes 0..4 above
    segment_id        16  the segment's UUID (``uuid.UUID.bytes``)

so an index sealed for another segment, or under another key, or altered anywhere does not open.
A plain index starts with ``INDEX_MAGIC`` (0x3D1FB0BC), a sealed one with ``KTSI``: the first four
bytes tell them apart (:func:`is_sealed_index`).
"""

from __future__ import annotations

import os
import struct
import uuid

from cryptography.exceptions import InvalidTag

from processor.errors import FormatError
from processor.segment.blocks_v3 import NONCE_LEN, TAG_LEN, data_key_cipher

SEALED_INDEX_MAGIC = b"KTSI"
SEALED_INDEX_VERSION = 1
INDEX_AAD_LABEL = b"KTS-index-v1"

_HEAD = struct.Struct(">4sB12s")  # magic, version, nonce (17 bytes)
_AAD_HEAD_LEN = 5  # magic and version


class IndexAuthenticationError(FormatError):
    """A sealed index that does not authenticate under the key for its segment."""


def _aad(head: bytes | memoryview, segment_id: uuid.UUID) -> bytes:
    return INDEX_AAD_LABEL + bytes(head[:_AAD_HEAD_LEN]) + segment_id.bytes


def is_sealed_index(data: bytes | bytearray | memoryview) -> bool:
    """True when ``data`` starts like a sealed index (nothing else is checked)."""
    return bytes(data[: len(SEALED_INDEX_MAGIC)]) == SEALED_INDEX_MAGIC


def seal_index(index_bytes: bytes | bytearray | memoryview, key: bytes, segment_id: uuid.UUID) -> bytes:
    """The sealed index object of segment ``segment_id`` (input: the plain index object's bytes)."""
    cipher = data_key_cipher(key)
    if is_sealed_index(index_bytes):
        raise ValueError("the index is already sealed")
    head = _HEAD.pack(SEALED_INDEX_MAGIC, SEALED_INDEX_VERSION, os.urandom(NONCE_LEN))
    nonce = head[_AAD_HEAD_LEN:]
    return head + cipher.encrypt(nonce, index_bytes, _aad(head, segment_id))


def open_index(
    sealed: bytes | bytearray | memoryview, key: bytes, segment_id: uuid.UUID, *, where: str
) -> bytes:
    """The plain index object inside a sealed one. ``FormatError`` for bytes that are not a sealed
    index (too short, bad magic, unknown version), :class:`IndexAuthenticationError` when they do
    not authenticate (wrong key or segment, altered, truncated)."""
    cipher = data_key_cipher(key)
    view = memoryview(sealed)
    if len(view) < _HEAD.size + TAG_LEN:
        raise FormatError(f"{where}: sealed index too short ({len(view)} bytes)")
    magic, version, nonce = _HEAD.unpack_from(view, 0)
    if magic != SEALED_INDEX_MAGIC:
        raise FormatError(f"{where}: bad sealed index magic {bytes(magic)!r}")
    if version != SEALED_INDEX_VERSION:
        raise FormatError(f"{where}: unsupported sealed index version {version}")
    try:
        return cipher.decrypt(nonce, view[_HEAD.size :], _aad(view, segment_id))
    except InvalidTag:
        raise IndexAuthenticationError(
            f"{where}: index does not authenticate (wrong key or segment, or altered or truncated)"
        ) from None
