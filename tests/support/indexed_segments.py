"""Segment metadata whose index object is a real one: what a rewrite's proof reads (the index verified
against the metadata's CRC and size, the offsets of its blocks). The data object is zeros (a proof
never reads it); each block is the smallest the index format allows. Also a storage wrapper that
fails chosen reads and HEADs, as an S3 that answers 503 after the client's retries."""

from __future__ import annotations

import builtins
import dataclasses
from collections.abc import Callable, Iterator, Sequence

from processor.errors import StorageError
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.segment.block_header import BLOCK_HEADER_LEN, BlockInfo
from processor.segment.index_format import encode_index, index_crc
from processor.storage.chunk_storage import Buffer, ChunkInfo, ChunkStorage, MultipartUpload


def _blocks(seg: RemoteLogSegmentMetadata, ranges: Sequence[tuple[int, int]] | None) -> list[BlockInfo]:
    ranges = ranges or [(seg.start_offset, seg.end_offset)]
    return [
        BlockInfo(n * BLOCK_HEADER_LEN, BLOCK_HEADER_LEN, first, last, 0, seg.max_timestamp_ms)
        for n, (first, last) in enumerate(ranges)
    ]


def index_bytes(seg: RemoteLogSegmentMetadata, ranges: Sequence[tuple[int, int]] | None = None) -> bytes:
    blocks = _blocks(seg, ranges)
    return encode_index(
        topic=seg.segment_id.topic,
        partition=seg.segment_id.partition,
        segment_id=seg.segment_id.id,
        start_offset=seg.start_offset,
        end_offset=seg.end_offset,
        record_count=seg.record_count,
        max_timestamp=seg.max_timestamp_ms,
        data_object_length=len(blocks) * BLOCK_HEADER_LEN,
        blocks=blocks,
    )


def indexed(
    seg: RemoteLogSegmentMetadata, ranges: Sequence[tuple[int, int]] | None = None
) -> RemoteLogSegmentMetadata:
    """``seg`` with the size, index size and index CRC of its real objects (blocks over ``ranges``,
    one block over its offsets by default)."""
    index = index_bytes(seg, ranges)
    size = len(_blocks(seg, ranges)) * BLOCK_HEADER_LEN
    return dataclasses.replace(
        seg, segment_size_in_bytes=size, index_crc32=index_crc(index), index_size_in_bytes=len(index)
    )


def put(
    storage: ChunkStorage, seg: RemoteLogSegmentMetadata, ranges: Sequence[tuple[int, int]] | None = None
) -> None:
    """Write ``seg``'s data and index objects (``seg`` from :func:`indexed` with the same ranges)."""
    storage.create(seg.data_object_key, [bytes(seg.segment_size_in_bytes)])
    storage.create(seg.index_object_key, [index_bytes(seg, ranges)])


class FailingStorage(ChunkStorage):
    """A real storage whose reads and HEADs of keys ``fails`` picks raise StorageError (retriable: a
    503 or a timeout after the client's retries); everything else goes through."""

    def __init__(self, inner: ChunkStorage, fails: Callable[[str], bool] = lambda key: False) -> None:
        self.inner = inner
        self.fails = fails
        self.failed: list[str] = []

    def _check(self, key: str) -> None:
        if self.fails(key):
            self.failed.append(key)
            raise StorageError(f"injected: 503 Slow Down on {key}", retriable=True)

    def stat(self, key: str) -> ChunkInfo | None:
        self._check(key)
        return self.inner.stat(key)

    def read(self, key: str, offset: int, length: int) -> bytes:
        self._check(key)
        return self.inner.read(key, offset, length)

    def read_all(self, key: str) -> bytes:
        self._check(key)
        return self.inner.read_all(key)

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        return self.inner.create(key, parts)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        return iter(self.inner.list(prefix))

    def check_bucket(self) -> None:
        self.inner.check_bucket()

    def list_multipart_uploads(self, prefix: str) -> builtins.list[MultipartUpload]:
        return self.inner.list_multipart_uploads(prefix)

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self.inner.abort_multipart_upload(key, upload_id)
