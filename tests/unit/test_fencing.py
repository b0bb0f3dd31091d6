"""The fold's rules for partitions written before claims existed (the newest writer epoch wins),
topic-id lineages and the cleanup list of the remote state. Pure. (Claims: test_claims.py.)"""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.kafka.partition import TopicPartition
from processor.metadata.fencing import OLD_TOPIC_ID, STALE_EPOCH, RejectedRecordError
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.metadata.remote_log_state import PartitionRemoteState, RemoteLogState, stamped
from processor.segment.object_keys import ObjectKeyFactory

TP = TopicPartition("t", 0)
S = SegmentState
OLD_ID = str(uuid.UUID(int=1))
NEW_ID = str(uuid.UUID(int=2))


def seg(
    start: int,
    end: int,
    state: SegmentState = S.COPY_SEGMENT_FINISHED,
    epoch: int = 0,
    topic_id: str | None = None,
) -> RemoteLogSegmentMetadata:
    sid = RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4(), topic_id)
    keys = ObjectKeyFactory("p").segment(TP.topic, TP.partition, start, sid.id, epoch, topic_id)
    return RemoteLogSegmentMetadata(
        sid,
        start,
        end,
        0,
        0,
        f"w{epoch}",
        epoch,
        ((0, start),),
        1,
        state,
        keys.data,
        keys.index,
        1,
        end - start + 1,
        0,
        1,
    )


def to(
    s: RemoteLogSegmentMetadata, state: SegmentState, epoch: int | None = None
) -> RemoteLogSegmentMetadata:
    return dataclasses.replace(s, state=state, writer_epoch=s.writer_epoch if epoch is None else epoch)


class Folded:
    """One partition folded through the one fold; reads its remote state as the leader would."""

    def __init__(self) -> None:
        self.log = RemoteLogState()
        self.current_topic_id: str | None = None

    def apply(self, record: RemoteLogSegmentMetadata) -> None:
        self.log.apply(record)

    def view(self) -> PartitionRemoteState:
        part = self.log.partition(TP)
        part.current_topic_id = self.current_topic_id
        return part

    def __getattr__(self, name: str) -> Any:
        return getattr(self.view(), name)


def fold(*records: RemoteLogSegmentMetadata) -> Folded:
    state = Folded()
    for r in records:
        state.apply(r)
    return state


def test_a_failed_delete_stays_in_the_cleanup_list() -> None:
    """DELETE_SEGMENT_STARTED without FINISHED (its objects may still be there) is retried."""
    a = seg(0, 9, S.COPY_SEGMENT_STARTED)
    b = seg(0, 9, S.COPY_SEGMENT_STARTED)
    state = fold(a, b, to(a, S.DELETE_SEGMENT_STARTED), to(b, S.DELETE_SEGMENT_STARTED))
    state.apply(to(b, S.DELETE_SEGMENT_FINISHED))
    assert [s.segment_id for s in state.dangling()] == [a.segment_id]
    assert state.dangling()[0].state is S.DELETE_SEGMENT_STARTED


def test_records_from_an_older_epoch_are_rejected_in_every_state() -> None:
    started = seg(0, 9, S.COPY_SEGMENT_STARTED, epoch=3)
    state = fold(started, seg(10, 19, S.COPY_SEGMENT_STARTED, epoch=5))
    for record in (
        seg(20, 29, S.COPY_SEGMENT_STARTED, epoch=4),
        to(started, S.COPY_SEGMENT_FINISHED),
        to(started, S.DELETE_SEGMENT_STARTED),
    ):
        with pytest.raises(RejectedRecordError) as exc:
            state.apply(record)
        assert exc.value.reason == STALE_EPOCH
    assert state.segments[started.segment_id.id].state is S.COPY_SEGMENT_STARTED
    assert state.max_epoch == 5
    # the new leader's own cleanup of the zombie's copy is accepted
    state.apply(to(started, S.DELETE_SEGMENT_STARTED, epoch=5))


def test_the_newer_epoch_lineage_is_served_and_overlapped_older_segments_are_kept_unserved() -> None:
    a, b = seg(0, 9, epoch=1), seg(10, 29, epoch=1)  # b: the zombie's late FINISHED
    c, d = seg(10, 19, epoch=2), seg(20, 39, epoch=2)
    state = fold(a, b, c, d)
    assert [s.segment_id for s in state.finished()] == [a.segment_id, c.segment_id, d.segment_id]
    assert [s.segment_id for s in state.superseded()] == [b.segment_id]
    assert b.segment_id not in [s.segment_id for s in state.dangling()]  # never deleted by a worker
    assert state.highest_finished_offset() == 39


def test_cleanup_records_carry_the_new_leaders_epoch_and_id() -> None:
    zombie = seg(0, 9, S.COPY_SEGMENT_STARTED, epoch=1)
    state = fold(zombie)
    (cleanup,) = stamped(state.view().dangling(), 2, "new-leader")
    assert cleanup.writer_epoch == 2 and cleanup.writer_id == "new-leader"
    state.apply(to(cleanup, S.DELETE_SEGMENT_STARTED))


def test_a_recreated_topic_is_a_new_history() -> None:
    legacy = seg(0, 99)
    old = seg(100, 399, topic_id=OLD_ID)
    new_started = seg(0, 299, S.COPY_SEGMENT_STARTED, epoch=1, topic_id=NEW_ID)
    state = fold(legacy, old)
    assert state.highest_finished_offset() == 399  # legacy segments continue the first id's history
    state.apply(new_started)
    assert state.lineage.topic_id == NEW_ID and state.finished() == []
    assert state.highest_finished_offset() is None
    state.apply(to(new_started, S.COPY_SEGMENT_FINISHED))
    assert [s.segment_id for s in state.finished()] == [new_started.segment_id]
    # old-id copies are fenced; old-id deletes are accepted (retention removes the old history)
    with pytest.raises(RejectedRecordError) as exc:
        state.apply(seg(400, 499, epoch=1, topic_id=OLD_ID))
    assert exc.value.reason == OLD_TOPIC_ID
    state.apply(to(old, S.DELETE_SEGMENT_STARTED, epoch=1))
    assert old.segment_id not in [s.segment_id for s in state.superseded()]


def test_the_brokers_topic_id_decides_before_any_new_record() -> None:
    state = fold(seg(0, 399, topic_id=OLD_ID))
    state.current_topic_id = NEW_ID
    assert state.highest_finished_offset() is None and state.finished() == []
    legacy_only = fold(seg(0, 99))
    legacy_only.current_topic_id = NEW_ID  # upgrade: segments written before ids were recorded
    assert legacy_only.highest_finished_offset() == 99


intervals = st.lists(
    st.tuples(st.integers(0, 200), st.integers(0, 30), st.integers(0, 5), st.booleans()), max_size=25
)


@given(intervals)
def test_served_segments_never_overlap_and_newer_epochs_win(raw: list[tuple[int, int, int, bool]]) -> None:
    state = Folded()
    for start, length, epoch, finish in raw:
        started = seg(start, start + length, S.COPY_SEGMENT_STARTED, epoch=epoch)
        for record in (started, to(started, S.COPY_SEGMENT_FINISHED)) if finish else (started,):
            try:
                state.apply(record)
            except RejectedRecordError:
                break
    served = state.finished()
    for prev, cur in itertools.pairwise(served):
        assert cur.start_offset > prev.end_offset
    finished = [s for s in state.segments.values() if s.state is S.COPY_SEGMENT_FINISHED]
    newest = max((s.writer_epoch for s in finished), default=None)
    assert newest is None or any(s.writer_epoch == newest for s in served)
    assert {s.segment_id for s in state.superseded()} == {s.segment_id for s in finished} - {
        s.segment_id for s in served
    }
