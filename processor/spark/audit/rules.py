"""The audit's findings and its checks over the metadata. Pure: no pyspark, no I/O.

Every rule here looks at what the project's fold says (``processor.spark.fold_adapter``): which
records it rejects and why, which segments it serves, which claim holds a partition, what is left
to clean up. None decides those things itself, so a legitimate takeover (a newer claim, or before
claims a newer epoch) is never reported as a problem.

- ``RecordVerdicts`` folds one source partition's metadata messages (a Spark stateful query keeps
  it between micro-batches) and reports each message the fold rejects as a finding named by the
  fold's reason (``processor.metadata.fold_reasons.REASONS``): ``undecodable``, ``invalid`` (out of bounds,
  or a key that does not name the record), ``stale_epoch`` (not the partition's current claim),
  ``no_claim`` (after a release), ``old_topic_id``, ``illegal`` (the state machine forbids it),
  ``overlap`` (a finished segment over a served one), ``condition_failed`` (a conditional delete
  that lost to a copy finishing after the pass planned), ``unservable`` (a finished copy the fold
  would not serve, e.g. one without the re-created topic's id), ``misplaced_tombstone`` (a tombstone
  naming another partition's segment or one not deleted), ``internal_error``; and counts them by
  reason. A later accepted record or a tombstone for the same key (the owner's repair or cleanup)
  fixes it.
- ``state_findings`` checks each partition's archive: ``offset_gap`` between served segments (not
  while a copy in progress covers it), ``offset_overlap`` between served ones (the fold never
  serves two; reported if it ever did), and what the fold says is left to clean up, still there
  after the threshold: ``stuck_copy`` / ``stuck_delete`` (STARTED and never finished),
  ``superseded_segment`` (replaced by a newer epoch before claims existed: kept, since a worker
  never deletes acknowledged data it does not serve), ``past_retention`` (wholly below the remote
  log start offset).

Each finding has a stable ``key`` (the same problem on the next pass has the same key) and a
``scope``: what a pass must have looked at to say the problem is gone.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.metadata.fencing import OLD_TOPIC_ID, STALE_EPOCH
from processor.metadata.fold import Verdict
from processor.metadata.fold_reasons import (
    CONDITION,
    ILLEGAL,
    INTERNAL,
    INVALID,
    MISPLACED,
    NO_CLAIM,
    OVERLAP,
    REASONS,
    UNDECODABLE,
    UNSERVABLE,
)
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.spark.fold_adapter import PartitionArchive, PartitionFold

FORMATS = ("parquet", "json", "console")  # where findings can go
# The fold's reasons for rejecting a record, each a finding kind of its own. Warnings: a writer that
# lost its claim (or a copy of a re-created topic's old incarnation) was fenced out as designed; the
# owner cleans up after it. Errors: bytes nobody should have written.
RECORD_KINDS: dict[str, str] = {
    UNDECODABLE: "error",
    INVALID: "error",
    STALE_EPOCH: "warning",
    NO_CLAIM: "warning",
    OLD_TOPIC_ID: "warning",
    ILLEGAL: "error",
    OVERLAP: "error",
    CONDITION: "warning",
    UNSERVABLE: "warning",
    MISPLACED: "error",
    INTERNAL: "error",
}
KINDS: dict[str, str] = {  # kind -> severity
    **RECORD_KINDS,
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
    # encrypted segments: a crypto-shredded topic's (unreadable on purpose, not corruption), and one
    # whose data key this audit cannot unwrap (no key provider, no kms:Decrypt)
    "shredded": "info",
    "key_unavailable": "error",
    "orphan_object": "warning",
    "missing_manifest": "error",
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
VERDICTS_VERSION = 2
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
    """One source partition's fold (``fold_adapter.PartitionFold``), the messages it rejected (by
    message key: the open record problems) and how many it rejected by reason.

    State layout (JSON, version 2)::

        {"v": 2, "fold": <PartitionFold.to_json> | null,
         "rejected": {"<message key>": {"kind": <reason>, "detail": str, "where": str,
                                        "segment_id": str|null, "start_offset": int|null,
                                        "end_offset": int|null}},
         "counts": {"<reason>": int}}

    Version 1 (before claims; kinds ``undecodable_record``, ``illegal_transition``,
    ``fenced_record`` with the fold's reason in the detail) is still read.
    """

    def __init__(
        self,
        tp: TopicPartition | None,
        fold: PartitionFold,
        rejected: dict[str, dict[str, Any]],
        counts: dict[str, int] | None = None,
    ) -> None:
        self.tp = tp
        self.fold = fold
        self.rejected = rejected
        self.counts: dict[str, int] = dict(counts or {})  # every rejection of the partition, by reason
        self.new_counts: dict[str, int] = {}  # those of this micro-batch

    @classmethod
    def from_json(cls, tp: TopicPartition | None, text: str | None) -> RecordVerdicts:
        if not text:
            return cls(tp, PartitionFold(tp), {})
        try:
            doc = json.loads(text)
            version = doc.get("v")
            if version not in (1, VERDICTS_VERSION):
                raise FormatError(f"audit verdict state version {version!r} is not {VERDICTS_VERSION} or 1")
            fold = PartitionFold.from_json(tp, doc["fold"])
            rejected = {k: dict(v) for k, v in doc["rejected"].items()}
            if version == 1:
                rejected = {k: _verdict_v1(v) for k, v in rejected.items()}
            counts = {str(k): int(n) for k, n in doc.get("counts", {}).items()}
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise FormatError(f"audit verdict state does not decode: {exc!r}") from exc
        return cls(tp, fold, rejected, counts)

    def to_json(self) -> str:
        fold = self.fold.to_json() if self.tp is not None else None
        return json.dumps(
            {"v": VERDICTS_VERSION, "fold": fold, "rejected": self.rejected, "counts": self.counts}
        )

    def apply(self, row: Mapping[str, Any]) -> Verdict:
        """Fold one metadata message (a row of ``remote_log_metadata``, in topic order): its offset,
        its key's bytes and its value's bytes, as they are on the topic."""
        offset = int(row["meta_offset"])
        where = f"metadata partition {row.get('meta_partition')} offset {offset}"
        raw_key = _none(row.get("raw_key"))
        value = _none(row.get("value"))
        verdict = self.fold.apply(
            offset,
            bytes(raw_key) if raw_key is not None else None,
            bytes(value) if value is not None else None,
        )
        name = _none(row.get("key")) or where
        if verdict.accepted:  # an accepted record or tombstone under the key fixes the key's problem
            self.rejected.pop(name, None)
            return verdict
        reason = verdict.reason or INTERNAL
        self.counts[reason] = self.counts.get(reason, 0) + 1
        self.new_counts[reason] = self.new_counts.get(reason, 0) + 1
        record = verdict.record
        seg = record if isinstance(record, RemoteLogSegmentMetadata) else None
        sid = getattr(getattr(record, "segment_id", None), "id", None)
        self.rejected[name] = {
            "kind": reason,
            "detail": f"{where}: {verdict.detail or reason}",
            "where": where,
            "segment_id": str(sid) if sid is not None else None,
            "start_offset": seg.start_offset if seg is not None else None,
            "end_offset": seg.end_offset if seg is not None else None,
        }
        return verdict

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
                start_offset=v.get("start_offset"),
                end_offset=v.get("end_offset"),
                segment_id=v.get("segment_id"),
            )
            for key, v in sorted(self.rejected.items())
        ]


_V1_KINDS = {"undecodable_record": UNDECODABLE, "illegal_transition": ILLEGAL}


def _verdict_v1(v: dict[str, Any]) -> dict[str, Any]:
    """A version 1 record problem under its reason's name (``fenced_record`` kept the reason in its
    detail: "... (stale_epoch)")."""
    kind = _V1_KINDS.get(v["kind"])
    if kind is None:
        found = re.search(r"\((\w+)\)$", v.get("detail", ""))
        kind = found.group(1) if found and found.group(1) in REASONS else STALE_EPOCH
    return {**v, "kind": kind}


def fold_group(
    tp: TopicPartition | None, state_json: str | None, rows: Iterable[Mapping[str, Any]]
) -> tuple[str, list[Finding], dict[str, int]]:
    """The stateful query's step for one group: its new state, its current record problems and the
    records the fold rejected in these rows, by reason."""
    verdicts = RecordVerdicts.from_json(tp, state_json)
    for row in rows:
        verdicts.apply(row)
    return verdicts.to_json(), verdicts.findings(), verdicts.new_counts


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
        out.extend(_cleanup_findings(a, now_ms, stuck_after_ms))
    return out


def _cleanup_findings(a: PartitionArchive, now_ms: int, stuck_after_ms: int) -> list[Finding]:
    """What the fold says is left to clean up (``dangling``: copies that cannot finish or are not in
    flight, deletes never finished), superseded segments (kept, reported) and finished segments
    wholly below the remote log start offset, still there ``stuck_after_ms`` after their last change."""
    out: list[Finding] = []
    threshold_s = stuck_after_ms // 1000
    finished = [s for s in a.listed if s.state == SegmentState.COPY_SEGMENT_FINISHED]
    below = [s for s in finished if s.end_offset < a.log_start_offset]
    for seg in [*a.dangling, *a.superseded, *below]:
        age = now_ms - seg.event_timestamp_ms
        if age <= stuck_after_ms:
            continue
        if seg.state == SegmentState.COPY_SEGMENT_STARTED:
            whose = (
                f" (writer epoch {seg.writer_epoch}; the current claim is {a.claim_epoch})"
                if a.claim_epoch is not None and seg.writer_epoch != a.claim_epoch
                else ""
            )
            detail = f"{seg.state.value} for {age // 1000} s (threshold {threshold_s} s){whose}"
            out.append(_seg_finding("stuck_copy", a, seg, detail))
        elif seg.state == SegmentState.DELETE_SEGMENT_STARTED:
            detail = f"{seg.state.value} for {age // 1000} s (threshold {threshold_s} s)"
            out.append(_seg_finding("stuck_delete", a, seg, detail))
        elif seg.end_offset < a.log_start_offset:
            detail = (
                f"wholly below the remote log start offset {a.log_start_offset} and not deleted "
                f"{age // 1000} s after its last change"
            )
            out.append(_seg_finding("past_retention", a, seg, detail))
        else:
            detail = (
                f"superseded by a newer writer epoch's segment {age // 1000} s ago and kept: a worker never "
                "deletes acknowledged data it does not serve"
            )
            out.append(_seg_finding("superseded_segment", a, seg, detail))
    return list({f.key: f for f in out}.values())  # a superseded segment below the start: once
