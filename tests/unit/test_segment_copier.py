"""The copy protocol above the storage and metadata interfaces (filesystem storage, in-memory sink)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from processor.errors import StorageError
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import MetadataRecord, RemoteLogSegmentMetadata, SegmentState
from processor.segment.blocks import iter_blocks
from processor.segment.index_format import decode_index
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.sealed_segment import SealedSegment
from processor.storage.chunk_storage import Buffer, ChunkInfo
from processor.storage.filesystem import FilesystemChunkStorage
from tests.support.segment_v1_writer import SegmentBuilder


class ListSink:
    def __init__(self) -> None:
        self.records: list[RemoteLogSegmentMetadata] = []

    def publish(self, record: MetadataRecord) -> int:
        assert isinstance(record, RemoteLogSegmentMetadata)
        self.records.append(record)
        return len(self.records) - 1


class FailingIndexStorage(FilesystemChunkStorage):
    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        if key.endswith("-index"):
            raise StorageError("injected failure")
        return super().create(key, parts)


def segment() -> SealedSegment:
    b = SegmentBuilder(2, 10, 256)
    for o in range(12, 40):
        b.append(o, 1, 1000 + o, None, b"value-%d" % o, None)
    return b.seal()


TP = TopicPartition("orders", 2)


def test_copy_publishes_started_uploads_then_finished(tmp_path: Path) -> None:
    storage, sink = FilesystemChunkStorage(tmp_path), ListSink()
    copier = SegmentCopier(storage, sink, ObjectKeyFactory("pre"), "w1", clock_ms=lambda: 7)
    seg = segment()
    done = copier.copy(TP, seg, writer_epoch=4)
    assert [r.state for r in sink.records] == [
        SegmentState.COPY_SEGMENT_STARTED,
        SegmentState.COPY_SEGMENT_FINISHED,
    ]
    assert (done.start_offset, done.end_offset, done.record_count, done.writer_epoch) == (10, 39, 28, 4)
    data = storage.read_all(done.data_object_key)
    assert [r.offset for blk in iter_blocks(data) for r in blk] == list(range(12, 40))
    idx = decode_index(storage.read_all(done.index_object_key))
    assert idx.segment_id == done.segment_id.id and idx.data_object_length == len(data)
    assert (
        done.data_object_key.startswith("pre/orders/2/00000000000000000010-")
        and "-e4.log" in done.data_object_key
    )


def test_failed_copy_cleans_up_and_records_the_deletion(tmp_path: Path) -> None:
    storage, sink = FailingIndexStorage(tmp_path), ListSink()
    copier = SegmentCopier(storage, sink, ObjectKeyFactory(""), "w1")
    with pytest.raises(StorageError):
        copier.copy(TP, segment(), 0)
    assert [r.state for r in sink.records] == [
        SegmentState.COPY_SEGMENT_STARTED,
        SegmentState.DELETE_SEGMENT_STARTED,
        SegmentState.DELETE_SEGMENT_FINISHED,
    ]
    assert list(storage.list("")) == []  # the data object that did upload is gone


def test_each_attempt_gets_a_new_segment_id(tmp_path: Path) -> None:
    storage, sink = FilesystemChunkStorage(tmp_path), ListSink()
    copier = SegmentCopier(storage, sink, ObjectKeyFactory(""), "w1")
    a = copier.copy(TP, segment(), 0)
    b = copier.copy(TP, segment(), 0)
    assert a.segment_id != b.segment_id and a.data_object_key != b.data_object_key
