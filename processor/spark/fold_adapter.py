"""The ONE adapter between the Spark side (planning, the audit) and the project's metadata fold.

Nothing on the Spark side decides which segments are served, which records a writer epoch or a
topic id fences out, or which segments a newer epoch superseded: it asks the fold, here.

- ``partition_archive``: a partition's archive as the fold serves it (served finished segments,
  remote log start offset, topic id, superseded and listed segments).
- ``apply_record``: apply one metadata record to a partition's fold state; the fold's verdict
  (accepted, or rejected with its reason) is what the audit reports.
- ``fold_state_to_json`` / ``fold_state_from_json``: a partition's fold state as versioned JSON, so
  a Spark stateful query can keep it between micro-batches. Layout (version 1)::

      {"v": 1, "segments": [<base64 of the codec's encode_value>], "served": [<segment uuid>],
       "log_start_offset": <int>, "delete_state": <PartitionDeleteState value or null>,
       "lineage": {"max_epoch": <int>, "topic_id": <str|null>, "retired": [<str>],
                   "legacy_retired": <bool>}}

Today the fold is ``processor.metadata.remote_log_state`` (the follower cache builds the same state
with the same fencing); when the lead's ``processor.metadata.fold`` lands, only this module changes.
"""

from __future__ import annotations

import base64
import json
import uuid
from dataclasses import dataclass

from processor.errors import FormatError, ProcessorError
from processor.metadata.codec import decode_value, encode_value
from processor.metadata.fencing import Lineage, StaleRecordError
from processor.metadata.model import (
    MetadataRecord,
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    SegmentState,
    TopicPartition,
)
from processor.metadata.remote_log_state import PartitionRemoteState, RemoteLogState

FOLD_STATE_VERSION = 1
ILLEGAL = "illegal"  # the fold's reason for a record the state machine forbids


@dataclass(frozen=True, slots=True)
class PartitionArchive:
    """One source partition's archive: the served finished segments (by start offset), the remote
    log start offset (offsets below it are not served, whatever segments remain), the topic id of
    the partition's current history, finished segments a newer epoch superseded, and every segment
    not yet DELETE_SEGMENT_FINISHED (any state)."""

    tp: TopicPartition
    served: tuple[RemoteLogSegmentMetadata, ...]
    log_start_offset: int = 0
    topic_id: str | None = None
    superseded: tuple[RemoteLogSegmentMetadata, ...] = ()
    listed: tuple[RemoteLogSegmentMetadata, ...] = ()

    @property
    def earliest(self) -> int | None:
        """The first offset served, or None when nothing is."""
        if not self.served:
            return None
        first = max(self.served[0].start_offset, self.log_start_offset)
        return first if first <= self.end_offset else None

    @property
    def end_offset(self) -> int:
        """The highest offset served (-1 when nothing is)."""
        return max((s.end_offset for s in self.served), default=-1)

    @property
    def next_offset(self) -> int:
        """The offset after the archive's end (what ``latest`` means without ``tail=live``)."""
        return self.end_offset + 1 if self.earliest is not None else self.log_start_offset

    def intervals(self) -> list[tuple[int, int, RemoteLogSegmentMetadata]]:
        """Served ``[first, next)`` offset intervals in offset order, cut at the log start offset."""
        out: list[tuple[int, int, RemoteLogSegmentMetadata]] = []
        for seg in self.served:
            first = max(seg.start_offset, self.log_start_offset)
            if first <= seg.end_offset:
                out.append((first, seg.end_offset + 1, seg))
        return out


def partition_archive(tp: TopicPartition, state: PartitionRemoteState) -> PartitionArchive:
    return PartitionArchive(
        tp=tp,
        served=tuple(state.finished()),
        log_start_offset=state.log_start_offset,
        topic_id=state.lineage.topic_id,
        superseded=tuple(state.superseded()),
        listed=tuple(
            sorted(
                (s for s in state.segments.values() if s.state != SegmentState.DELETE_SEGMENT_FINISHED),
                key=lambda s: (s.start_offset, str(s.segment_id.id)),
            )
        ),
    )


def apply_record(state: RemoteLogState, record: MetadataRecord) -> str | None:
    """Apply ``record`` with the fold; None when accepted, else the reason the fold rejected it
    (``stale_epoch``, ``old_topic_id``, ``illegal``). A rejected record changes nothing."""
    try:
        state.apply(record)
    except StaleRecordError as exc:
        return exc.reason
    except ProcessorError:
        return ILLEGAL
    return None


def forget_segment(state: RemoteLogState, tp: TopicPartition, segment_id: uuid.UUID) -> None:
    """A tombstone on the metadata topic: the segment's records are gone (as the follower cache
    drops them)."""
    part = state.partitions.get(tp)
    if part is not None:
        part.segments.pop(segment_id, None)
        part.served.discard(segment_id)


def fold_state_to_json(state: RemoteLogState, tp: TopicPartition) -> str:
    part = state.partition(tp)
    lineage = part.lineage
    return json.dumps(
        {
            "v": FOLD_STATE_VERSION,
            "segments": [base64.b64encode(encode_value(s)).decode() for s in part.segments.values()],
            "served": sorted(str(x) for x in part.served),
            "log_start_offset": part.log_start_offset,
            "delete_state": part.delete_state.value if part.delete_state is not None else None,
            "lineage": {
                "max_epoch": lineage.max_epoch,
                "topic_id": lineage.topic_id,
                "retired": sorted(lineage.retired),
                "legacy_retired": lineage.legacy_retired,
            },
        }
    )


def fold_state_from_json(text: str | None, tp: TopicPartition) -> RemoteLogState:
    state = RemoteLogState()
    if not text:
        return state
    try:
        doc = json.loads(text)
        if doc.get("v") != FOLD_STATE_VERSION:
            raise FormatError(f"fold state version {doc.get('v')} is not {FOLD_STATE_VERSION}")
        segments: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for raw in doc["segments"]:
            seg = decode_value(base64.b64decode(raw))
            if not isinstance(seg, RemoteLogSegmentMetadata):
                raise FormatError(f"fold state holds a {type(seg).__name__} as a segment")
            segments[seg.segment_id.id] = seg
        lin = doc["lineage"]
        state.partitions[tp] = PartitionRemoteState(
            segments=segments,
            served={uuid.UUID(x) for x in doc["served"]},
            log_start_offset=int(doc["log_start_offset"]),
            delete_state=PartitionDeleteState(doc["delete_state"]) if doc["delete_state"] else None,
            lineage=Lineage(
                int(lin["max_epoch"]), lin["topic_id"], frozenset(lin["retired"]), bool(lin["legacy_retired"])
            ),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise FormatError(f"fold state does not decode: {exc!r}") from exc
    return state
