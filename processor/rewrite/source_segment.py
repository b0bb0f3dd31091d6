"""Reads one archived segment back for a rewrite (a merge or an erasure): its record batches as
stored, each verified as any reader verifies it (the block checks, CRC-32C of every batch, the
segment's data key where it is encrypted), and its record count checked against its metadata, so a
rewrite never carries on what does not read back as the metadata says (I/O: the storage reads).

With ``gets`` (a merge reading many small sources), the data object is fetched whole on that pool
while the index is fetched here: one round trip a source instead of two in a row, the same checks
(the data key is checked to be the segment's own before it is asked for, and every block is
verified against the index entry that names it once the index has been verified)."""

from __future__ import annotations

import contextlib
from concurrent.futures import Executor, Future
from dataclasses import dataclass

from processor.errors import (
    CorruptObjectError,
    FormatError,
    InvalidNameError,
    ObjectNotFoundError,
    SegmentObjectMissingError,
)
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.segment_blocks import _block_content as block_content
from processor.reader.segment_blocks import check_block, fetch_index, read_block_range_batches
from processor.reader.segment_keys import SegmentDecryption
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord
from processor.storage.chunk_storage import ChunkStorage


@dataclass(frozen=True, slots=True)
class SourceContent:
    """A segment as archived: its batches (format 2) or, for a segment of format 1 (records re-encoded
    by earlier versions, one entry a record), its decoded records."""

    batches: list[memoryview]
    records: list[KafkaRecord]


def read_source(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    source: RemoteLogSegmentMetadata,
    decryption: SegmentDecryption,
    gets: Executor | None = None,
) -> SourceContent:
    """Raises CorruptObjectError (a block that does not verify, a record count that is not the
    metadata's), SegmentObjectMissingError, SegmentKeyError. ``gets``: fetch the data object there,
    at the same time as the index (see the module docstring)."""
    name = str(source.segment_id)
    cipher = decryption.cipher(source)
    data = _fetch_data(storage, keys, source, gets) if gets is not None else None
    try:
        index = fetch_index(storage, keys, source, cipher=cipher)
    except BaseException:
        if data is not None and not data.cancel():
            with contextlib.suppress(Exception):  # the index's error is the one raised
                data.result()
        raise
    batches: list[memoryview] = []
    records: list[KafkaRecord] = []
    if data is None:
        blocks = read_block_range_batches(
            storage, source.data_object_key, name, index.blocks, 0, cipher=cipher
        )
        for content in blocks:
            batches += content.batches
            records += content.records
    else:
        _verify_blocks(source, index, memoryview(data.result()), decryption, batches, records)
    count = len(records) + sum(parse_batch_header(b).record_count for b in batches)
    if count != source.record_count:
        raise CorruptObjectError(
            f"holds {count} records, its metadata says {source.record_count}",
            object_key=source.data_object_key,
            segment=name,
        )
    return SourceContent(batches, records)


def _fetch_data(
    storage: ChunkStorage, keys: ObjectKeyFactory, source: RemoteLogSegmentMetadata, gets: Executor
) -> Future[bytes]:
    """The whole data object, on ``gets``; its key checked first to be one of the segment's own
    (metadata is input: a record naming another partition's object never makes this read it)."""
    tp = source.topic_partition
    key = source.data_object_key
    try:
        keys.check_segment_key(key, tp.topic, tp.partition)
    except InvalidNameError as exc:
        raise CorruptObjectError(
            f"metadata names an object outside the segment's prefix: {exc}",
            object_key=key,
            segment=str(source.segment_id),
        ) from exc

    def get() -> bytes:
        if source.segment_size_in_bytes <= 0:
            return b""
        try:
            return storage.read(key, 0, source.segment_size_in_bytes)
        except ObjectNotFoundError as exc:
            raise SegmentObjectMissingError(
                "object is missing", object_key=key, segment=str(source.segment_id)
            ) from exc

    return gets.submit(get)


def _verify_blocks(
    source: RemoteLogSegmentMetadata,
    index: SegmentIndex,
    data: memoryview,
    decryption: SegmentDecryption,
    batches: list[memoryview],
    records: list[KafkaRecord],
) -> None:
    """Every block the (verified) index names, checked as the block reader checks it: opened with
    the segment's key where it is encrypted, its header naming the index entry's offsets, its CRCs,
    the CRC-32C of each of its batches."""
    key = source.data_object_key
    cipher = decryption.cipher(source)
    for number, info in enumerate(index.blocks):
        where = f"{key} block {number}"
        block = data[info.position : info.position + info.length]
        try:
            if cipher is not None:
                block = cipher.open_block(block, info.position, where=where)
            check_block(block, info, where)
            content = block_content(block, where)
        except FormatError as exc:
            raise CorruptObjectError(str(exc), object_key=key, segment=str(source.segment_id)) from exc
        batches += content.batches
        records += content.records
