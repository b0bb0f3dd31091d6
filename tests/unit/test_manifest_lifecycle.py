"""Segment manifests through a segment's life: written once its FINISHED is accepted (never for a
rejected copy), deleted before anything else of a deletion, written by the owner where missing."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from processor import metrics
from processor.errors import FencedWriterError, StorageError
from processor.leader.segment_copier import SegmentCopier
from processor.lifecycle.retention_policy import RetentionLimits, plan_retention
from processor.lifecycle.sweep import write_missing_manifests
from processor.metadata.manifest import decode_manifest, manifest_key
from processor.metadata.model import ClaimKind, PartitionClaim, RemoteLogSegmentMetadata, SegmentState
from processor.segment.object_keys import KEY_FILTER_SUFFIX, ObjectKeyFactory
from processor.storage.chunk_storage import Buffer, ChunkInfo
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_segment_copier import TP, ListSink, segment
from tests.unit.test_segment_deleter import TP as DELETER_TP
from tests.unit.test_segment_deleter import FailingDeletes, Journal, claimed, copy_segments, deleter_for

CLAIM = uuid.uuid4()


class OrderedStorage(FailingDeletes):
    """Filesystem storage that journals its deletes, and can fail manifest creates."""

    def __init__(self, root: Path, fail_manifests: bool = False) -> None:
        super().__init__(root)
        self.deleted: list[str] = []
        self.fail_manifests = fail_manifests

    def delete(self, key: str) -> None:
        self.deleted.append(key)
        super().delete(key)

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        if self.fail_manifests and key.endswith("-manifest"):
            raise StorageError("injected manifest failure", retriable=False)
        return super().create(key, parts)


def copier(storage: FilesystemChunkStorage, outcome: bool | None = True) -> SegmentCopier:
    return SegmentCopier(
        storage,
        ListSink(),
        ObjectKeyFactory("pre"),
        "w1",
        confirm=lambda record, _offset: (
            True if record.state is SegmentState.COPY_SEGMENT_STARTED else outcome
        ),
        claim_id=lambda tp, epoch: CLAIM if (tp, epoch) == (TP, 4) else None,
    )


def test_an_accepted_copy_gets_its_manifest(tmp_path: Path) -> None:
    storage = FilesystemChunkStorage(tmp_path)
    done = copier(storage).copy(TP, segment(), writer_epoch=4)
    manifest = decode_manifest(storage.read_all(manifest_key(done.data_object_key)))
    assert manifest.segment == done and manifest.claim_id == CLAIM


def test_a_rejected_copy_leaves_no_manifest(tmp_path: Path) -> None:
    storage = FilesystemChunkStorage(tmp_path)
    with pytest.raises(FencedWriterError):
        copier(storage, outcome=False).copy(TP, segment(), writer_epoch=4)
    assert list(storage.list("")) == []  # objects deleted, no manifest ever written
    unknown = FilesystemChunkStorage(tmp_path / "unknown")
    with pytest.raises(FencedWriterError):
        copier(unknown, outcome=None).copy(TP, segment(), writer_epoch=4)
    assert not [i.key for i in unknown.list("") if i.key.endswith("-manifest")]  # the owner cleans up


def test_a_manifest_that_cannot_be_written_does_not_fail_the_copy(tmp_path: Path) -> None:
    storage = OrderedStorage(tmp_path, fail_manifests=True)
    before = metrics.MANIFEST_WRITE_FAILURES._value.get()
    done = copier(storage).copy(TP, segment(), writer_epoch=4)
    assert done.state is SegmentState.COPY_SEGMENT_FINISHED
    assert metrics.MANIFEST_WRITE_FAILURES._value.get() - before == 1
    assert storage.stat(manifest_key(done.data_object_key)) is None


def with_manifests(storage: FilesystemChunkStorage, segs: list[RemoteLogSegmentMetadata]) -> None:
    from processor.metadata.manifest import SegmentManifest, encode_manifest

    for s in segs:
        storage.create(manifest_key(s.data_object_key), [encode_manifest(SegmentManifest(s, None))])


def test_a_deletion_removes_each_manifest_before_its_objects_once_its_delete_is_accepted(
    tmp_path: Path,
) -> None:
    storage = OrderedStorage(tmp_path)
    segs = copy_segments(storage, 3)
    with_manifests(storage, segs)
    _state, epoch = claimed(segs)
    plan = plan_retention(segs, RetentionLimits(retention_ms=1_000), now_ms=10_000)
    out = deleter_for(storage, Journal(), clock_ms=lambda: 9_000).execute(
        DELETER_TP, plan, writer_epoch=epoch
    )
    assert out.deleted == segs and list(storage.list("")) == []
    # the manifests of every segment first (a rebuild never brings back a segment whose objects
    # went), and only once their DELETE_SEGMENT_STARTED were accepted: a pass stopped (fenced) before
    # that leaves the served segment its manifest, the proof that it was acknowledged; then each
    # one's other objects (its key filter last: a segment may have none, deleting a missing object
    # is no error)
    assert storage.deleted[: len(segs)] == [manifest_key(s.data_object_key) for s in segs]
    for i, s in enumerate(segs):
        at = len(segs) + 3 * i
        assert storage.deleted[at : at + 3] == [
            s.data_object_key,
            s.index_object_key,
            s.data_object_key + KEY_FILTER_SUFFIX,
        ]


def test_the_owner_writes_missing_manifests_of_served_segments(tmp_path: Path) -> None:
    storage = FilesystemChunkStorage(tmp_path)
    segs = copy_segments(storage, 3)
    with_manifests(storage, segs[:1])
    state, _epoch = claimed(segs)
    state.apply(PartitionClaim(DELETER_TP, uuid.uuid4(), ClaimKind.LEAD, "w2", 2))
    before = metrics.MANIFESTS_BACKFILLED._value.get()
    assert write_missing_manifests(DELETER_TP, state.partition(DELETER_TP), storage) == 2
    assert metrics.MANIFESTS_BACKFILLED._value.get() - before == 2
    for s in segs:
        assert decode_manifest(storage.read_all(manifest_key(s.data_object_key))).segment == s
    assert write_missing_manifests(DELETER_TP, state.partition(DELETER_TP), storage) == 0
