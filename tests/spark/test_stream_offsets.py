"""Stream offsets (JSON round trip, old versions, corruption) and Spark's admission arithmetic."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.spark.stream_offsets import StreamOffsets, delay_batch, rate_limit

pytestmark = pytest.mark.spark
TP = TopicPartition

topics = st.text(alphabet="abcxyz0129._-", min_size=1, max_size=8)
offset_maps = st.dictionaries(st.builds(TP, topics, st.integers(0, 200)), st.integers(0, 2**40), max_size=6)


@given(
    offset_maps, st.dictionaries(topics, st.uuids().map(str), max_size=3), st.one_of(st.none(), offset_maps)
)
def test_offsets_round_trip_through_json_text(offsets, ids, initial) -> None:
    value = StreamOffsets(offsets, ids, initial)
    text = json.dumps(value.to_json())
    assert StreamOffsets.from_json(json.loads(text)) == value
    assert (
        json.dumps(StreamOffsets(dict(reversed(offsets.items())), ids, initial).to_json()) == text
    )  # order-free


def test_layout_version_1_is_still_read_and_unknown_versions_are_refused() -> None:
    old = {"orders": {"0": 12, "10": 3}}
    assert StreamOffsets.from_json(old) == StreamOffsets({TP("orders", 0): 12, TP("orders", 10): 3})
    doc = StreamOffsets({TP("a", 1): 5}, {"a": "id"}, {TP("a", 1): 2}).to_json()
    assert doc == {"a": {"1": 5}, "@ids": {"a": "id"}, "@initial": {"a": {"1": 2}}, "@v": 2}
    with pytest.raises(FormatError, match="version 9"):
        StreamOffsets.from_json({"@v": 9})
    for garbage in ({"a": 5}, {"a": {"x": 1}}, {"a": {"0": 1}, "@initial": {"b": 7}}):
        with pytest.raises(FormatError):
            StreamOffsets.from_json(garbage)


def test_rate_limit_spreads_the_cap_in_proportion_and_never_starves_a_partition() -> None:
    start = {TP("t", 0): 0, TP("t", 1): 100, TP("t", 2): 50}
    latest = {TP("t", 0): 1000, TP("t", 1): 110, TP("t", 2): 50}
    capped = rate_limit(50, start, latest)
    # shares 50 * 1000/1010 = 49.5 (rounded down) and 50 * 10/1010 = 0.49 (rounded up: no starving)
    assert capped == {TP("t", 0): 49, TP("t", 1): 101, TP("t", 2): 50}
    assert rate_limit(10_000, start, latest) == {TP("t", 0): 1000, TP("t", 1): 110, TP("t", 2): 50}


@given(
    st.integers(1, 10_000),
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), min_size=1, max_size=6),
)
def test_rate_limit_stays_within_the_range_and_near_the_cap(limit, spans) -> None:
    start = {TP("t", i): lo for i, (lo, _n) in enumerate(spans)}
    latest = {TP("t", i): lo + n for i, (lo, n) in enumerate(spans)}
    capped = rate_limit(limit, start, latest)
    assert all(start[tp] <= capped[tp] <= latest[tp] for tp in start)
    waiting = sum(latest[tp] - start[tp] for tp in start)
    assert sum(capped[tp] - start[tp] for tp in start) <= max(limit, 0) + len(spans)
    if waiting <= limit:
        assert capped == latest


def test_delay_batch_holds_until_enough_waits_or_the_delay_passed() -> None:
    start, latest = {TP("t", 0): 0}, {TP("t", 0): 5}
    assert delay_batch(10, latest, start, now_ms=1_000, last_trigger_ms=0, max_delay_ms=60_000) == (True, 0)
    assert delay_batch(10, {TP("t", 0): 12}, start, now_ms=1_000, last_trigger_ms=0, max_delay_ms=60_000) == (
        False,
        1_000,
    )
    assert delay_batch(10, latest, start, now_ms=61_000, last_trigger_ms=1_000, max_delay_ms=60_000) == (
        False,
        61_000,
    )
