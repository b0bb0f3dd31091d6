"""The audit's findings and its checks over the metadata. Pure: no pyspark, no I/O.

Every rule here looks at what the project's fold says (``processor.spark.fold_adapter``): which
records it rejects and why, which segments it serves, which a newer epoch superseded. None decides
those things itself, so a legitimate takeover by a newer epoch is never reported as an overlap.

- ``RecordVerdicts`` folds one source partition's metadata messages (a Spark stateful query keeps
  it between micro-batches) and reports the messages the fold rejects: ``undecodable_record``,
  ``illegal_transition`` (the state machine forbids it), ``fenced_record`` (an older writer epoch,
  or a copy for a topic id a re-created topic retired). A later accepted record or a tombstone for
  the same key fixes it.
- ``state_findings`` checks each partition's archive: ``offset_gap`` between served segments (not
  while a copy in progress covers it), ``offset_overlap`` between served ones (the fold never
  serves two; reported if it ever did), ``stuck_copy`` / ``stuck_delete`` (STARTED for longer than
  the threshold), ``superseded_segment`` (replaced by a newer epoch and still there after the
  threshold: the next leader should have deleted it), ``past_retention`` (wholly below the remote
  log start offset and still there after the threshold).

Each finding has a stable ``key`` (the same problem on the next pass has the same key) and a
``scope``: what a pass must have looked at to say the problem is gone.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from processor.errors import FormatError
from processor.metadata.codec import decode_value
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicPartition
from processor.metadata.remote_log_state import RemoteLogState
from processor.spark.fold_adapter import (
    PartitionArchive,
    apply_record,
    fold_state_from_json,
    fold_state_to_json,
    forget_segment,
    partition_archive,
)

FORMATS = ("parquet", "json", "console")  # where findings can go
KINDS: dict[str, str] = {  # kind -> severity
    "undecodable_record": "error",
    "illegal_transition": "error",
    "fenced_record": "warning",
    "offset_gap": "error",
    "offset_overlap": "error",
    "stuck_copy": "warning",
    "stuck_delete": "warning",
    "superseded_segment": "warning",
    "past_retention": "warning",
    "missing_object": "error",
    "size_mismatch": "error",
    "crc_mismatch": "error",
    "truncated_object": "error",
    "count_mismatch": "error",
    "timestamp_mismatch": "error",
    "orphan_object": "warning",
    "offload_lag": "warning",
    "expired_before_offload": "error",
}
FINDING_COLUMNS = (
    "key",
    "kind",
    "severity",
    "scope",
    "topic",
    "partition",
    "start_offset",
    "end_offset",
    "segment_id",
    "object_key",
    "detail",
)
FINDINGS_DDL = (
    "key string, kind string, severity string, scope string, topic string, partition int, "
    "start_offset long, end_offset long, segment_id string, object_key string, detail string, "
    "detected_at timestamp, pass_id string"
)
VERDICTS_VERSION = 1
MARKER = "_evaluated"  # a row telling the driver which scope a stateful group evaluated


@dataclass(frozen=True, slots=True)
class Finding:
    key: str
    kind: str
    scope: str
    detail: str
    topic: str | None = None
    partition: int | None = None
    start_offset: int | None = None
    end_offset: int | None = None
    segment_id: str | None = None
    object_key: str | None = None

    @property
    def severity(self) -> str:
        return KINDS.get(self.kind, "error")

    def row(self) -> tuple[Any, ...]:
        return tuple(getattr(self, c) for c in FINDING_COLUMNS)

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Finding:
        values = {c: _none(row.get(c)) for c in FINDING_COLUMNS if c != "severity"}
        for name in ("partition", "start_offset", "end_offset"):
            if values[name] is not None:
                values[name] = int(values[name])
        return cls(**values)


def _none(value: Any) -> Any:
    """pandas hands missing values as NaN/None/NaT; treat them all as None."""
    if value is None:
        return None
    try:
        if value != value:  # NaN
            return None
    except (TypeError, ValueError):
        pass
    return value


def records_scope(tp: TopicPartition | None) -> str:
    return f"records:{tp}" if tp is not None else "records:?"


STATE_SCOPE = "state"  # every partition's archive is looked at on every pass


def segment_scope(segment_id: str) -> str:
    return f"segment:{segment_id}"


# -- record verdicts (kept by the stateful query per source partition) ---------------------------------


class RecordVerdicts:
    """One source partition's fold state, and the messages the fold rejected (by message key)."""

    def __init__(
        self, tp: TopicPartition | None, state: RemoteLogState, rejected: dict[str, dict[str, Any]]
    ) -> None:
        self.tp = tp
        self.state = state
        self.rejected = rejected

    @classmethod
    def from_json(cls, tp: TopicPartition | None, text: str | None) -> RecordVerdicts:
        if not text:
            return cls(tp, RemoteLogState(), {})
        doc = json.loads(text)
        if doc.get("v") != VERDICTS_VERSION:
            raise FormatError(f"audit verdict state version {doc.get('v')} is not {VERDICTS_VERSION}")
        state = fold_state_from_json(doc["fold"], tp) if tp is not None else RemoteLogState()
        return cls(tp, state, dict(doc["rejected"]))

    def to_json(self) -> str:
        fold = fold_state_to_json(self.state, self.tp) if self.tp is not None else None
        return json.dumps({"v": VERDICTS_VERSION, "fold": fold, "rejected": self.rejected})

    def apply(self, row: Mapping[str, Any]) -> None:
        """Fold one metadata message (a row of ``remote_log_metadata``, in topic order)."""
        where = f"metadata partition {row.get('meta_partition')} offset {row.get('meta_offset')}"
        key = _none(row.get("key")) or where
        value = _none(row.get("value"))
        if value is None:  # a tombstone: the key's segment is gone, and with it its problems
            self.rejected.pop(key, None)
            sid = str(key).rsplit("/", 1)[-1]
            if self.tp is not None:
                with contextlib.suppress(ValueError):  # a key that names no segment
                    forget_segment(self.state, self.tp, uuid.UUID(sid))
            return
        try:
            record = decode_value(bytes(value))
        except FormatError as exc:
            self.rejected[key] = {"kind": "undecodable_record", "detail": f"{where}: {exc}", "where": where}
            return
        reason = apply_record(self.state, record)
        if reason is None:
            self.rejected.pop(key, None)
            return
        kind = "illegal_transition" if reason == "illegal" else "fenced_record"
        detail = f"{where}: the fold rejected {record.__class__.__name__} ({reason})"
        segment_uuid = getattr(getattr(record, "segment_id", None), "id", None)
        self.rejected[key] = {
            "kind": kind,
            "detail": detail,
            "where": where,
            "segment_id": str(segment_uuid) if segment_uuid else None,
        }

    def findings(self) -> list[Finding]:
        tp = self.tp
        return [
            Finding(
                key=f"{v['kind']}:{key}",
                kind=v["kind"],
                scope=records_scope(tp),
                detail=v["detail"],
                topic=tp.topic if tp else None,
                partition=tp.partition if tp else None,
                segment_id=v.get("segment_id"),
            )
            for key, v in sorted(self.rejected.items())
        ]


def fold_group(
    tp: TopicPartition | None, state_json: str | None, rows: Iterable[Mapping[str, Any]]
) -> tuple[str, list[Finding]]:
    """The stateful query's step for one group: new state and the group's current record problems."""
    verdicts = RecordVerdicts.from_json(tp, state_json)
    for row in rows:
        verdicts.apply(row)
    return verdicts.to_json(), verdicts.findings()


# -- checks over each partition's archive ---------------------------------------------------------------


def segment_finding(
    kind: str, seg: RemoteLogSegmentMetadata, detail: str, scope: str, object_key: str | None = None
) -> Finding:
    """A finding about one segment, keyed by its kind and segment id."""
    sid = str(seg.segment_id.id)
    return Finding(
        key=f"{kind}:{sid}",
        kind=kind,
        scope=scope,
        detail=detail,
        topic=seg.segment_id.topic,
        partition=seg.segment_id.partition,
        start_offset=seg.start_offset,
        end_offset=seg.end_offset,
        segment_id=sid,
        object_key=object_key or seg.data_object_key,
    )


def _seg_finding(kind: str, a: PartitionArchive, seg: RemoteLogSegmentMetadata, detail: str) -> Finding:
    return segment_finding(kind, seg, detail, STATE_SCOPE)


def state_findings(archives: Iterable[PartitionArchive], now_ms: int, stuck_after_ms: int) -> list[Finding]:
    out: list[Finding] = []
    for a in archives:
        started = [s for s in a.listed if s.state == SegmentState.COPY_SEGMENT_STARTED]
        previous = None
        for first, nxt, seg in a.intervals():
            if previous is not None:
                end, prev = previous
                if first > end:
                    lo, hi = end, first - 1
                    if not any(s.start_offset <= lo and s.end_offset >= hi for s in started):
                        out.append(
                            Finding(
                                key=f"offset_gap:{a.tp}:{lo}-{hi}",
                                kind="offset_gap",
                                scope=STATE_SCOPE,
                                detail=f"offsets {lo}..{hi} are in no served segment (between "
                                f"{prev.segment_id.id} and {seg.segment_id.id})",
                                topic=a.tp.topic,
                                partition=a.tp.partition,
                                start_offset=lo,
                                end_offset=hi,
                                segment_id=str(seg.segment_id.id),
                            )
                        )
                elif first < end:
                    out.append(
                        _seg_finding(
                            "offset_overlap",
                            a,
                            seg,
                            f"served segments {prev.segment_id.id} and {seg.segment_id.id} both hold "
                            f"offsets {first}..{min(end, nxt) - 1}",
                        )
                    )
            if previous is None or nxt > previous[0]:
                previous = (nxt, seg)
        for seg in a.listed:
            age = now_ms - seg.event_timestamp_ms
            if age <= stuck_after_ms:
                continue
            if seg.state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED):
                kind = "stuck_copy" if seg.state == SegmentState.COPY_SEGMENT_STARTED else "stuck_delete"
                out.append(
                    _seg_finding(
                        kind,
                        a,
                        seg,
                        f"{seg.state.value} for {age // 1000} s (threshold {stuck_after_ms // 1000} s)",
                    )
                )
            elif seg.state == SegmentState.COPY_SEGMENT_FINISHED and seg.end_offset < a.log_start_offset:
                out.append(
                    _seg_finding(
                        "past_retention",
                        a,
                        seg,
                        f"wholly below the remote log start offset {a.log_start_offset} and not deleted "
                        f"{age // 1000} s after its last change",
                    )
                )
        for seg in a.superseded:
            age = now_ms - seg.event_timestamp_ms
            if age > stuck_after_ms and seg.end_offset >= a.log_start_offset:
                out.append(
                    _seg_finding(
                        "superseded_segment",
                        a,
                        seg,
                        f"superseded by a newer writer epoch's segment and still there {age // 1000} s later",
                    )
                )
    return out


def archives_of(state: RemoteLogState) -> list[PartitionArchive]:
    """Every partition of a fold state, through the adapter."""
    return [partition_archive(tp, part) for tp, part in sorted(state.partitions.items())]
