"""The compression codecs of a Kafka record batch (message format v2), both ways. Pure.

A v2 batch's records section (the bytes after its 61-byte header) is compressed whole with the codec
its attributes name (bits 0-2): 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd. Readers decode it with
aiokafka's record reader, which delegates snappy, lz4 and zstd to ``cramjam``; whoever re-encodes a
batch (the erase's rewriter, ``batch_rewrite``) compresses here, with ``cramjam`` and the framing
aiokafka writes for Kafka brokers:

- gzip: one gzip member (level 6, Java's ``Deflater.DEFAULT_COMPRESSION``). Decoding accepts
  several members, as Java's ``GZIPInputStream`` does.
- snappy: either xerial's block framing (what the Java producer's ``SnappyOutputStream`` writes: a
  16-byte header ``0x82 'SNAPPY' 0x00``, version 1, compatible version 1, then ``[length i32][raw
  snappy block]`` for each 32 KiB of input) or one raw snappy block (what librdkafka writes); every
  Kafka client reads both. ``compress_records`` keeps the framing of the batch it rewrites.
- lz4: one LZ4 frame with independent blocks and no content checksum (KIP-57's interoperable
  framing, what aiokafka sends and the broker validates), level 9 (Kafka's default, KIP-390).
- zstd: one zstd frame, level 3 (Kafka's default, KIP-390).

Errors from the codec libraries are raised as ``FormatError`` naming ``where``.
"""

from __future__ import annotations

import gzip
import struct
import zlib

import cramjam

from processor.errors import FormatError

CODEC_NONE = 0
CODEC_GZIP = 1
CODEC_SNAPPY = 2
CODEC_LZ4 = 3
CODEC_ZSTD = 4
CODEC_NAMES = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}

GZIP_LEVEL = 6
LZ4_LEVEL = 9
ZSTD_LEVEL = 3
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024  # the xerial library's default block size
_I32 = struct.Struct(">i")


def is_xerial(data: bytes | bytearray | memoryview) -> bool:
    """True when a snappy payload uses xerial's block framing (the Java producer's)."""
    return bytes(data[: len(XERIAL_HEADER)]) == XERIAL_HEADER


def decompress_records(codec: int, data: bytes | bytearray | memoryview, *, where: str) -> bytes:
    """The records section of a batch compressed with ``codec``, decompressed."""
    try:
        if codec == CODEC_NONE:
            return bytes(data)
        if codec == CODEC_GZIP:
            return gzip.decompress(data)
        if codec == CODEC_SNAPPY:
            return _snappy_decode(memoryview(data), where)
        if codec == CODEC_LZ4:
            return bytes(cramjam.lz4.decompress(bytes(data)))
        if codec == CODEC_ZSTD:
            return bytes(cramjam.zstd.decompress(bytes(data)))
    except FormatError:
        raise
    except (OSError, EOFError, zlib.error, cramjam.DecompressionError, ValueError) as exc:
        name = CODEC_NAMES[codec]
        raise FormatError(f"{where}: {name} records section does not decompress: {exc}") from exc
    raise FormatError(f"{where}: unknown compression codec {codec} in the batch attributes")


def compress_records(codec: int, data: bytes, *, xerial: bool = True) -> bytes:
    """``data`` (a records section) compressed with ``codec``; ``xerial`` chooses snappy's framing."""
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        return gzip.compress(data, compresslevel=GZIP_LEVEL, mtime=0)
    if codec == CODEC_SNAPPY:
        if not xerial:
            return bytes(cramjam.snappy.compress_raw(data))
        parts = [XERIAL_HEADER]
        view = memoryview(data)
        for pos in range(0, len(view), XERIAL_BLOCK):
            block = bytes(cramjam.snappy.compress_raw(view[pos : pos + XERIAL_BLOCK].tobytes()))
            parts += (_I32.pack(len(block)), block)
        return b"".join(parts)
    if codec == CODEC_LZ4:
        compressor = cramjam.lz4.Compressor(level=LZ4_LEVEL, content_checksum=False, block_linked=False)
        compressor.compress(data)
        return bytes(compressor.finish())
    if codec == CODEC_ZSTD:
        return bytes(cramjam.zstd.compress(data, level=ZSTD_LEVEL))
    raise ValueError(f"unknown compression codec {codec}")


def _snappy_decode(view: memoryview, where: str) -> bytes:
    if not is_xerial(view):
        return bytes(cramjam.snappy.decompress_raw(view.tobytes()))
    out: list[bytes] = []
    pos, end = len(XERIAL_HEADER), len(view)
    while pos < end:
        if end - pos < _I32.size:
            raise FormatError(f"{where}: xerial snappy block length at byte {pos} is truncated")
        (size,) = _I32.unpack_from(view, pos)
        pos += _I32.size
        if size < 0 or pos + size > end:
            raise FormatError(f"{where}: xerial snappy block at byte {pos} claims {size} bytes")
        out.append(bytes(cramjam.snappy.decompress_raw(view[pos : pos + size].tobytes())))
        pos += size
    return b"".join(out)
