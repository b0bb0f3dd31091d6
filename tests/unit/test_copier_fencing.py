"""The copier's epoch fence and read-your-write check; the leadership bookkeeping of rebalances."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from processor.follower.cache_writes import ApplyResult
from processor.leader.leadership import Leadership
from processor.leader.segment_copier import FencedWriterError, SegmentCopier
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicPartition
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_segment_copier import TP, ListSink, segment

S = SegmentState


def test_a_copier_behind_a_newer_epoch_publishes_and_uploads_nothing(tmp_path: Path) -> None:
    storage, sink = FilesystemChunkStorage(tmp_path), ListSink()
    copier = SegmentCopier(storage, sink, ObjectKeyFactory(""), "w1", newest_epoch=lambda tp: 5)
    with pytest.raises(FencedWriterError):
        copier.copy(TP, segment(), writer_epoch=4)
    assert sink.records == [] and list(storage.list("")) == []
    assert copier.copy(TP, segment(), writer_epoch=5).state is S.COPY_SEGMENT_FINISHED


def test_a_rejected_started_uploads_nothing_and_a_rejected_finished_deletes_its_objects(
    tmp_path: Path,
) -> None:
    storage, sink = FilesystemChunkStorage(tmp_path), ListSink()
    reject: set[SegmentState] = {S.COPY_SEGMENT_STARTED}

    def accepted(record: RemoteLogSegmentMetadata, offset: int) -> bool:
        return record.state not in reject

    copier = SegmentCopier(storage, sink, ObjectKeyFactory(""), "w1", accepted=accepted)
    with pytest.raises(FencedWriterError):
        copier.copy(TP, segment(), 1)
    assert [r.state for r in sink.records] == [S.COPY_SEGMENT_STARTED]
    assert list(storage.list("")) == []
    reject = {S.COPY_SEGMENT_FINISHED}
    sink.records.clear()
    with pytest.raises(FencedWriterError):
        copier.copy(TP, segment(), 1)
    assert sink.records[1].state is S.COPY_SEGMENT_FINISHED
    assert list(storage.list("")) == []  # the zombie removed what nobody references


def test_topic_ids_go_into_the_segment_id_and_the_keys(tmp_path: Path) -> None:
    tid = str(uuid.uuid4())
    copier = SegmentCopier(
        FilesystemChunkStorage(tmp_path), ListSink(), ObjectKeyFactory("p"), "w1", topic_ids={TP.topic: tid}
    )
    done = copier.copy(TP, segment(), 0)
    assert done.segment_id.topic_id == tid and done.data_object_key.startswith(f"p/{TP.topic}-{tid}/2/")


class FakeEngine:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[TopicPartition], int | None]] = []
        self.revoked = threading.Event()

    def assign(self, tps: list[TopicPartition], epoch: int) -> None:
        self.calls.append(("assign", list(tps), epoch))

    def revoke(self, tps: list[TopicPartition]) -> None:
        self.calls.append(("revoke", list(tps), None))
        self.revoked.set()


def tps(*ps: int) -> list[TopicPartition]:
    return [TopicPartition("t", p) for p in ps]


def test_rebalances_revoke_only_what_left_and_assign_only_what_is_new() -> None:
    engine = FakeEngine()
    lead = Leadership(engine)  # type: ignore[arg-type]
    lead.assigned(tps(0, 1, 2, 3), 1)
    lead.revoked(tps(0, 1, 2, 3))  # eager protocol: everything, then the new assignment
    lead.assigned(tps(0, 1, 4), 2)
    assert engine.calls == [
        ("assign", tps(0, 1, 2, 3), 1),
        ("revoke", tps(2, 3), None),
        ("assign", tps(4), 2),
    ]
    assert lead.leading == {**dict.fromkeys(tps(0, 1), 1), TopicPartition("t", 4): 2}


def test_a_newer_epoch_on_a_led_partition_revokes_it_at_once() -> None:
    engine = FakeEngine()
    lead = Leadership(engine)  # type: ignore[arg-type]
    lead.assigned(tps(0, 1), 3)
    lead.on_metadata(ApplyResult(epochs={TopicPartition("t", 0): 3, TopicPartition("t", 1): 4}))
    assert engine.revoked.wait(5)
    time.sleep(0.05)
    assert engine.calls[-1] == ("revoke", tps(1), None)
    assert set(lead.leading) == set(tps(0)) and lead.fenced_revocations == 1
