"""The ONE adapter between the Spark side (planning, the audit) and the project's metadata fold.

Nothing on the Spark side decides which records are accepted, which segments are served, which
claim holds a partition or what is left to clean up: :mod:`processor.metadata.fold` decides (the
same fold the follower cache, the leader and the CLI apply) and
:class:`~processor.metadata.remote_log_state.PartitionRemoteState` derives the owner's questions
from it (finished, superseded, highest finished offset, dangling). This module only carries its
answers to the Spark side.

- ``partition_archive``: a partition's archive as the fold serves it.
- ``PartitionFold``: one source partition's fold, kept by the audit's stateful query between
  micro-batches. Messages go in as they are on the metadata topic (offset, key bytes, value bytes)
  through ``Fold.apply_raw``, so a claim's epoch is its offset, keys and record bounds are checked
  as every reader checks them, and the answer is the fold's ``Verdict`` (accepted, or rejected with
  one of the fold's ``REASONS``).
- ``PartitionFold.to_json`` / ``from_json``: the fold's whole state of the partition as versioned
  JSON. Layout (version 2)::

      {"v": 2,
       "header": <fold.encode_header as text: claim, lineage, log start offset, delete state>,
       "segments": [<base64 of the codec's encode_value>],   # every segment the fold keeps
       "served": [<segment uuid>],
       "shadowed": [<base64 of a message key>],               # keys a rejected record shadows
       "orphans": [[<segment uuid>, <base64 of encode_value>]]}  # rejected records of unknown segments

  Version 1 (before claims: segments, served, log_start_offset, delete_state and the lineage as
  ``{"max_epoch", "topic_id", "retired", "legacy_retired"}``) is still read: a partition with no
  claim yet, nothing shadowed, no orphans.
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import decode_value, encode_value
from processor.metadata.fencing import Lineage
from processor.metadata.fold import Fold, Verdict
from processor.metadata.fold_state import PartitionHeader
from processor.metadata.memory_store import MemoryStore, PartitionView
from processor.metadata.model import PartitionDeleteState, RemoteLogSegmentMetadata, SegmentState
from processor.metadata.partition_header_codec import decode_header, encode_header
from processor.metadata.remote_log_state import PartitionRemoteState

FOLD_STATE_VERSION = 2


@dataclass(frozen=True, slots=True)
class PartitionArchive:
    """One source partition's archive: the served finished segments (by start offset), the remote
    log start offset (offsets below it are not served, whatever segments remain), the topic id of
    the partition's current history, finished segments a newer epoch superseded, every segment not
    yet DELETE_SEGMENT_FINISHED (any state), the highest offset copied (or deliberately deleted below
    the log start offset), what is left to clean up, and the current claim's epoch."""

    tp: TopicPartition
    served: tuple[RemoteLogSegmentMetadata, ...]
    log_start_offset: int = 0
    topic_id: str | None = None
    superseded: tuple[RemoteLogSegmentMetadata, ...] = ()
    listed: tuple[RemoteLogSegmentMetadata, ...] = ()
    highest_finished_offset: int | None = None
    dangling: tuple[RemoteLogSegmentMetadata, ...] = ()
    claim_epoch: int | None = None

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


def _by_start(segments: Iterable[RemoteLogSegmentMetadata]) -> tuple[RemoteLogSegmentMetadata, ...]:
    return tuple(sorted(segments, key=lambda s: (s.start_offset, str(s.segment_id.id))))


def partition_archive(tp: TopicPartition, state: PartitionRemoteState) -> PartitionArchive:
    """What the fold says about ``tp`` (from the follower cache or from a ``PartitionFold``)."""
    return PartitionArchive(
        tp=tp,
        served=tuple(state.finished()),
        log_start_offset=state.log_start_offset,
        topic_id=state.lineage.topic_id,
        superseded=_by_start(state.superseded()),
        listed=_by_start(
            s for s in state.segments.values() if s.state != SegmentState.DELETE_SEGMENT_FINISHED
        ),
        highest_finished_offset=state.highest_finished_offset(),
        dangling=tuple(state.dangling()),
        claim_epoch=state.current_epoch,
    )


class _PartitionStore(MemoryStore):
    """The fold's in-memory store, holding the partitions restored from a checkpoint.

    ``MemoryStore`` finds a segment by id in an index of its own that a restored ``PartitionView``
    does not fill; here a segment is found in the partitions' views (one partition per audit group,
    so one dictionary lookup). The difference: a segment id reused by another partition is not
    seen from this one (the fold over the whole topic would see it).
    """

    def segment(self, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        for part in self.partitions.values():
            seg = part.segments.get(sid)
            if seg is not None:
                return seg
        return None


class PartitionFold:
    """One source partition's fold between micro-batches (``tp`` None: messages whose key names no
    partition; they are judged and nothing of them is kept)."""

    def __init__(self, tp: TopicPartition | None, view: PartitionView | None = None) -> None:
        self.tp = tp
        self._store = _PartitionStore()
        if tp is not None and view is not None:
            self._store.partitions[tp] = view
        self._fold = Fold(self._store)

    def apply(self, offset: int, key: bytes | None, value: bytes | None) -> Verdict:
        """The fold's verdict on one message at ``offset`` of its metadata partition (``value`` None:
        a tombstone). A rejected record changes nothing but the fold's bookkeeping of it."""
        return self._fold.apply_raw(offset, key, value)

    @property
    def view(self) -> PartitionView:
        if self.tp is None:
            return PartitionView()
        return self._store.partitions.get(self.tp) or PartitionView()

    def remote_state(self) -> PartitionRemoteState:
        return PartitionRemoteState.of(self.view)

    def archive(self) -> PartitionArchive | None:
        return partition_archive(self.tp, self.remote_state()) if self.tp is not None else None

    def to_json(self) -> str:
        view = self.view
        return json.dumps(
            {
                "v": FOLD_STATE_VERSION,
                "header": encode_header(view.header).decode(),
                "segments": [_b64(encode_value(s)) for _, s in sorted(view.segments.items())],
                "served": sorted(str(x) for x in view.served),
                "shadowed": sorted(_b64(k) for k in view.shadowed),
                "orphans": [[str(sid), _b64(encode_value(s))] for sid, s in sorted(view.orphans.items())],
            }
        )

    @classmethod
    def from_json(cls, tp: TopicPartition | None, text: str | None) -> PartitionFold:
        """The state ``to_json`` wrote (version 2) or the pre-claim version 1; FormatError when it
        does not decode."""
        if not text or tp is None:
            return cls(tp)
        try:
            doc = json.loads(text)
            version = doc.get("v")
            if version == FOLD_STATE_VERSION:
                view = PartitionView(
                    header=decode_header(doc["header"].encode()),
                    segments=_segments(doc["segments"]),
                    served={uuid.UUID(x) for x in doc["served"]},
                    shadowed={base64.b64decode(k, validate=True) for k in doc["shadowed"]},
                    orphans={uuid.UUID(sid): _segment(raw) for sid, raw in doc["orphans"]},
                )
            elif version == 1:
                view = _view_v1(doc)
            else:
                raise FormatError(f"fold state version {version!r} is not {FOLD_STATE_VERSION} or 1")
        except (KeyError, TypeError, ValueError, AttributeError, binascii.Error) as exc:
            raise FormatError(f"fold state does not decode: {exc!r}") from exc
        return cls(tp, view)


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _segment(raw: str) -> RemoteLogSegmentMetadata:
    seg = decode_value(base64.b64decode(raw, validate=True))
    if not isinstance(seg, RemoteLogSegmentMetadata):
        raise FormatError(f"fold state holds a {type(seg).__name__} as a segment")
    return seg


def _segments(raws: list[str]) -> dict[uuid.UUID, RemoteLogSegmentMetadata]:
    return {seg.segment_id.id: seg for seg in map(_segment, raws)}


def _view_v1(doc: dict[str, Any]) -> PartitionView:
    lin = doc["lineage"]
    header = PartitionHeader(
        lineage=Lineage(
            int(lin["max_epoch"]), lin["topic_id"], frozenset(lin["retired"]), bool(lin["legacy_retired"])
        ),
        log_start_offset=int(doc["log_start_offset"]),
        delete_state=PartitionDeleteState(doc["delete_state"]) if doc["delete_state"] else None,
    )
    return PartitionView(
        header=header,
        segments=_segments(doc["segments"]),
        served={uuid.UUID(x) for x in doc["served"]},
    )
