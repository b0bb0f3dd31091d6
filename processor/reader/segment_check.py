"""The one integrity check of a finished segment's objects, used by every reader and checker (the
remote reader, the block-range reads of Spark and the audit, ``processor verify``).

- :func:`fetch_index`: the segment's index object, checked: its keys are ones the key factory would
  build for this segment's partition, the bytes match the CRC and size the metadata carries, and the
  index describes this segment (id, offsets, data object length). Raises CorruptObjectError, or
  SegmentObjectMissingError when the object is gone.
- :func:`check_block`: a block is the one its index entry names (first and last offsets in its header);
  its CRCs are checked by the decoders themselves.
- :func:`check_segment`: the whole check, as a list of problems rather than an exception: presence and
  sizes of both objects, the index, and the blocks (``all``, a ``sample``: the first, the last and
  a stride in between, or ``none``), the record count against the metadata. Storage outages
  (StorageError other than a missing object) propagate: they are not findings about the segment.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from processor.errors import (
    CorruptObjectError,
    FormatError,
    InvalidNameError,
    ObjectNotFoundError,
    SegmentObjectMissingError,
)
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.segment.block_header import BlockInfo
from processor.segment.blocks import decode_block, decode_block_header
from processor.segment.index_format import SegmentIndex, decode_index
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage

# (object key, start, length) -> bytes; raises ObjectNotFoundError. The remote reader passes its own
# (it counts requests and bytes); the default reads the storage directly.
Get = Callable[[str, int, int], bytes]
Blocks = Literal["all", "sample", "none"]
SAMPLE_BLOCKS = 8


def _where(segment: RemoteLogSegmentMetadata, key: str) -> dict[str, str]:
    return {"object_key": key, "segment": str(segment.segment_id)}


def fetch_index(
    storage: ChunkStorage, keys: ObjectKeyFactory, segment: RemoteLogSegmentMetadata, get: Get | None = None
) -> SegmentIndex:
    """Fetch and verify a segment's index object (one GET); see the module docstring."""
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


@dataclass
class SegmentCheck:
    """What :func:`check_segment` found about one segment (empty lists: nothing)."""

    missing: list[tuple[str, str]] = field(default_factory=list)  # (object key, problem)
    corrupt: list[tuple[str, str]] = field(default_factory=list)
    bytes_read: int = 0
    blocks_checked: int = 0

    @property
    def clean(self) -> bool:
        return not (self.missing or self.corrupt)


def _sampled(n: int, how: Blocks) -> list[int]:
    if how == "none" or n == 0:
        return []
    if how == "all" or n <= SAMPLE_BLOCKS:
        return list(range(n))
    stride = max(1, (n - 1) // (SAMPLE_BLOCKS - 1))
    return sorted({*range(0, n, stride), n - 1})


def check_segment(
    storage: ChunkStorage, keys: ObjectKeyFactory, segment: RemoteLogSegmentMetadata, blocks: Blocks = "all"
) -> SegmentCheck:
    """Check one finished segment's objects; see the module docstring."""
    out = SegmentCheck()
    sizes = (
        (segment.data_object_key, segment.segment_size_in_bytes),
        (segment.index_object_key, segment.index_size_in_bytes),
    )
    for key, size in sizes:
        stat = storage.stat(key)
        if stat is None:
            out.missing.append((key, "object is missing"))
        elif stat.size != size:
            out.corrupt.append((key, f"size {stat.size}, the metadata says {size}"))
    if out.missing or out.corrupt:
        return out
    try:
        index = fetch_index(storage, keys, segment)
        out.bytes_read += segment.index_size_in_bytes
        infos = index.blocks
        records = 0
        for number in _sampled(len(infos), blocks):
            entry = infos[number]
            where = f"{segment.data_object_key} block {number}"
            block = memoryview(storage.read(segment.data_object_key, entry.position, entry.length))
            out.bytes_read += len(block)
            check_block(block, entry, where)
            records += len(decode_block(block, where=where))
            out.blocks_checked += 1
        if blocks == "all" and records != segment.record_count:
            out.corrupt.append(
                (
                    segment.data_object_key,
                    f"{records} records in the blocks, the metadata says {segment.record_count}",
                )
            )
    except (SegmentObjectMissingError, ObjectNotFoundError) as exc:  # gone between the stat and the read
        out.missing.append((getattr(exc, "object_key", None) or segment.data_object_key, str(exc)))
    except CorruptObjectError as exc:
        out.corrupt.append((exc.object_key or segment.index_object_key, str(exc)))
    except FormatError as exc:
        out.corrupt.append((segment.data_object_key, str(exc)))
    return out
