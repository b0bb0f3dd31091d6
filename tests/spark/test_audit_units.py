"""The audit's pure parts: the fold adapter's state round trip, the record verdicts (from the fold),
the checks over each partition's archive, the open problems view, the scrub quota and cursor."""

from __future__ import annotations

import base64
import dataclasses
import json
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import encode_value, record_key, segment_key
from processor.metadata.fold import MetadataFold
from processor.metadata.fold_reasons import REASONS
from processor.metadata.model import (
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
)
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.audit.problems import AuditState, ScrubCursor
from processor.spark.audit.rules import (
    KINDS,
    RECORD_KINDS,
    STATE_SCOPE,
    Finding,
    RecordVerdicts,
    fold_group,
    state_findings,
)
from processor.spark.audit.scrub import estimated_cost, plan_pass, progress, scrub_items
from processor.spark.audit.storage import lag_findings
from processor.spark.fold_adapter import PartitionArchive, PartitionFold

pytestmark = pytest.mark.spark
TP = TopicPartition("t", 0)
F, S = SegmentState.COPY_SEGMENT_FINISHED, SegmentState.COPY_SEGMENT_STARTED
KEYS = ObjectKeyFactory("archive")
ID_A, ID_B = str(uuid.UUID(int=0xA)), str(uuid.UUID(int=0xB))  # topic ids: lower-case UUIDs
Message = tuple[int, bytes | None, bytes | None]  # (offset, key, value) as on the metadata topic


def meta(
    start: int,
    end: int,
    state: SegmentState = F,
    epoch: int = 0,
    ts: int = 0,
    sid: uuid.UUID | None = None,
    topic_id: str = ID_A,
) -> RemoteLogSegmentMetadata:
    segment_id = RemoteLogSegmentId("t", 0, sid or uuid.uuid4(), topic_id)
    keys = KEYS.segment("t", 0, start, segment_id.id, max(epoch, 0), topic_id)
    return RemoteLogSegmentMetadata(
        segment_id,
        start,
        end,
        10 * end,
        ts,
        "w",
        epoch,
        ((max(epoch, 0), start),),
        1000,
        state,
        keys.data,
        keys.index,
        2,
        end - start + 1,
        0,
        500,
    )


def claim(kind: ClaimKind = ClaimKind.LEAD, released: int = -1, topic_id: str = ID_A) -> PartitionClaim:
    return PartitionClaim(
        TP, uuid.uuid4(), kind, "w", 0, topic_id if kind is not ClaimKind.RELEASE else None, released
    )


class Topic:
    """One metadata partition: records appended at the next offset, as the rows the audit gets."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    def append(
        self, record: MetadataRecord | None, key: bytes | None = None, value: bytes | None = None
    ) -> int:
        if record is not None:
            key, value = key or record_key(record), value if value is not None else encode_value(record)
        self.messages.append((len(self.messages), key, value))
        return len(self.messages) - 1

    def copy(self, start: int, end: int, epoch: int, ts: int = 0) -> RemoteLogSegmentMetadata:
        started = meta(start, end, S, epoch, ts)
        self.append(started)
        finished = started.with_state(F, ts)
        self.append(finished)
        return finished

    def rows(self, since: int = 0) -> list[dict[str, object]]:
        return [
            {
                "key": key.decode("utf-8", "replace") if key is not None else None,
                "raw_key": key,
                "value": value,
                "meta_partition": 0,
                "meta_offset": offset,
            }
            for offset, key, value in self.messages[since:]
        ]


def copied(start: int, end: int, epoch: int = 0, ts: int = 0) -> list[RemoteLogSegmentMetadata]:
    m = meta(start, end, S, epoch, ts)
    return [m, m.with_state(F, ts)]


def test_every_reason_of_the_fold_is_a_finding_kind() -> None:
    assert set(RECORD_KINDS) == set(REASONS) and all(KINDS[r] in ("error", "warning") for r in REASONS)


def history() -> Topic:
    """Old records (before claims), a claim, a takeover, a zombie, an overlap, garbage, a start offset."""
    topic = Topic()
    topic.copy(0, 9, epoch=0)
    first = topic.append(claim())
    topic.copy(10, 19, first)
    second = topic.append(claim())  # a takeover: the first owner's epoch is over
    zombie = meta(20, 29, S, first)
    topic.append(zombie)  # stale_epoch, of a segment nobody knows: an orphan
    overlapping = meta(15, 25, S, second)
    topic.append(overlapping)
    topic.append(overlapping.with_state(F, 1))  # overlap: 15..19 are served already
    topic.append(None, b"t/0/garbage", b"\x01\x09junk")  # undecodable
    topic.append(RemoteLogStartOffset(TP, 5, 0, "w", second))
    topic.copy(20, 29, second)
    return topic


def test_fold_state_round_trips_with_claims_shadowed_keys_and_orphans() -> None:
    topic = history()
    fold = PartitionFold(TP)
    for offset, key, value in topic.messages:
        fold.apply(offset, key, value)
    view = fold.view
    assert view.header.current_epoch is not None and view.orphans and view.log_start_offset == 5
    text = fold.to_json()
    again = PartitionFold.from_json(TP, text)
    assert again.view == view and again.to_json() == text and again.archive() == fold.archive()
    reference = MetadataFold()
    for offset, key, value in topic.messages:
        reference.apply_raw(offset, key, value)
    assert view == reference.partition(TP)  # the same fold, the same state


def test_a_pre_claim_fold_state_version_1_is_still_read() -> None:
    seg = meta(0, 9)
    v1 = json.dumps(
        {
            "v": 1,
            "segments": [base64.b64encode(encode_value(seg)).decode()],
            "served": [str(seg.segment_id.id)],
            "log_start_offset": 3,
            "delete_state": None,
            "lineage": {"max_epoch": 4, "topic_id": ID_A, "retired": [], "legacy_retired": False},
        }
    )
    fold = PartitionFold.from_json(TP, v1)
    archive = fold.archive()
    assert archive is not None and archive.served == (seg,) and archive.log_start_offset == 3
    assert fold.view.header.lineage.max_epoch == 4 and not fold.view.header.claimed
    older = meta(10, 19, S, 3)  # an epoch below the one the state has seen
    assert fold.apply(10, record_key(older), encode_value(older)).reason == "stale_epoch"


@pytest.mark.parametrize("bad", ['{"v": 9}', '{"v": 2, "segments": ["!!"]}', "[]", '{"v": 2}', "{"])
def test_a_fold_state_that_does_not_decode_is_a_format_error(bad: str) -> None:
    with pytest.raises(FormatError):
        PartitionFold.from_json(TP, bad)


@st.composite
def histories(draw: st.DrawFn) -> Topic:
    """Random interleavings of claims, releases, copies under current and stale epochs, overlapping
    finishes, deletes, start offsets, tombstones and garbage."""
    topic = Topic()
    claims: list[int] = []
    known: list[RemoteLogSegmentMetadata] = []
    for _ in range(draw(st.integers(1, 25))):
        action = draw(st.sampled_from(["claim", "release", "copy", "start", "delete", "lso", "tomb", "junk"]))
        epoch = draw(st.sampled_from([*claims, 0, -1])) if claims else draw(st.sampled_from([0, 1, -1]))
        start = draw(st.integers(0, 6)) * 10
        if action == "claim":
            claims.append(topic.append(claim(topic_id=draw(st.sampled_from([ID_A, ID_B])))))
        elif action == "release" and claims:
            topic.append(claim(ClaimKind.RELEASE, draw(st.sampled_from(claims))))
        elif action == "copy":
            known.append(topic.copy(start, start + draw(st.integers(0, 15)), epoch))
        elif action == "start":
            known.append(meta(start, start + 9, S, epoch))
            topic.append(known[-1])
        elif action == "delete" and known:
            seg = draw(st.sampled_from(known))
            deleting = seg.with_state(SegmentState.DELETE_SEGMENT_STARTED, 1)
            topic.append(dataclasses.replace(deleting, writer_epoch=epoch))
        elif action == "lso":
            topic.append(RemoteLogStartOffset(TP, start, 0, "w", max(epoch, 0)))
        elif action == "tomb" and known:
            topic.append(None, segment_key(draw(st.sampled_from(known)).segment_id), None)
        elif action == "junk":
            topic.append(
                None, draw(st.sampled_from([b"t/0/x", b"t/0/log-start-offset", b"\xff"])), b"\x01\x09j"
            )
    return topic


@given(histories(), st.data())
def test_a_fold_kept_between_micro_batches_decides_as_the_fold_over_the_whole_topic(topic, data) -> None:
    """The property the audit's state must have: cut the topic anywhere, keep the partition's state
    as JSON between the parts, and every verdict and the final state are the whole fold's."""
    reference = MetadataFold()
    expected = [reference.apply_raw(o, k, v) for o, k, v in topic.messages]
    cuts = sorted(data.draw(st.lists(st.integers(0, len(topic.messages)), max_size=3)))
    got, state, begin = [], None, 0
    for end in [*cuts, len(topic.messages)]:
        fold = PartitionFold.from_json(TP, state)
        got += [fold.apply(o, k, v) for o, k, v in topic.messages[begin:end]]
        state, begin = fold.to_json(), end
    assert [(v.accepted, v.reason) for v in got] == [(v.accepted, v.reason) for v in expected]
    assert PartitionFold.from_json(TP, state).view == reference.partition(TP)


def test_record_verdicts_are_the_folds_reasons_counted_and_a_takeover_is_no_finding() -> None:
    topic = history()
    state, found, counts = fold_group(TP, None, topic.rows())
    kinds = sorted(f.kind for f in found)
    assert kinds == ["overlap", "stale_epoch", "undecodable"], found
    assert counts == {"stale_epoch": 1, "overlap": 1, "undecodable": 1}
    by_kind = {f.kind: f for f in found}
    assert "overlaps served segment" in by_kind["overlap"].detail
    assert (by_kind["overlap"].start_offset, by_kind["overlap"].end_offset) == (15, 25)
    assert "the current claim is" in by_kind["stale_epoch"].detail
    # the next micro-batch: the owner tombstones the zombie's key (cleanup); a release, then a
    # record nobody's claim covers; a record whose key names another segment; an illegal transition
    before = len(topic.messages)
    topic.append(None, f"t/0/{by_kind['stale_epoch'].segment_id}".encode(), None)
    owner = [o for o, k, _ in topic.messages if k is not None and b"/claim/" in k][-1]
    served = meta(30, 39, S, owner)
    topic.append(served)
    topic.append(served.with_state(F, 1))
    topic.append(served.with_state(S, 2))  # FINISHED -> STARTED
    other = meta(40, 49, S, owner)
    topic.append(other, key=segment_key(meta(0, 1).segment_id))  # a key that does not name the record
    topic.append(claim(ClaimKind.RELEASE, owner))
    topic.append(meta(50, 59, S, owner))
    state, found, counts = fold_group(TP, state, topic.rows(before))
    assert sorted(f.kind for f in found) == ["illegal", "invalid", "no_claim", "overlap", "undecodable"]
    assert counts == {"illegal": 1, "invalid": 1, "no_claim": 1}
    verdicts = RecordVerdicts.from_json(TP, state)
    assert verdicts.findings() == found and verdicts.counts["stale_epoch"] == 1


def test_a_version_1_verdict_state_is_read_under_the_reasons_names() -> None:
    v1 = json.dumps(
        {
            "v": 1,
            "fold": None,
            "rejected": {
                "t/0/a": {
                    "kind": "fenced_record",
                    "detail": "x: the fold rejected Y (old_topic_id)",
                    "where": "x",
                },
                "t/0/b": {"kind": "illegal_transition", "detail": "x", "where": "x"},
                "t/0/c": {"kind": "undecodable_record", "detail": "x", "where": "x"},
            },
        }
    )
    assert sorted(f.kind for f in RecordVerdicts.from_json(TP, v1).findings()) == [
        "illegal",
        "old_topic_id",
        "undecodable",
    ]
    with pytest.raises(FormatError):
        RecordVerdicts.from_json(TP, '{"v": 3}')


def archive(*records: MetadataRecord) -> PartitionArchive:
    topic = Topic()
    for r in records:
        topic.append(r)
    fold = PartitionFold(TP)
    for offset, key, value in topic.messages:
        assert fold.apply(offset, key, value).accepted, (offset, value)
    got = fold.archive()
    assert got is not None
    return got


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


def test_a_copy_a_lost_claim_left_is_stuck_and_a_takeover_by_claim_is_clean() -> None:
    hour = 3_600_000
    topic = Topic()
    first = topic.append(claim())
    topic.copy(0, 9, first)
    topic.append(meta(10, 19, S, first, ts=0))  # the first owner dies mid-copy
    second = topic.append(claim())  # the next owner takes over: no finding for that
    topic.copy(10, 19, second, ts=hour)
    fold = PartitionFold(TP)
    assert all(fold.apply(o, k, v).accepted for o, k, v in topic.messages)
    a = fold.archive()
    assert a is not None and a.claim_epoch == second and a.highest_finished_offset == 19
    found = state_findings([a], hour, 60_000)
    assert [f.kind for f in found] == ["stuck_copy"] and f"current claim is {second}" in found[0].detail
    assert state_findings([a], 30_000, 60_000) == []  # within the threshold the new owner may clean up


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
