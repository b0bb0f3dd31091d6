"""Reads one archived segment back for a rewrite (a merge or an erasure): its record batches as
stored, each verified as any reader verifies it (the block checks, CRC-32C of every batch, the
segment's data key where it is encrypted), and its record count checked against its metadata, so a
rewrite never carries on what does not read back as the metadata says (I/O: the storage reads)."""

from __future__ import annotations

from dataclasses import dataclass

from processor.errors import CorruptObjectError
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.segment_blocks import fetch_index, read_block_range_batches
from processor.reader.segment_keys import SegmentDecryption
from processor.segment.entries_v2 import parse_batch_header
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
) -> SourceContent:
    """Raises CorruptObjectError (a block that does not verify, a record count that is not the
    metadata's), SegmentObjectMissingError, SegmentKeyError."""
    name = str(source.segment_id)
    cipher = decryption.cipher(source)
    index = fetch_index(storage, keys, source, cipher=cipher)
    batches: list[memoryview] = []
    records: list[KafkaRecord] = []
    blocks = read_block_range_batches(storage, source.data_object_key, name, index.blocks, 0, cipher=cipher)
    for content in blocks:
        batches += content.batches
        records += content.records
    count = len(records) + sum(parse_batch_header(b).record_count for b in batches)
    if count != source.record_count:
        raise CorruptObjectError(
            f"holds {count} records, its metadata says {source.record_count}",
            object_key=source.data_object_key,
            segment=name,
        )
    return SourceContent(batches, records)
