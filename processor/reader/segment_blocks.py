"""Block-level access to one finished segment: its verified index (``fetch_index``), the check that a
block is the one its index entry names (``check_block``), and a chosen range of its blocks.

The ``RemoteReader`` walks segments for a position; bulk readers (Spark, the audit) plan their own
work from the index and fetch exactly blocks ``first..last`` of a segment with one ranged GET. The
checks are the reader's: object keys must be ones the factory would build, the index must match the
CRC, size and offsets the metadata carries, and every block's header and payload CRCs are verified
(by ``decode_block``) before a record leaves. Wrong bytes raise CorruptObjectError; a missing object
raises SegmentObjectMissingError.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from processor.errors import (
    CorruptObjectError,
    FormatError,
    InvalidNameError,
    ObjectNotFoundError,
    SegmentObjectMissingError,
)
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.segment.block_columns import RecordColumns, decode_block_columns
from processor.segment.block_header import BLOCK_FORMAT_V1, BlockInfo
from processor.segment.blocks import block_payload, decode_block, decode_block_header
from processor.segment.blocks_v2 import block_batches
from processor.segment.entries_v2 import check_batch_crc
from processor.segment.index_format import SegmentIndex, decode_index
from processor.segment.key_filter import MAX_BITS as KEY_FILTER_MAX_BITS
from processor.segment.key_filter import OVERHEAD as KEY_FILTER_OVERHEAD
from processor.segment.key_filter import KeyFilter, decode_key_filter
from processor.segment.object_keys import KEY_FILTER_SUFFIX, ObjectKeyFactory
from processor.segment.records import KafkaRecord
from processor.storage.chunk_storage import ChunkStorage

if TYPE_CHECKING:
    from processor.reader.segment_keys import SegmentCipher

T = TypeVar("T")
# (object key, start, length) -> bytes; raises ObjectNotFoundError. The remote reader passes its own
# (it counts requests and bytes); the default reads the storage directly.
Get = Callable[[str, int, int], bytes]


def _get(storage: ChunkStorage, segment_name: str, key: str, start: int, length: int) -> bytes:
    try:
        return storage.read(key, start, length)
    except ObjectNotFoundError as exc:
        raise SegmentObjectMissingError("object is missing", object_key=key, segment=segment_name) from exc


def _where(segment: RemoteLogSegmentMetadata, key: str) -> dict[str, str]:
    return {"object_key": key, "segment": str(segment.segment_id)}


def fetch_key_filter(
    storage: ChunkStorage, data_object_key: str, size: int | None = None
) -> KeyFilter | None:
    """A segment's key filter object (``{data}-keys``), None when it has none. Bucket input: read only
    if its size (``size``: as listed; else asked) is one a filter can have, and decoded with every
    check of its format. Raises FormatError when it is not a filter this reader can use."""
    key = data_object_key + KEY_FILTER_SUFFIX
    if size is None:
        info = storage.stat(key)
        if info is None:
            return None
        size = info.size
    limit = KEY_FILTER_OVERHEAD + KEY_FILTER_MAX_BITS // 8
    if size > limit:
        raise FormatError(f"{key}: {size} bytes, more than a key filter has ({limit})")
    return decode_key_filter(storage.read(key, 0, size), where=key)


def fetch_index(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    segment: RemoteLogSegmentMetadata,
    get: Get | None = None,
    cipher: SegmentCipher | None = None,
) -> SegmentIndex:
    """Fetch and verify a segment's index object (one GET, through ``get`` when given): its keys are
    ones the key factory would build for this segment's partition, the bytes match the CRC and size
    the metadata carries, and the index describes this segment (id, offsets, data object length).
    ``cipher``: the segment is encrypted; its index is opened (authenticated) first. Raises
    CorruptObjectError, or SegmentObjectMissingError when the object is gone."""
    tp = segment.topic_partition
    where = _where(segment, segment.index_object_key)
    try:
        keys.check_segment_key(segment.data_object_key, tp.topic, tp.partition)
        keys.check_segment_key(segment.index_object_key, tp.topic, tp.partition)
    except InvalidNameError as exc:
        raise CorruptObjectError(
            f"metadata names an object outside the segment's prefix: {exc}", **where
        ) from exc
    try:
        raw = (get or storage.read)(segment.index_object_key, 0, segment.index_size_in_bytes)
    except ObjectNotFoundError as exc:
        raise SegmentObjectMissingError("object is missing", **where) from exc
    try:
        if cipher is not None:
            raw = cipher.open_index(raw, where=segment.index_object_key)
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


def check_block(block: memoryview, info: BlockInfo, where: str) -> None:
    """The block header names the block's first and last offsets: a block that is not the one its
    index entry describes is corrupt, whatever it holds. Raises FormatError."""
    header = decode_block_header(block, where=where)
    if (header.first_entry_id, header.last_entry_id) != (info.first_offset, info.last_offset):
        raise FormatError(f"{where}: does not hold the offsets its index entry names")


def chunk_runs(blocks: tuple[BlockInfo, ...] | list[BlockInfo], chunk_bytes: int) -> list[tuple[int, int]]:
    """``[i, j)`` runs of consecutive blocks of at most ``chunk_bytes`` (at least one block each)."""
    runs: list[tuple[int, int]] = []
    start, size = 0, 0
    for i, info in enumerate(blocks):
        if size and size + info.length > chunk_bytes:
            runs.append((start, i))
            start, size = i, 0
        size += info.length
    runs.append((start, len(blocks)))
    return runs


def _fetched(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: tuple[BlockInfo, ...] | list[BlockInfo],
    chunk_bytes: int | None,
) -> Iterator[tuple[int, memoryview]]:
    """(index of its first block, bytes) of each chunk of the blocks' range. With ``chunk_bytes``,
    the range is fetched in ranged GETs of about that size and the next one is already on its way
    while the caller decodes the current one (the GET waits on the network and the store, not on
    this interpreter); without, in one GET."""
    runs = chunk_runs(blocks, chunk_bytes) if chunk_bytes else [(0, len(blocks))]

    def get(run: tuple[int, int]) -> memoryview:
        first, last = blocks[run[0]], blocks[run[1] - 1]
        length = last.position + last.length - first.position
        return memoryview(_get(storage, segment_name, data_object_key, first.position, length))

    if len(runs) == 1:
        yield 0, get(runs[0])
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="block-prefetch") as pool:
        ahead = pool.submit(get, runs[0])
        try:
            for n, run in enumerate(runs):
                data = ahead.result()
                if n + 1 < len(runs):
                    ahead = pool.submit(get, runs[n + 1])
                yield run[0], data
        finally:
            ahead.cancel()  # the caller stopped early: do not start the next GET
            with contextlib.suppress(Exception):  # its failure no longer matters to anyone
                ahead.result()


def _verified_blocks(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: tuple[BlockInfo, ...] | list[BlockInfo],
    first_number: int,
    decode: Callable[[memoryview, str], T],
    chunk_bytes: int | None = None,
    cipher: SegmentCipher | None = None,
) -> Iterator[T]:
    if not blocks:
        return
    runs = chunk_runs(blocks, chunk_bytes) if chunk_bytes else [(0, len(blocks))]
    ends = {start: end for start, end in runs}
    for first, data in _fetched(storage, data_object_key, segment_name, blocks, chunk_bytes):
        base = blocks[first].position
        for i in range(first, ends[first]):
            info = blocks[i]
            number = first_number + i
            rel = info.position - base
            where = f"{data_object_key} block {number}"
            block = data[rel : rel + info.length]
            try:
                if cipher is not None:
                    block = cipher.open_block(block, info.position, where=where)
                check_block(block, info, where)
                decoded = decode(block, where)
            except FormatError as exc:
                raise CorruptObjectError(str(exc), object_key=data_object_key, segment=segment_name) from exc
            yield decoded


def read_block_range(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: tuple[BlockInfo, ...] | list[BlockInfo],
    first_number: int,
    cipher: SegmentCipher | None = None,
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
        cipher=cipher,
    )


@dataclass(frozen=True, slots=True)
class BlockContent:
    """A verified block as stored: its Kafka record batches (format 2; each batch's CRC-32C checked,
    records not decoded) or its records (format 1, decoded)."""

    batches: list[memoryview]
    records: list[KafkaRecord]


def _block_content(block: memoryview, where: str) -> BlockContent:
    header, payload = block_payload(block, where=where)
    if header.format_version == BLOCK_FORMAT_V1:
        return BlockContent([], decode_block(block, where=where))
    batches = block_batches(header, payload, where=where)
    for batch in batches:
        check_batch_crc(batch, where=f"{where} batch at offset {int.from_bytes(batch[:8], 'big')}")
    return BlockContent(batches, [])


def read_block_range_batches(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: tuple[BlockInfo, ...] | list[BlockInfo],
    first_number: int,
    cipher: SegmentCipher | None = None,
) -> Iterator[BlockContent]:
    """``read_block_range`` without decoding records: each block's record batches as archived, for
    bulk readers that hand them on (the restore produces straight from them)."""
    yield from _verified_blocks(
        storage, data_object_key, segment_name, blocks, first_number, _block_content, cipher=cipher
    )


def read_block_range_columns(
    storage: ChunkStorage,
    data_object_key: str,
    segment_name: str,
    blocks: tuple[BlockInfo, ...] | list[BlockInfo],
    first_number: int,
    *,
    min_offset: int | None = None,
    max_offset: int | None = None,
    with_headers: bool = True,
    chunk_bytes: int | None = None,
    cipher: SegmentCipher | None = None,
) -> Iterator[RecordColumns]:
    """``read_block_range`` in columns (``decode_block_columns``), only offsets in
    ``[min_offset, max_offset]``, headers only if ``with_headers``: what bulk readers (Spark) use.
    ``chunk_bytes``: fetch in ranged GETs of about that size, the next while this one decodes."""
    yield from _verified_blocks(
        storage,
        data_object_key,
        segment_name,
        blocks,
        first_number,
        lambda block, where: decode_block_columns(
            block, where=where, min_offset=min_offset, max_offset=max_offset, with_headers=with_headers
        ),
        chunk_bytes,
        cipher,
    )
