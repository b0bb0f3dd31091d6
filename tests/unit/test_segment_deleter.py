"""The deleter's order (start offset first, STARTED, objects, FINISHED, tombstone) and its failure path."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from processor import metrics
from processor.errors import FencedWriterError, StorageError
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_retries import retry_failed
from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import DeleteReason, RetentionLimits, plan_retention
from processor.lifecycle.retention_service import RetentionService, StateView
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.model import (
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
)
from processor.metadata.remote_log_state import RemoteLogState
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import Buffer, ChunkInfo
from processor.storage.filesystem import FilesystemChunkStorage

TP = TopicPartition("orders", 0)
S = SegmentState


class Journal:
    """Records, in order, what the deleter publishes (metadata, tombstones, failed deletions)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object]] = []

    def publish(self, record: MetadataRecord) -> int:
        self.events.append(("publish", record))
        return len(self.events)

    def tombstone(self, segment: RemoteLogSegmentMetadata) -> int:
        self.events.append(("tombstone", segment.segment_id.id))
        return len(self.events)

    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None:
        self.events.append(("failed", segment.segment_id.id))

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None:
        self.events.append(("resolved", segment.segment_id.id))


def _published_deletes(journal: Journal) -> dict[object, RemoteLogSegmentMetadata]:
    """The last DELETE_SEGMENT_STARTED the deleter published of each segment (what readers hold)."""
    return {
        r.segment_id.id: r
        for kind, r in journal.events
        if kind == "publish"
        and isinstance(r, RemoteLogSegmentMetadata)
        and r.state is S.DELETE_SEGMENT_STARTED
    }


class FailingDeletes(FilesystemChunkStorage):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.fail = False

    def delete(self, key: str) -> None:
        if self.fail:
            raise StorageError("injected delete failure")
        super().delete(key)

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        return super().create(key, parts)


def copy_segments(
    storage: FilesystemChunkStorage, n: int, max_ts: int = 1_000
) -> list[RemoteLogSegmentMetadata]:
    """``n`` finished segments of 10 offsets each, with their two objects in ``storage`` (the
    deleter never reads object contents, so they are placeholders)."""
    keys = ObjectKeyFactory("p")
    out = []
    for i in range(n):
        sid = RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4())
        k = keys.segment(TP.topic, TP.partition, i * 10, sid.id, 2)
        storage.create(k.data, [b"data" * 25])
        storage.create(k.index, [b"index"])
        out.append(
            RemoteLogSegmentMetadata(
                sid,
                i * 10,
                i * 10 + 9,
                max_ts,
                5_000,
                "w",
                2,
                ((0, i * 10),),
                100,
                S.COPY_SEGMENT_FINISHED,
                k.data,
                k.index,
                1,
                10,
                0,
                5,
            )
        )
    return out


def accept_all(record: MetadataRecord, offset: int) -> bool:
    return True


def deleter_for(storage: FailingDeletes, journal: Journal, **kw: Any) -> SegmentDeleter:
    return SegmentDeleter(
        storage, journal, journal, journal, "w-ret", ObjectKeyFactory("p"), accept_all, **kw
    )


def claimed(
    segs: list[RemoteLogSegmentMetadata], *more: RemoteLogSegmentMetadata
) -> tuple[RemoteLogState, int]:
    """The segments folded, then a claim of the partition: the state and the claim's epoch."""
    state = RemoteLogState()
    for s in [*segs, *more]:
        state.apply(s)
    return state, state.apply(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w-ret", 1))


def test_deletes_in_kafka_order_and_leaves_no_objects(tmp_path: Path) -> None:
    storage = FailingDeletes(tmp_path)
    segs = copy_segments(storage, 3)
    journal = Journal()
    deleter = deleter_for(storage, journal, clock_ms=lambda: 9_000)
    state, epoch = claimed(segs)
    plan = plan_retention(segs, RetentionLimits(retention_ms=1_000), now_ms=10_000)
    before = metrics.SEGMENTS_DELETED.labels("time")._value.get()
    out = deleter.execute(TP, plan, writer_epoch=epoch)
    assert out.deleted == segs and out.failed == [] and out.log_start_offset == 30
    kinds = [(k, type(v).__name__ if k == "publish" else None) for k, v in journal.events]
    assert kinds[0] == ("publish", "RemoteLogStartOffset"), "the start offset moves before anything goes"
    start = journal.events[0][1]
    assert (
        isinstance(start, RemoteLogStartOffset) and start.start_offset == 30 and start.writer_epoch == epoch
    )
    per_segment = journal.events[1:]
    assert len(per_segment) == 2 * len(segs), "no tombstone yet: the next pass forgets the segments"
    # every STARTED first (published together, confirmed before any object goes), oldest first, then
    # every FINISHED
    for i, seg in enumerate(segs):
        started, finished = per_segment[i], per_segment[len(segs) + i]
        assert (
            isinstance(started[1], RemoteLogSegmentMetadata)
            and started[1].segment_id == seg.segment_id
            and started[1].state is S.DELETE_SEGMENT_STARTED
            and started[1].replaces_state is S.COPY_SEGMENT_FINISHED  # conditional on what was planned
        )
        assert isinstance(finished[1], RemoteLogSegmentMetadata) and finished[1].segment_id == seg.segment_id
        assert finished[1].state is S.DELETE_SEGMENT_FINISHED and finished[1].writer_id == "w-ret"
    assert list(storage.list("")) == []
    assert metrics.SEGMENTS_DELETED.labels("time")._value.get() - before == 3
    # the records fold: every segment ends DELETE_SEGMENT_FINISHED, the start offset is 30
    for _k, v in journal.events:
        if isinstance(v, (RemoteLogSegmentMetadata, RemoteLogStartOffset)):
            state.apply(v)
    part = state.partition(TP)
    assert part.log_start_offset == 30 and part.finished() == []


def test_failed_deletes_are_queued_counted_and_retried(tmp_path: Path) -> None:
    storage = FailingDeletes(tmp_path)
    segs = copy_segments(storage, 2)
    journal = Journal()
    deleter = deleter_for(storage, journal)
    storage.fail = True
    failures = metrics.DELETE_FAILURES._value.get()
    out = deleter.execute(TP, plan_retention(segs, RetentionLimits(retention_bytes=0), 10_000), 2)
    assert out.deleted == [] and [s for s, _ in out.failed] == segs
    assert metrics.DELETE_FAILURES._value.get() - failures == 2
    assert [k for k, _ in journal.events].count("failed") == 2
    assert [k for k, _ in journal.events].count("tombstone") == 0
    assert len(list(storage.list(""))) == 4, "objects stay until a retry deletes them"
    # segments are now DELETE_SEGMENT_STARTED (the records it published): the next plan requeues
    # them, and they go (deletions this deleter started)
    stuck = list(_published_deletes(journal).values())
    plan = plan_retention(stuck, RetentionLimits(), 10_000)
    assert plan.requeue == tuple(stuck)
    storage.fail = False
    journal.events.clear()
    out = deleter.execute(TP, plan, 2)
    assert out.deleted == stuck and list(storage.list("")) == []
    # each deletion stated again (confirmed) before its objects go, then finished
    assert [k for k, _ in journal.events] == ["publish"] * 4 + ["resolved"] * 2
    states = [r.state for _, r in journal.events if isinstance(r, RemoteLogSegmentMetadata)]
    assert states == [S.DELETE_SEGMENT_STARTED] * 2 + [S.DELETE_SEGMENT_FINISHED] * 2


def test_a_retried_deletion_the_readers_refuse_deletes_nothing(tmp_path: Path) -> None:
    """A deletion found in a view that is stale by now (the claim taken since, the segment served
    again): stated again, the readers refuse it, and every object stays."""
    storage = FailingDeletes(tmp_path)
    (seg,) = copy_segments(storage, 1)
    journal = Journal()
    deleter = SegmentDeleter(
        storage, journal, journal, journal, "w-ret", ObjectKeyFactory("p"), lambda record, offset: False
    )
    stuck = seg.deleting(2, "w-ret", 2)
    deleter.started[seg.segment_id.id] = (stuck.writer_epoch, stuck.event_timestamp_ms)  # its own
    with pytest.raises(FencedWriterError):
        deleter.execute(TP, plan_retention([stuck], RetentionLimits(), 10_000), 2)
    out = retry_failed(deleter, [seg], 2, lambda s: stuck)
    assert out.deleted == [] and out.failed == []
    assert len(list(storage.list(""))) == 2, "data and index stay"
    assert [k for k, _ in journal.events] == ["publish", "publish"]  # the two refused statements


def test_retry_from_the_deletion_topic_finishes_the_segment(tmp_path: Path) -> None:
    storage = FailingDeletes(tmp_path)
    (seg,) = copy_segments(storage, 1)
    journal = Journal()
    deleter = deleter_for(storage, journal)
    stuck = seg.with_state(S.DELETE_SEGMENT_STARTED, 2)
    deleter.started[seg.segment_id.id] = (stuck.writer_epoch, stuck.event_timestamp_ms)  # its own

    def readers_hold(s: RemoteLogSegmentMetadata) -> RemoteLogSegmentMetadata:
        return _published_deletes(journal).get(seg.segment_id.id, stuck)

    storage.fail = True
    assert retry_failed(deleter, [seg], 3, readers_hold).failed
    storage.fail = False
    out = retry_failed(deleter, [seg], 3, readers_hold)
    assert [s.segment_id for s in out.deleted] == [stuck.segment_id] and list(storage.list("")) == []
    assert [k for k, _ in journal.events] == ["publish", "publish", "publish", "resolved"]
    again = journal.events[1][1]  # stated again under its claim before the objects went
    assert isinstance(again, RemoteLogSegmentMetadata) and again.state is S.DELETE_SEGMENT_STARTED
    finished = journal.events[2][1]
    assert isinstance(finished, RemoteLogSegmentMetadata) and finished.state is S.DELETE_SEGMENT_FINISHED
    assert finished.writer_epoch == 3


def test_service_deletes_only_led_partitions_and_reports_persistent_failures(tmp_path: Path) -> None:
    from processor.health import HEALTH

    HEALTH.reset()
    storage = FailingDeletes(tmp_path)
    segs = copy_segments(storage, 2)
    state, epoch = claimed(segs)
    journal = Journal()
    deleter = deleter_for(storage, journal)
    service = RetentionService(
        RetentionConfig(RetentionLimits(), (("orders", "bytes", 0),)),
        StateView(state.partitions),
        deleter,
        None,
        clock_ms=lambda: 10_000,
    )
    assert service.run_pass({}).outcome.deleted == []  # leads nothing: deletes nothing
    assert journal.events == []
    storage.fail = True
    for _ in range(3):
        service.run_pass({TP: epoch})
    assert [p.component for p in HEALTH.problems()] == ["retention"]
    storage.fail = False
    stuck, epoch = claimed(segs, *_published_deletes(journal).values())
    service.view = StateView(stuck.partitions)
    result = service.run_pass({TP: epoch})
    assert len(result.outcome.deleted) == 2 and result.ok
    assert HEALTH.problems() == []
    assert {r for r in DeleteReason} >= {DeleteReason.RETRY}
