"""Block-level access to one finished segment: its verified index, and a chosen range of its blocks.

The ``RemoteReader`` walks segments for a position; bulk readers (Spark, the audit) plan their own
work from the index and fetch exactly blocks ``first..last`` of a segment with one ranged GET. The
checks are the reader's: object keys must be ones the factory would build, the index must match the
CRC, size and offsets the metadata carries, and every block's header and payload CRCs are verified
(by ``decode_block``) before a record leaves. Wrong bytes raise CorruptObjectError; a missing object
raises SegmentObjectMissingError.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

from processor.errors import (
    CorruptObjectError,
    FormatError,
    InvalidNameError,
    ObjectNotFoundError,
    SegmentObjectMissingError,
)
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.segment.block_columns import RecordColumns, decode_block_columns
from processor.segment.block_format import BlockInfo, decode_block, decode_block_header
from processor.segment.index_format import SegmentIndex, decode_index
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.record_format import KafkaRecord
from processor.storage.chunk_storage import ChunkStorage

T = TypeVar("T")


def _get(storage: ChunkStorage, segment_name: str, key: str, start: int, length: int) -> bytes:
    try:
        return storage.read(key, start, length)
    except ObjectNotFoundError as exc:
        raise SegmentObjectMissingError("object is missing", object_key=key, segment=segment_name) from exc


def read_segment_index(
    storage: ChunkStorage, keys: ObjectKeyFactory, segment: RemoteLogSegmentMetadata
) -> SegmentIndex:
    """Fetch and verify a segment's index object (one GET)."""
    tp = segment.topic_partition
    where = {"object_key": segment.index_object_key, "segment": str(segment.segment_id)}
    try:
        keys.check_segment_key(segment.data_object_key, tp.topic, tp.partition)
        keys.check_segment_key(segment.index_object_key, tp.topic, tp.partition)
    except InvalidNameError as exc:
        raise CorruptObjectError(
            f"metadata names an object outside the segment's prefix: {exc}", **where
        ) from exc
    raw = _get(storage, str(segment.segment_id), segment.index_object_key, 0, segment.index_size_in_bytes)
    try:
        index = decode_index(raw, where=segment.index_object_key)
    except FormatError as exc:
        raise CorruptObjectError(str(exc), **where) from exc
    if int.from_bytes(raw[-4:], "big") != segment.index_crc32:
        raise CorruptObjectError("index CRC differs from the one in the segment's metadata", **where)
    if (
        index.segment_id != segment.segment_id.id
        or index.data_object_length != segment.segment_size_in_bytes
        or (index.start_offset, index.end_offset) != (segment.start_offset, segment.end_offset)
    ):
        raise CorruptObjectError("index does not describe this segment", **where)
    return index


def _fetch(
    storage: ChunkStorage, data_object_key: str, segment_name: str, blocks: Sequence[BlockInfo]
) -> memoryview:
    start = blocks[0].position
    end = blocks[-1].position + blocks[-1].length
    return memoryview(_get(storage, segment_name, data_object_key, start, end - start))


def _decode_fetched(
    data: memoryview,
    data_object_key: str,
    segment_name: str,
    blocks: Sequence[BlockInfo],
    first_number: int,
    decode: Callable[[memoryview, str], T],
) -> Iterator[T]:
    start = blocks[0].position
    for i, info in enumerate(blocks):
        number = first_number + i
        rel = info.position - start
        where = f"{data_object_key} block {number}"
        block = data[rel : rel + info.length]
        try:
            # The header names the block's first and last offsets (the same check as RemoteReader's):
            # a block that is not the one its index entry describes is corrupt, whatever it holds.
            header = decode_block_header(block, where=where)
            if (header.first_entry_id, header.last_entry_id) != (info.first_offset, info.last_offset):
                raise FormatError(f"{where}: does not hold the offsets its index entry names")
            decoded = decode(block, where)
        except FormatError as exc:
            raise CorruptObjectError(str(exc), object_key=data_object_key, segment=segment_name) from exc
        yield decoded


def _verified_blocks(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: Sequence[BlockInfo],
    first_number: int,
    decode: Callable[[memoryview, str], T],
) -> Iterator[T]:
    if not blocks:
        return
    data = _fetch(storage, data_object_key, segment_name, blocks)
    yield from _decode_fetched(data, data_object_key, segment_name, blocks, first_number, decode)


def _groups(
    blocks: Sequence[BlockInfo], first_number: int, max_bytes: int
) -> list[tuple[int, list[BlockInfo]]]:
    """Consecutive blocks cut into runs of at most ``max_bytes`` (at least one block each)."""
    out: list[tuple[int, list[BlockInfo]]] = []
    run: list[BlockInfo] = []
    size = 0
    for i, info in enumerate(blocks):
        if run and size + info.length > max_bytes:
            out.append((first_number + i - len(run), run))
            run, size = [], 0
        run.append(info)
        size += info.length
    if run:
        out.append((first_number + len(blocks) - len(run), run))
    return out


def _prefetched_blocks(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: Sequence[BlockInfo],
    first_number: int,
    max_bytes: int,
    decode: Callable[[memoryview, str], T],
) -> Iterator[T]:
    """Blocks fetched in runs of at most ``max_bytes``, the next run's GET in flight (one thread)
    while the current run is decoded: the network wait and the decoding overlap, and at most two
    runs are held in memory. (Hand-written: a one-deep read-ahead is a few lines.)"""
    groups = _groups(blocks, first_number, max_bytes)
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="block-prefetch")
    ahead: Future[memoryview] | None = None
    try:
        for i, (number, run) in enumerate(groups):
            current = ahead or pool.submit(_fetch, storage, data_object_key, segment_name, run)
            ahead = None
            if i + 1 < len(groups):
                ahead = pool.submit(_fetch, storage, data_object_key, segment_name, groups[i + 1][1])
            data = current.result()
            yield from _decode_fetched(data, data_object_key, segment_name, run, number, decode)
    finally:
        # Reached early only when the consumer stopped or decoding failed: the read-ahead's bytes
        # (or its error) are of no use then; wait for it so no GET outlives the read.
        if ahead is not None and not ahead.cancel():
            ahead.exception()
        pool.shutdown(wait=True)


def read_block_range(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: Sequence[BlockInfo],
    first_number: int,
) -> Iterator[list[KafkaRecord]]:
    """Fetch consecutive blocks (``blocks`` are their index entries, the first being block number
    ``first_number``) with one ranged GET; yield each block's verified records, block by block."""
    yield from _verified_blocks(
        storage,
        data_object_key,
        segment_name,
        blocks,
        first_number,
        lambda block, where: decode_block(block, where=where),
    )


def read_block_range_columns(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: Sequence[BlockInfo],
    first_number: int,
    *,
    min_offset: int | None = None,
    max_offset: int | None = None,
    prefetch_bytes: int | None = None,
) -> Iterator[RecordColumns]:
    """``read_block_range`` in columns (``decode_block_columns``), only offsets in
    ``[min_offset, max_offset]``: what bulk readers (Spark) use. ``prefetch_bytes``: fetch the range
    in GETs of at most this many bytes, the next one in flight while the current one decodes."""

    def decode(block: memoryview, where: str) -> RecordColumns:
        return decode_block_columns(block, where=where, min_offset=min_offset, max_offset=max_offset)

    if not blocks:
        return
    if prefetch_bytes is None:
        yield from _verified_blocks(storage, data_object_key, segment_name, blocks, first_number, decode)
    else:
        yield from _prefetched_blocks(
            storage, data_object_key, segment_name, blocks, first_number, prefetch_bytes, decode
        )
