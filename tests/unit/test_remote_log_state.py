"""The remote-state fold the leader resumes from, and the coverage check the tests rely on."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from processor.errors import IllegalTransitionError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
)
from processor.metadata.remote_log_state import RemoteLogState, coverage_gaps_and_overlaps

TP = TopicPartition("t", 0)
S = SegmentState


def seg(start: int, end: int, state: SegmentState = S.COPY_SEGMENT_FINISHED) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4()),
        start,
        end,
        0,
        0,
        "w",
        0,
        ((0, start),),
        1,
        state,
        "d",
        "i",
        1,
        end - start + 1,
        0,
        1,
    )


def test_contiguous_coverage_has_no_problems() -> None:
    assert coverage_gaps_and_overlaps([seg(10, 19), seg(0, 9), seg(20, 20)]) == []
    assert coverage_gaps_and_overlaps([]) == []


def test_gaps_and_overlaps_are_reported() -> None:
    problems = coverage_gaps_and_overlaps([seg(0, 9), seg(12, 19), seg(15, 30)])
    assert len(problems) == 2
    assert problems[0].startswith("gap: 10..11")
    assert problems[1].startswith("overlap:")


def test_fold_tracks_highest_finished_and_dangling_copies() -> None:
    state = RemoteLogState()
    a, b, c = (
        seg(0, 9, S.COPY_SEGMENT_STARTED),
        seg(10, 19, S.COPY_SEGMENT_STARTED),
        seg(20, 29, S.COPY_SEGMENT_STARTED),
    )
    for record in (
        a,
        b,
        c,
        dataclasses.replace(a, state=S.COPY_SEGMENT_FINISHED),
        dataclasses.replace(b, state=S.COPY_SEGMENT_FINISHED),
    ):
        state.apply(record)
    part = state.partition(TP)
    assert part.highest_finished_offset() == 19
    assert [s.segment_id for s in part.dangling()] == [c.segment_id]
    assert [s.start_offset for s in part.finished()] == [0, 10]
    assert state.partition(TopicPartition("other", 0)).highest_finished_offset() is None


def test_fold_rejects_illegal_steps_without_changing_state() -> None:
    state = RemoteLogState()
    done = seg(0, 9)
    state.apply(done)
    with pytest.raises(IllegalTransitionError):
        state.apply(dataclasses.replace(done, state=S.COPY_SEGMENT_STARTED))
    assert state.partition(TP).segments[done.segment_id.id] == done


def test_held_beneath_asks_whether_unserved_segments_cover_a_served_one() -> None:
    """Unserved finished segments inside a served one's offsets, covering each of them at or above
    the remote log start offset: the served one can be unserved without leaving a gap."""
    state = RemoteLogState()
    low, high, other = seg(0, 4), seg(5, 9), seg(10, 14)
    wide = dataclasses.replace(seg(0, 9), writer_epoch=1)  # a newer epoch's: low and high unserved
    part_wide = dataclasses.replace(seg(10, 19), writer_epoch=1)  # only 10..14 beneath it
    for record in (low, high, other, wide, part_wide):
        state.apply(record)
    part = state.partition(TP)
    assert [s.segment_id for s in part.finished()] == [wide.segment_id, part_wide.segment_id]
    covered = part.held_beneath()
    assert covered(wide)
    assert not covered(part_wide)  # 15..19 held by nothing beneath it
    state.apply(RemoteLogStartOffset(TP, 6, 0, "w", 1))
    assert state.partition(TP).held_beneath()(wide)  # (only 6..9 needed now)
    state.apply(RemoteLogStartOffset(TP, 20, 0, "w", 1))
    assert state.partition(TP).held_beneath()(part_wide)  # nothing of it above the start
