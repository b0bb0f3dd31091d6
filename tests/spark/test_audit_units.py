"""The audit's pure parts: the fold adapter's state round trip, the record verdicts (from the fold),
the checks over each partition's archive, the open problems view, the scrub quota and cursor."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.metadata.codec import encode_value
from processor.metadata.model import (
    MetadataRecord,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
    TopicPartition,
)
from processor.metadata.remote_log_state import RemoteLogState
from processor.spark.audit_problems import AuditState, ScrubCursor
from processor.spark.audit_rules import STATE_SCOPE, Finding, RecordVerdicts, fold_group, state_findings
from processor.spark.audit_scrub import estimated_cost, plan_pass, progress, scrub_items
from processor.spark.audit_storage import lag_findings
from processor.spark.fold_adapter import (
    PartitionArchive,
    fold_state_from_json,
    fold_state_to_json,
    partition_archive,
)

pytestmark = pytest.mark.spark
TP = TopicPartition("t", 0)
F, S = SegmentState.COPY_SEGMENT_FINISHED, SegmentState.COPY_SEGMENT_STARTED


def meta(
    start: int,
    end: int,
    state: SegmentState = F,
    epoch: int = 0,
    ts: int = 0,
    sid: uuid.UUID | None = None,
    topic_id: str = "id-a",
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId("t", 0, sid or uuid.uuid4(), topic_id),
        start,
        end,
        10 * end,
        ts,
        "w",
        epoch,
        ((epoch, start),),
        1000,
        state,
        f"t/0/{start}.log",
        f"t/0/{start}.log-index",
        2,
        end - start + 1,
        0,
        500,
    )


def message(record: object, offset: int, key: str | None = None) -> dict[str, object]:
    value = encode_value(record) if record is not None else None  # type: ignore[arg-type]
    return {"key": key or f"t/0/{offset}", "value": value, "meta_partition": 0, "meta_offset": offset}


def copied(start: int, end: int, epoch: int = 0, ts: int = 0) -> list[RemoteLogSegmentMetadata]:
    m = meta(start, end, S, epoch, ts)
    return [m, m.with_state(F, ts)]


def test_fold_state_round_trips_and_garbage_is_a_format_error() -> None:
    state = RemoteLogState()
    records: list[MetadataRecord] = [
        *copied(0, 9),
        *copied(10, 19, epoch=1),
        RemoteLogStartOffset(TP, 5, 0, "w", 1),
    ]
    for record in records:
        state.apply(record)
    text = fold_state_to_json(state, TP)
    again = fold_state_from_json(text, TP)
    assert partition_archive(TP, again.partition(TP)) == partition_archive(TP, state.partition(TP))
    assert fold_state_to_json(again, TP) == text
    for bad in ('{"v": 9}', '{"v": 1, "segments": ["!!"]}', "[]"):
        with pytest.raises((FormatError, AttributeError)):
            fold_state_from_json(bad, TP)


def test_record_verdicts_are_the_folds_and_a_later_accepted_record_fixes_them() -> None:
    good = copied(0, 9, epoch=2)
    stale = meta(10, 19, S, epoch=1)  # an older writer epoch after epoch 2 wrote
    illegal = good[1].with_state(S, 5)  # FINISHED -> STARTED
    rows = [
        message(good[0], 0),
        message(good[1], 1),
        message(stale, 2, "t/0/stale"),
        message(illegal, 3, "t/0/ill"),
    ]
    rows.append({"key": "t/0/junk", "value": b"\x01\x09junk", "meta_partition": 0, "meta_offset": 4})
    state, found = fold_group(TP, None, rows)
    kinds = {f.kind: f for f in found}
    assert sorted(kinds) == ["fenced_record", "illegal_transition", "undecodable_record"]
    assert "stale_epoch" in kinds["fenced_record"].detail and kinds["fenced_record"].segment_id == str(
        stale.segment_id.id
    )
    # the next micro-batch: a tombstone for the junk key, the same segment accepted after all
    fixed = dataclasses.replace(stale, writer_epoch=3)
    state, found = fold_group(
        TP,
        state,
        [
            {"key": "t/0/junk", "value": None, "meta_partition": 0, "meta_offset": 5},
            message(fixed, 6, "t/0/stale"),
        ],
    )
    assert [f.kind for f in found] == ["illegal_transition"]
    assert RecordVerdicts.from_json(TP, state).findings() == found


def archive(*records: object) -> PartitionArchive:
    state = RemoteLogState()
    for r in records:
        state.apply(r)  # type: ignore[arg-type]
    return partition_archive(TP, state.partition(TP))


def test_state_findings_read_what_the_fold_serves() -> None:
    hour = 3_600_000
    gap = archive(*copied(0, 9), *copied(20, 29))
    assert [(f.kind, f.start_offset, f.end_offset) for f in state_findings([gap], hour, 60_000)] == [
        ("offset_gap", 10, 19)
    ]
    filling = archive(*copied(0, 9), meta(10, 19, S, ts=hour - 10), *copied(20, 29))  # a copy in progress
    assert state_findings([filling], hour, 60_000) == []
    stuck = archive(*copied(0, 9), meta(10, 19, S, ts=0))
    assert [f.kind for f in state_findings([stuck], hour, 60_000)] == ["stuck_copy"]
    takeover = archive(*copied(0, 49, epoch=0, ts=0), *copied(40, 89, epoch=1, ts=hour))
    found = state_findings([takeover], hour, 60_000)
    assert [f.kind for f in found] == ["superseded_segment"]  # never an overlap: the fold serves one
    below = archive(*copied(0, 9), *copied(10, 19), RemoteLogStartOffset(TP, 10, 0, "w", 0))
    assert [(f.kind, f.end_offset) for f in state_findings([below], hour, 60_000)] == [("past_retention", 9)]
    assert all(f.scope == STATE_SCOPE for f in found)


def test_lag_and_records_expired_before_offload() -> None:
    a = archive(*copied(0, 99))
    assert [f.kind for f in lag_findings([a], {TP: (150, 400)}, None)] == ["expired_before_offload"]
    assert lag_findings([a], {TP: (0, 400)}, 500) == []
    lag = lag_findings([a], {TP: (0, 400)}, 100)
    assert [(f.kind, f.start_offset, f.end_offset) for f in lag] == [("offload_lag", 100, 399)]


def finding(key: str, scope: str = "segment:x") -> Finding:
    return Finding(key=key, kind=key.split(":")[0], scope=scope, detail="d")


def test_problems_open_stay_open_and_resolve_only_where_the_pass_looked(tmp_path) -> None:
    state = AuditState()
    c0, c1 = ScrubCursor(), ScrubCursor(after="b", checked=2)
    out = state.finish(
        "p1",
        [finding("missing_object:a", "segment:a"), finding("offset_gap:t", STATE_SCOPE)],
        {"segment:a", STATE_SCOPE},
        100,
        c0,
        c1,
    )
    assert sorted(out.opened) == ["missing_object:a", "offset_gap:t"]
    out = state.finish("p2", [finding("offset_gap:t", STATE_SCOPE)], {STATE_SCOPE}, 200, c1, c1)
    assert out.opened == [] and out.resolved == []  # segment a not checked this pass: still open
    assert (
        state.problems["offset_gap:t"].first_seen_ms == 100
        and state.problems["offset_gap:t"].last_seen_ms == 200
    )
    out = state.finish("p3", [], {"segment:a", STATE_SCOPE}, 300, c1, c1)
    assert sorted(out.resolved) == ["missing_object:a", "offset_gap:t"] and state.open_problems() == []
    path = tmp_path / "state.json"
    state.save(path)
    assert AuditState.load(path) == state
    assert state.start("p3") == c1 and state.start("p4") == c1
    state.finish("p5", [], set(), 400, c0, c1)
    assert state.start("p5") == c0  # a replay of the last pass starts where it started
    with pytest.raises(FormatError):
        AuditState.from_json(json.dumps({"v": 2}))


def test_the_scrub_takes_what_the_quota_allows_and_goes_round() -> None:
    segs = [meta(s, s + 9) for s in range(0, 60, 10)]
    items = scrub_items([archive(*[r for m in segs for r in (m.with_state(S, 0), m)])])
    requests, _bytes = estimated_cost(items[0].segment, False, 3)
    cursor = ScrubCursor()
    seen = []
    for _ in range(3):
        chosen, cursor = plan_pass(
            items,
            cursor,
            max_bytes=10**9,
            max_requests=2 * requests,
            full_crc=False,
            sample_blocks=3,
            now_ms=1,
        )
        seen.append([c.segment.start_offset for c in chosen])
    assert (
        seen == [[0, 10], [20, 30], [40, 50]]
        and cursor.last_complete_ms == 1
        and progress(items, cursor) == 1.0
    )
    chosen, cursor = plan_pass(
        items, cursor, max_bytes=1, max_requests=1, full_crc=True, sample_blocks=3, now_ms=2
    )
    assert [c.segment.start_offset for c in chosen] == [0] and cursor.cycle == 1  # at least one, a new cycle


@given(st.integers(1, 40), st.integers(1, 10))
def test_every_segment_is_checked_once_per_cycle(count, per_pass) -> None:
    segs = [meta(s * 10, s * 10 + 9) for s in range(count)]
    items = scrub_items([archive(*[r for m in segs for r in (m.with_state(S, 0), m)])])
    requests, _ = estimated_cost(items[0].segment, False, 3)
    cursor, checked = ScrubCursor(), []
    while cursor.last_complete_ms is None:
        chosen, cursor = plan_pass(
            items,
            cursor,
            max_bytes=10**12,
            max_requests=per_pass * requests,
            full_crc=False,
            sample_blocks=3,
            now_ms=5,
        )
        checked += [c.order for c in chosen]
    assert checked == [i.order for i in items]
