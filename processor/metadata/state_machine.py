"""The KIP-405 segment state machine: exactly the legal transitions, nothing else. Pure.

    null                   -> COPY_SEGMENT_STARTED
    COPY_SEGMENT_STARTED   -> COPY_SEGMENT_FINISHED | DELETE_SEGMENT_STARTED
    COPY_SEGMENT_FINISHED  -> DELETE_SEGMENT_STARTED
    DELETE_SEGMENT_STARTED -> DELETE_SEGMENT_FINISHED
    any state              -> itself (retries, failover)
    any state              -> DELETE_SEGMENT_FINISHED (see below)

One deliberate addition, forced by the compacted topic: a *full snapshot* record of a segment the
reader has never seen is accepted in any state, because compaction may have removed the earlier
states of that key. An *update* record always needs the segment's previous state. For the same reason
DELETE_SEGMENT_FINISHED may follow a copy state: a segment's delete states have a key of their own
(processor/metadata/codec.py), and compaction may keep its DELETE_SEGMENT_FINISHED and its
COPY_SEGMENT_FINISHED but not the DELETE_SEGMENT_STARTED between them.
"""

from __future__ import annotations

import operator
from dataclasses import fields, replace

from processor.errors import IllegalTransitionError
from processor.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
)

_S = SegmentState
_ALLOWED: dict[SegmentState | None, frozenset[SegmentState]] = {
    None: frozenset({_S.COPY_SEGMENT_STARTED}),
    _S.COPY_SEGMENT_STARTED: frozenset(
        {
            _S.COPY_SEGMENT_STARTED,
            _S.COPY_SEGMENT_FINISHED,
            _S.DELETE_SEGMENT_STARTED,
            _S.DELETE_SEGMENT_FINISHED,
        }
    ),
    _S.COPY_SEGMENT_FINISHED: frozenset(
        {_S.COPY_SEGMENT_FINISHED, _S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}
    ),
    _S.DELETE_SEGMENT_STARTED: frozenset({_S.DELETE_SEGMENT_STARTED, _S.DELETE_SEGMENT_FINISHED}),
    _S.DELETE_SEGMENT_FINISHED: frozenset({_S.DELETE_SEGMENT_FINISHED}),
}

_P = PartitionDeleteState
_PARTITION_ALLOWED: dict[PartitionDeleteState | None, frozenset[PartitionDeleteState]] = {
    None: frozenset({_P.DELETE_PARTITION_MARKED}),
    _P.DELETE_PARTITION_MARKED: frozenset({_P.DELETE_PARTITION_MARKED, _P.DELETE_PARTITION_STARTED}),
    _P.DELETE_PARTITION_STARTED: frozenset({_P.DELETE_PARTITION_STARTED, _P.DELETE_PARTITION_FINISHED}),
    # A topic deleted, re-created under the same name and deleted again starts a new cycle.
    _P.DELETE_PARTITION_FINISHED: frozenset({_P.DELETE_PARTITION_FINISHED, _P.DELETE_PARTITION_MARKED}),
}

# Fields a state change may alter; every other field of a segment is fixed once published.
_MUTABLE = {"state", "event_timestamp_ms", "custom_metadata", "writer_id", "writer_epoch", "replaces_state"}
_IMMUTABLE = tuple(f.name for f in fields(RemoteLogSegmentMetadata) if f.name not in _MUTABLE)
_immutable_values = operator.attrgetter(*_IMMUTABLE)


def is_valid_transition(current: SegmentState | None, new: SegmentState) -> bool:
    return new in _ALLOWED[current]


def check_transition(current: SegmentState | None, new: SegmentState, what: object = "segment") -> None:
    if not is_valid_transition(current, new):
        raise IllegalTransitionError(
            f"illegal transition {current.value if current else 'null'} -> {new.value} for {what}"
        )


def check_partition_transition(
    current: PartitionDeleteState | None, new: PartitionDeleteState, what: object
) -> None:
    if new not in _PARTITION_ALLOWED[current]:
        raise IllegalTransitionError(
            f"illegal transition {current.value if current else 'null'} -> {new.value} for partition {what}"
        )


def apply_snapshot(
    current: RemoteLogSegmentMetadata | None, snapshot: RemoteLogSegmentMetadata
) -> RemoteLogSegmentMetadata:
    """Apply a full metadata record; returns the new state or raises, never half-applies."""
    if current is None:
        return snapshot
    check_transition(current.state, snapshot.state, snapshot.segment_id)
    if _immutable_values(current) != _immutable_values(snapshot):
        changed = next(n for n in _IMMUTABLE if getattr(current, n) != getattr(snapshot, n))
        raise IllegalTransitionError(f"segment {snapshot.segment_id} changed immutable field {changed}")
    return snapshot


def apply_update(
    current: RemoteLogSegmentMetadata | None, update: RemoteLogSegmentMetadataUpdate
) -> RemoteLogSegmentMetadata:
    if current is None:
        raise IllegalTransitionError(f"update {update.state.value} for unknown segment {update.segment_id}")
    check_transition(current.state, update.state, update.segment_id)
    return replace(
        current,
        state=update.state,
        event_timestamp_ms=update.event_timestamp_ms,
        writer_id=update.writer_id,
        writer_epoch=update.writer_epoch,
        replaces_state=None,
        custom_metadata=update.custom_metadata
        if update.custom_metadata is not None
        else current.custom_metadata,
    )
