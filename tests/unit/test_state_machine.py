from __future__ import annotations

import dataclasses
import uuid

import pytest
from hypothesis import given

from processor.errors import IllegalTransitionError
from processor.metadata.model import RemoteLogSegmentMetadataUpdate, SegmentState
from processor.metadata.state_machine import (
    apply_snapshot,
    apply_update,
    check_transition,
    is_valid_transition,
)
from tests.unit.metadata_samples import segment_metadata

S = SegmentState
LEGAL = {
    (None, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_STARTED),
    (S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.COPY_SEGMENT_FINISHED, S.COPY_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_STARTED),
    (S.DELETE_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    (S.DELETE_SEGMENT_FINISHED, S.DELETE_SEGMENT_FINISHED),
    # a segment's delete states have their own key: compaction may keep its DELETE_SEGMENT_FINISHED
    # and its copy state, not the DELETE_SEGMENT_STARTED between them
    (S.COPY_SEGMENT_STARTED, S.DELETE_SEGMENT_FINISHED),
    (S.COPY_SEGMENT_FINISHED, S.DELETE_SEGMENT_FINISHED),
}


@pytest.mark.parametrize("current", [None, *S])
@pytest.mark.parametrize("new", list(S))
def test_exactly_the_kip405_transitions_are_legal(current: S | None, new: S) -> None:
    assert is_valid_transition(current, new) == ((current, new) in LEGAL)
    if (current, new) in LEGAL:
        check_transition(current, new)
    else:
        with pytest.raises(IllegalTransitionError):
            check_transition(current, new)


@given(segment_metadata(S.COPY_SEGMENT_FINISHED))
def test_illegal_snapshot_is_rejected_not_applied(meta) -> None:
    back = dataclasses.replace(meta, state=S.COPY_SEGMENT_STARTED)
    with pytest.raises(IllegalTransitionError):
        apply_snapshot(meta, back)


@given(segment_metadata(S.COPY_SEGMENT_STARTED))
def test_snapshot_cannot_change_immutable_fields(meta) -> None:
    moved = dataclasses.replace(meta, state=S.COPY_SEGMENT_FINISHED, end_offset=meta.end_offset + 1)
    with pytest.raises(IllegalTransitionError):
        apply_snapshot(meta, moved)
    ok = dataclasses.replace(
        meta, state=S.COPY_SEGMENT_FINISHED, event_timestamp_ms=meta.event_timestamp_ms + 1
    )
    assert apply_snapshot(meta, ok) == ok


@given(segment_metadata())
def test_first_snapshot_in_any_state_is_accepted_because_of_compaction(meta) -> None:
    assert apply_snapshot(None, meta) == meta


@given(segment_metadata(S.COPY_SEGMENT_STARTED))
def test_updates_need_a_known_segment_and_a_legal_step(meta) -> None:
    upd = RemoteLogSegmentMetadataUpdate(meta.segment_id, 5, "w2", 9, S.COPY_SEGMENT_FINISHED)
    with pytest.raises(IllegalTransitionError):
        apply_update(None, upd)
    done = apply_update(meta, upd)
    assert (done.state, done.writer_id, done.writer_epoch, done.start_offset) == (
        S.COPY_SEGMENT_FINISHED,
        "w2",
        9,
        meta.start_offset,
    )
    with pytest.raises(IllegalTransitionError):
        apply_update(done, dataclasses.replace(upd, state=S.COPY_SEGMENT_STARTED))


def test_uuid_identity() -> None:
    assert uuid.UUID(int=1) != uuid.UUID(int=2)
