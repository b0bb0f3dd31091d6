"""The one integrity check of a finished segment (processor/reader/segment_check.py), on real objects:
a segment copied by the copier to a filesystem store, then damaged in the ways a bucket can be."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from processor.errors import CorruptObjectError, SegmentObjectMissingError
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.segment_blocks import fetch_index
from processor.reader.segment_check import check_segment
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_segment_copier import TP, ListSink, segment

KEYS = ObjectKeyFactory("p")


def copied(tmp_path: Path) -> tuple[FilesystemChunkStorage, RemoteLogSegmentMetadata]:
    storage = FilesystemChunkStorage(tmp_path)
    done = SegmentCopier(storage, ListSink(), KEYS, "w").copy(TP, segment(), 1)
    return storage, done


def rewrite(storage: FilesystemChunkStorage, key: str, change: bytes | None, at: int = -1) -> None:
    data = bytearray(storage.read_all(key))
    storage.delete(key)
    if change is None:
        storage.create(key, [bytes(data[: len(data) // 2])])  # truncated
    else:
        data[at] ^= change[0]
        storage.create(key, [bytes(data)])


def test_a_sound_segment_is_clean_in_every_mode(tmp_path: Path) -> None:
    storage, seg = copied(tmp_path)
    for blocks in ("all", "sample", "none"):
        found = check_segment(storage, KEYS, seg, blocks)
        assert found.clean, (blocks, found)
    assert check_segment(storage, KEYS, seg).blocks_checked == len(fetch_index(storage, KEYS, seg).blocks)


@pytest.mark.parametrize("which", ["data", "index"])
def test_a_missing_object_is_missing(tmp_path: Path, which: str) -> None:
    storage, seg = copied(tmp_path)
    storage.delete(seg.data_object_key if which == "data" else seg.index_object_key)
    found = check_segment(storage, KEYS, seg)
    assert [k for k, _ in found.missing] == [seg.data_object_key if which == "data" else seg.index_object_key]
    if which == "index":
        with pytest.raises(SegmentObjectMissingError):
            fetch_index(storage, KEYS, seg)


def test_a_truncated_object_is_a_finding_not_an_abort(tmp_path: Path) -> None:
    storage, seg = copied(tmp_path)
    rewrite(storage, seg.data_object_key, None)
    found = check_segment(storage, KEYS, seg)
    assert [p.kind for p in found.problems] == ["truncated_object"] and found.corrupt


def test_flipped_bytes_are_corrupt(tmp_path: Path) -> None:
    storage, seg = copied(tmp_path)
    rewrite(storage, seg.data_object_key, b"\x01", at=-3)  # inside the last block's payload
    assert check_segment(storage, KEYS, seg).corrupt
    assert check_segment(storage, KEYS, seg, "sample").corrupt, "the last block is always sampled"
    storage2, seg2 = copied(tmp_path / "b")
    rewrite(storage2, seg2.index_object_key, b"\x01", at=10)
    with pytest.raises(CorruptObjectError):
        fetch_index(storage2, KEYS, seg2)
    assert check_segment(storage2, KEYS, seg2).corrupt


def test_metadata_that_disagrees_with_the_objects_is_corrupt(tmp_path: Path) -> None:
    storage, seg = copied(tmp_path)
    assert check_segment(storage, KEYS, dataclasses.replace(seg, record_count=seg.record_count - 1)).corrupt
    other = dataclasses.replace(
        seg, data_object_key="elsewhere/x.log", index_object_key="elsewhere/x.log-index"
    )
    with pytest.raises(CorruptObjectError, match="outside the segment's prefix"):
        fetch_index(storage, KEYS, other)
