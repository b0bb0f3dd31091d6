"""The checksums of the archive formats, computed with hardware help. Pure.

- ``crc32``: CRC-32 (the zlib polynomial) of block headers and payloads, by ISA-L (``isal``):
  ~12 GB/s here against zlib's ~2 GB/s, the same values.
- ``batch_crc_ok``: a Kafka record batch's CRC-32C (Castagnoli, over the bytes from the attributes
  field to the end), by the ``crc32c`` package (SSE4.2/ARMv8 instructions, ~11 GB/s here) instead of
  aiokafka's table-driven one (~0.8 GB/s), which cost more than decoding the batch.

Every block read verifies both; making them cheap is what lets bulk readers keep every check.
"""

from __future__ import annotations

import crc32c as _crc32c
from isal import isal_zlib

BATCH_CRC_AT = 17  # u32 CRC-32C field of a v2 record batch
BATCH_CRC_FROM = 21  # the CRC covers attributes .. end


def crc32(data: bytes | bytearray | memoryview) -> int:
    return int(isal_zlib.crc32(data))


def crc32c_of(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """CRC-32C (Castagnoli) of ``data``; with ``crc``, of the bytes it was taken of, then ``data``."""
    return int(_crc32c.crc32c(data, crc))


def batch_crc_ok(batch: bytes | bytearray | memoryview) -> bool:
    """True when a v2 record batch's stored CRC-32C matches its bytes."""
    stored = int.from_bytes(batch[BATCH_CRC_AT:BATCH_CRC_FROM], "big")
    return crc32c_of(memoryview(batch)[BATCH_CRC_FROM:]) == stored
