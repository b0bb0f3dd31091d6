"""Block-level reads of one segment: the chosen blocks come back verified; wrong bytes never do."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from processor.errors import CorruptObjectError, SegmentObjectMissingError
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import MetadataRecord
from processor.reader.segment_blocks import fetch_index, read_block_range
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage
from tests.support.segment_v1_writer import SegmentBuilder


class ListSink:
    def __init__(self) -> None:
        self.records: list[MetadataRecord] = []

    def publish(self, record: MetadataRecord) -> int:
        self.records.append(record)
        return len(self.records) - 1


def test_blocks_in_a_range_are_verified_and_corruption_is_caught(tmp_path: Path) -> None:
    storage, keys = FilesystemChunkStorage(tmp_path), ObjectKeyFactory("p")
    b = SegmentBuilder(0, 0, 512)
    for o in range(100):
        b.append(o, 1, 1000 + o, b"k", b"v" * 50, [("h", None)])
    seg = SegmentCopier(storage, ListSink(), keys, "w").copy(TopicPartition("t", 0), b.seal(), 0)
    index = fetch_index(storage, keys, seg)
    assert len(index.blocks) > 4
    got = list(read_block_range(storage, seg.data_object_key, "s", index.blocks[2:4], 2))
    assert [r.offset for blk in got for r in blk] == list(
        range(index.blocks[2].first_offset, index.blocks[3].last_offset + 1)
    )
    b2, b3 = index.blocks[2], index.blocks[3]
    lying = dataclasses.replace(b3, first_offset=b2.first_offset, last_offset=b2.last_offset)
    with pytest.raises(CorruptObjectError, match="index entry"):  # block 3's bytes named as block 2
        list(read_block_range(storage, seg.data_object_key, "s", [lying], 3))
    data = bytearray(storage.read_all(seg.data_object_key))
    data[index.blocks[2].position + BLOCK_HEADER_LEN + 3] ^= 1
    storage.delete(seg.data_object_key)
    storage.create(seg.data_object_key, [bytes(data)])
    list(read_block_range(storage, seg.data_object_key, "s", index.blocks[0:2], 0))  # untouched blocks
    with pytest.raises(CorruptObjectError, match="CRC"):
        list(read_block_range(storage, seg.data_object_key, "s", index.blocks[2:3], 2))
    storage.delete(seg.index_object_key)
    with pytest.raises(SegmentObjectMissingError):
        fetch_index(storage, keys, seg)
