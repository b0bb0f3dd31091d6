"""The retention planner: Kafka's order, its three breaches, future timestamps, copies in progress."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.config import load_settings, parse_overrides
from processor.errors import ConfigError
from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import (
    DeleteReason,
    RetentionLimits,
    breach,
    plan_retention,
    time_anchor_ms,
)
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState

S = SegmentState
DAY = 86_400_000
NOW = 100 * DAY


def seg(
    start: int,
    end: int,
    *,
    max_ts: int = 0,
    uploaded: int = 0,
    size: int = 100,
    state: SegmentState = S.COPY_SEGMENT_FINISHED,
) -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId("t", 0, uuid.uuid4()),
        start,
        end,
        max_ts,
        uploaded,
        "w",
        0,
        ((0, start),),
        size,
        state,
        "d",
        "d-index",
        1,
        end - start + 1,
        0,
        10,
    )


def chain(*specs: dict[str, int]) -> list[RemoteLogSegmentMetadata]:
    """Contiguous finished segments of 100 offsets each."""
    return [seg(i * 100, i * 100 + 99, **spec) for i, spec in enumerate(specs)]  # type: ignore[arg-type]


def test_unlimited_deletes_nothing() -> None:
    plan = plan_retention(chain({}, {}, {}), RetentionLimits(), NOW)
    assert plan.empty


def test_time_deletes_the_old_prefix_and_moves_the_start_first() -> None:
    segs = chain(
        {"max_ts": NOW - 5000}, {"max_ts": NOW - 3000}, {"max_ts": NOW - 500}, {"max_ts": NOW - 4000}
    )
    plan = plan_retention(segs, RetentionLimits(retention_ms=1000), NOW)
    # the walk stops at the first segment that breaches nothing, even if a later one would
    assert [s for s, _ in plan.expired] == segs[:2]
    assert {r for _, r in plan.expired} == {DeleteReason.TIME}
    assert plan.new_log_start_offset == 200


def test_a_future_timestamp_does_not_keep_everything_alive() -> None:
    future = NOW + 365 * DAY
    segs = chain({"max_ts": future, "uploaded": NOW - 2 * DAY}, {"max_ts": NOW - 2 * DAY}, {"max_ts": NOW})
    plan = plan_retention(segs, RetentionLimits(retention_ms=DAY), NOW)
    assert [s for s, _ in plan.expired] == segs[:2]
    assert time_anchor_ms(segs[0], NOW) == NOW - 2 * DAY
    # recently uploaded: its future timestamp counts from the upload, so it stays
    recent = chain({"max_ts": future, "uploaded": NOW - 10})
    assert plan_retention(recent, RetentionLimits(retention_ms=DAY), NOW).empty


def test_size_deletes_oldest_first_until_at_or_below_the_limit() -> None:
    segs = chain({"size": 100}, {"size": 300}, {"size": 50}, {"size": 200})  # 650 bytes
    plan = plan_retention(segs, RetentionLimits(retention_bytes=300), NOW)
    assert [s for s, _ in plan.expired] == segs[:2]  # 650 -> 550 -> 250
    assert {r for _, r in plan.expired} == {DeleteReason.SIZE}
    assert plan_retention(segs, RetentionLimits(retention_bytes=650), NOW).empty


def test_size_counts_only_finished_segments_each_once() -> None:
    segs = chain({"size": 100}, {"size": 100})
    others = [
        seg(0, 99, size=10_000, state=S.DELETE_SEGMENT_STARTED),
        seg(0, 99, size=10_000, state=S.DELETE_SEGMENT_FINISHED),
        seg(200, 299, size=10_000, state=S.COPY_SEGMENT_STARTED),
    ]
    plan = plan_retention(segs + others + [segs[0]], RetentionLimits(retention_bytes=200), NOW)
    assert plan.expired == ()
    assert plan.requeue == (others[0],)


def test_delete_before_moves_the_start_even_inside_a_segment() -> None:
    segs = chain({}, {}, {})
    plan = plan_retention(segs, RetentionLimits(), NOW, requested_start_offset=150)
    assert [s for s, _ in plan.expired] == segs[:1]
    assert plan.expired[0][1] is DeleteReason.LOG_START_OFFSET
    assert plan.new_log_start_offset == 150
    # a start offset never moves back
    assert plan_retention(
        segs[1:], RetentionLimits(), NOW, log_start_offset=150, requested_start_offset=20
    ).empty


def test_a_copy_in_progress_stops_the_pass() -> None:
    old = NOW - 10 * DAY
    done = seg(0, 99, max_ts=old)
    copying = seg(100, 199, max_ts=old, state=S.COPY_SEGMENT_STARTED)
    plan = plan_retention([copying, done], RetentionLimits(retention_ms=DAY, retention_bytes=0), NOW)
    assert [s for s, _ in plan.expired] == [done]
    assert plan.dangling == () and plan.new_log_start_offset == 100


def test_an_attempt_below_the_finished_end_is_dangling_not_in_progress() -> None:
    old = NOW - 10 * DAY
    done = chain({"max_ts": old}, {"max_ts": NOW})
    crashed = seg(0, 99, state=S.COPY_SEGMENT_STARTED)
    plan = plan_retention([*done, crashed], RetentionLimits(retention_ms=DAY), NOW)
    assert plan.dangling == (crashed,)
    assert [s for s, _ in plan.expired] == done[:1]


def test_delete_started_segments_are_requeued() -> None:
    stuck = seg(0, 99, state=S.DELETE_SEGMENT_STARTED)
    plan = plan_retention([stuck, *chain({}, {})[1:]], RetentionLimits(), NOW)
    assert plan.requeue == (stuck,) and plan.expired == ()


# -- properties -------------------------------------------------------------------------------------


@st.composite
def partitions(draw: st.DrawFn) -> tuple[list[RemoteLogSegmentMetadata], RetentionLimits, int, int | None]:
    n = draw(st.integers(0, 12))
    segs = []
    start = draw(st.integers(0, 1000))
    for _ in range(n):
        length = draw(st.integers(1, 500))
        segs.append(
            seg(
                start,
                start + length - 1,
                max_ts=draw(st.integers(-1, NOW + DAY)),
                uploaded=draw(st.integers(0, NOW)),
                size=draw(st.integers(0, 10_000)),
            )
        )
        start += length
    limits = RetentionLimits(
        retention_ms=draw(st.sampled_from([-1, 0, 1000, DAY, NOW])),
        retention_bytes=draw(st.sampled_from([-1, 0, 500, 5000, 50_000])),
    )
    log_start = draw(st.integers(0, 2000))
    requested = draw(st.one_of(st.none(), st.integers(0, start + 10)))
    return segs, limits, log_start, requested


@given(partitions())
def test_deletes_a_prefix_each_breaching_and_stops_at_the_first_keeper(case) -> None:
    segs, limits, log_start, requested = case
    plan = plan_retention(segs, limits, NOW, log_start, requested)
    deleted = [s for s, _ in plan.expired]
    assert deleted == segs[: len(deleted)], "never deletes a keeper before a segment that breaches"
    target = max(log_start, requested or 0)
    cutoff = NOW - limits.retention_ms if limits.retention_ms >= 0 else None
    remaining = sum(s.segment_size_in_bytes for s in segs)
    for s, reason in plan.expired:
        assert breach(s, limits, NOW, target, cutoff, remaining) is reason
        remaining -= s.segment_size_in_bytes
    if len(deleted) < len(segs):
        assert breach(segs[len(deleted)], limits, NOW, target, cutoff, remaining) is None
    if limits.retention_bytes >= 0:
        assert remaining <= limits.retention_bytes, "size after deletion must be within the limit"
    if plan.new_log_start_offset is not None:
        assert plan.new_log_start_offset > log_start
        assert all(s.end_offset < plan.new_log_start_offset for s in deleted)
    assert all(s.end_offset >= target for s in segs[len(deleted) :]), "nothing kept below the start"


@given(partitions())
def test_future_timestamps_never_keep_old_uploads(case) -> None:
    segs, _limits, _log_start, _requested = case
    future = [
        seg(s.start_offset, s.end_offset, max_ts=NOW + DAY, uploaded=NOW - 2 * DAY, size=1) for s in segs
    ]
    plan = plan_retention(future, RetentionLimits(retention_ms=DAY), NOW)
    assert [s for s, _ in plan.expired] == future


# -- configuration ----------------------------------------------------------------------------------


def test_overrides_apply_per_topic_and_kind() -> None:
    config = RetentionConfig(
        RetentionLimits(retention_ms=1000), parse_overrides("orders=ms:-1, payments=bytes:5,payments=ms:7")
    )
    assert config.limits("orders") == RetentionLimits(-1, -1)
    assert config.limits("payments") == RetentionLimits(7, 5)
    assert config.limits("other") == RetentionLimits(1000, -1)
    assert config.anything_limited
    assert not RetentionConfig(RetentionLimits(), parse_overrides("a=ms:-1")).anything_limited


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("orders", "not of the form"),
        ("orders=ms", "not of the form"),
        ("or/ders=ms:1", "invalid topic name"),
        ("orders=days:1", "unknown limit 'days'"),
        ("orders=ms:1h", "'1h' is not an integer"),
        ("orders=bytes:-5", "below -1"),
        ("orders=ms:1,orders=ms:2", "more than one 'ms'"),
    ],
)
def test_bad_overrides_name_the_entry_and_the_problem(raw: str, message: str) -> None:
    with pytest.raises(ConfigError, match="PROCESSOR_REMOTE_RETENTION_OVERRIDES") as info:
        load_settings({"PROCESSOR_REMOTE_RETENTION_OVERRIDES": raw})
    assert message in str(info.value)


def test_retention_settings_defaults() -> None:
    s = load_settings({})
    assert (s.remote_retention_ms, s.remote_retention_bytes, s.retention_check_ms) == (-1, -1, 30_000)
    assert s.deletion_topic == "__remote_segments_to_be_deleted" and s.upload_bytes_per_second == -1
    with pytest.raises(ConfigError, match="PROCESSOR_UPLOAD_BYTES_PER_SECOND"):
        load_settings({"PROCESSOR_UPLOAD_BYTES_PER_SECOND": "0"})
    with pytest.raises(ConfigError, match="PROCESSOR_DELETION_TOPIC"):
        load_settings({"PROCESSOR_DELETION_TOPIC": "a/b"})


def test_a_finished_segment_that_is_not_served_is_kept_reported_and_not_counted() -> None:
    kept = chain({"size": 100}, {"size": 100})
    replaced = seg(0, 99, size=10_000)  # an older epoch's copy of the same range, no longer served
    plan = plan_retention(
        [*kept, replaced], RetentionLimits(retention_bytes=200), NOW, served={s.segment_id.id for s in kept}
    )
    # acknowledged data a view does not serve is never a worker's to delete (a retired topic id's
    # history may be what a disaster recovery restores from): listed, not planned
    assert plan.dangling == () and plan.expired == () and plan.unserved == (replaced,)
    # without the served set every finished segment counts
    assert plan_retention([*kept, replaced], RetentionLimits(retention_bytes=200), NOW).expired
