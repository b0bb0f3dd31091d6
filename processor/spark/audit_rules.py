"""The audit's per-partition rules. Pure: no pyspark, no I/O (the Spark query only carries the state).

One ``PartitionAudit`` per source partition folds that partition's metadata records in metadata
topic order and finds:

- ``illegal_transition``: a state change the KIP-405 state machine forbids (the project's
  ``check_transition``), an update for a segment never seen, or a snapshot changing a segment's
  offsets; the record is not applied;
- ``undecodable_record``: a metadata message that does not decode;
- ``offset_gap`` / ``offset_overlap`` between consecutive COPY_SEGMENT_FINISHED segments (a gap that
  a copy in progress will fill is not reported: that copy is reported as stuck if it never finishes);
- ``stuck_copy`` / ``stuck_delete``: COPY_SEGMENT_STARTED / DELETE_SEGMENT_STARTED older than the
  threshold.

Each finding has a key; the audit remembers the keys it reported (in its checkpointed state), so a
problem is reported once, and a restarted audit does not report it again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from processor.errors import IllegalTransitionError
from processor.metadata.model import SegmentState
from processor.metadata.state_machine import check_transition

FINDINGS_DDL = (
    "kind string, topic string, partition int, start_offset long, end_offset long, segment_id string, "
    "detail string, detected_at timestamp"
)
FINDING_COLUMNS = ("kind", "topic", "partition", "start_offset", "end_offset", "segment_id", "detail")
STATE_VERSION = 1
FORMATS = ("parquet", "json", "console")  # where findings can go


@dataclass(frozen=True, slots=True)
class Finding:
    kind: str
    topic: str | None
    partition: int | None
    start_offset: int | None
    end_offset: int | None
    segment_id: str | None
    detail: str
    key: str  # what makes two findings the same problem

    def row(self) -> tuple[Any, ...]:
        return tuple(getattr(self, c) for c in FINDING_COLUMNS)


@dataclass
class _Segment:
    state: str
    start: int
    end: int
    event_ts: int
    topic_id: str | None = None  # a re-created topic is a new history: checked on its own


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


@dataclass
class PartitionAudit:
    topic: str | None
    partition: int | None
    segments: dict[str, _Segment] = field(default_factory=dict)
    reported: set[str] = field(default_factory=set)

    # -- state (JSON, versioned, kept by Spark in the checkpoint) -----------------------------------

    def to_json(self) -> str:
        return json.dumps(
            {
                "v": STATE_VERSION,
                "segments": {k: asdict(s) for k, s in self.segments.items()},
                "reported": sorted(self.reported),
            }
        )

    @classmethod
    def from_json(cls, topic: str | None, partition: int | None, text: str | None) -> PartitionAudit:
        audit = cls(topic, partition)
        if text:
            doc = json.loads(text)
            if doc.get("v") != STATE_VERSION:
                raise ValueError(f"audit state version {doc.get('v')} is not {STATE_VERSION}")
            audit.segments = {k: _Segment(**v) for k, v in doc["segments"].items()}
            audit.reported = set(doc["reported"])
        return audit

    # -- folding records ------------------------------------------------------------------------------

    def _finding(
        self, kind: str, key: str, detail: str, start: Any = None, end: Any = None, sid: Any = None
    ) -> Finding:
        return Finding(kind, self.topic, self.partition, start, end, sid, detail, f"{kind}:{key}")

    def apply_row(self, row: Mapping[str, Any]) -> list[Finding]:
        """Fold one metadata message (a row of ``remote_log_metadata``)."""
        where = f"metadata partition {row.get('meta_partition')} offset {row.get('meta_offset')}"
        error = _none(row.get("decode_error"))
        kind = _none(row.get("record_type"))
        if error is not None:
            return [self._finding("undecodable_record", where, f"{where}: {error}")]
        sid = _none(row.get("segment_id"))
        if kind == "tombstone":
            if sid is not None:
                self.segments.pop(str(sid), None)
            return []
        if kind not in {"segment", "segment_update"} or sid is None:
            return []  # partition deletion records are not audited here
        new_state = SegmentState(str(row["state"]))
        current = self.segments.get(sid)
        event_ts = int(_none(row.get("event_timestamp_ms")) or 0)
        try:
            if kind == "segment_update" and current is None:
                raise IllegalTransitionError(f"update {new_state.value} for unknown segment {sid}")
            if current is not None:
                check_transition(SegmentState(current.state), new_state, sid)
            if kind == "segment":
                start, end = int(row["start_offset"]), int(row["end_offset"])
                if current is not None and (current.start, current.end) != (start, end):
                    raise IllegalTransitionError(
                        f"segment {sid} changed its offsets {current.start}..{current.end} to {start}..{end}"
                    )
        except IllegalTransitionError as exc:
            return [
                self._finding(
                    "illegal_transition",
                    f"{sid}:{where}",
                    f"{where}: {exc}",
                    current.start if current else _none(row.get("start_offset")),
                    current.end if current else _none(row.get("end_offset")),
                    sid,
                )
            ]
        if current is None:
            self.segments[sid] = _Segment(new_state.value, start, end, event_ts, _none(row.get("topic_id")))
        else:
            current.state, current.event_ts = new_state.value, event_ts
        return []

    # -- checks over the folded state -----------------------------------------------------------------

    def _coverage(self, finished: list[tuple[str, _Segment]], started: list[_Segment]) -> list[Finding]:
        """Gaps and overlaps between the finished segments of one topic id, in offset order."""
        out: list[Finding] = []
        high_end: int | None = None  # the highest end so far, and the segment that has it
        high_sid = ""
        for sid_b, b in finished:
            if high_end is not None and b.start > high_end + 1:
                lo, hi = high_end + 1, b.start - 1
                if not any(
                    s.start <= lo and s.end >= hi for s in started
                ):  # else a copy in progress fills it
                    out.append(
                        self._finding(
                            "offset_gap",
                            f"{high_sid}:{sid_b}",
                            f"offsets {lo}..{hi} are in no finished segment (between {high_sid} and {sid_b})",
                            lo,
                            hi,
                            sid_b,
                        )
                    )
            elif high_end is not None and b.start <= high_end:
                out.append(
                    self._finding(
                        "offset_overlap",
                        f"{high_sid}:{sid_b}",
                        f"offsets {b.start}..{min(high_end, b.end)} are in {high_sid} and in {sid_b}",
                        b.start,
                        min(high_end, b.end),
                        sid_b,
                    )
                )
            if high_end is None or b.end > high_end:
                high_end, high_sid = b.end, sid_b
        return out

    def check(self, now_ms: int, stuck_after_ms: int) -> list[Finding]:
        out: list[Finding] = []
        started = [s for s in self.segments.values() if s.state == SegmentState.COPY_SEGMENT_STARTED]
        histories: dict[str | None, list[tuple[str, _Segment]]] = {}
        for sid, seg in self.segments.items():
            if seg.state == SegmentState.COPY_SEGMENT_FINISHED:
                histories.setdefault(seg.topic_id, []).append((sid, seg))
        for history in histories.values():
            out.extend(self._coverage(sorted(history, key=lambda x: (x[1].start, x[1].end)), started))
        for sid, s in self.segments.items():
            age = now_ms - s.event_ts
            if age <= stuck_after_ms:
                continue
            kind = {
                SegmentState.COPY_SEGMENT_STARTED.value: "stuck_copy",
                SegmentState.DELETE_SEGMENT_STARTED.value: "stuck_delete",
            }.get(s.state)
            if kind is not None:
                out.append(
                    self._finding(
                        kind,
                        sid,
                        f"{s.state} for {age // 1000} s (threshold {stuck_after_ms // 1000} s)",
                        s.start,
                        s.end,
                        sid,
                    )
                )
        return out

    def take_new(self, findings: Iterable[Finding]) -> list[Finding]:
        """The findings not reported before (and remember them)."""
        fresh: list[Finding] = []
        for f in findings:
            if f.key not in self.reported:
                self.reported.add(f.key)
                fresh.append(f)
        return fresh


def audit_partition(
    audit: PartitionAudit, rows: Iterable[Mapping[str, Any]], now_ms: int, stuck_after_ms: int
) -> list[Finding]:
    """Fold ``rows`` (in metadata topic order), run the checks, return only new findings."""
    found: list[Finding] = []
    for row in rows:
        found.extend(audit.apply_row(row))
    found.extend(audit.check(now_ms, stuck_after_ms))
    return audit.take_new(found)
