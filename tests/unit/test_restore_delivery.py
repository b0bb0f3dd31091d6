"""Target offsets from the first and last delivery report of each span, with read-back on gaps."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError
from hypothesis import given
from hypothesis import strategies as st

from processor.restore.delivery import (
    DeliveryFailedError,
    DeliveryMismatchError,
    Span,
    landed,
    offsets_in_range,
)
from processor.restore.offset_map import OffsetRun, runs_from_pairs


class _Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def offset(self) -> int:
        return self._offset


def _span(source_partition: int, sources: range | list[int], targets: list[int]) -> Span:
    span = Span(source_partition, sources)
    span.on_first(None, _Msg(targets[0]))
    span.on_last(None, _Msg(targets[-1]))
    return span


def test_contiguous_spans_need_no_read_back() -> None:
    spans = {
        0: [_span(0, range(10, 15), [100, 101, 102, 103, 104]), _span(0, range(15, 18), [106, 107, 108])]
    }

    def no_read_back(*_args: int) -> list[int]:
        raise AssertionError("no read-back expected")

    assert landed(spans, no_read_back) == {0: [OffsetRun(10, 100, 5), OffsetRun(15, 106, 3)]}


def test_a_gap_inside_a_span_is_read_back() -> None:
    # our records at 100, 101, then another producer's batch at 102..103, ours at 104..106
    spans = {2: [_span(5, range(0, 5), [100, 101, 104, 105, 106])]}
    log = [(100, 101, 7), (102, 103, 9), (104, 106, 7)]
    calls: list[tuple[int, int, int]] = []

    def read_back(partition: int, first: int, last: int) -> list[int]:
        calls.append((partition, first, last))
        return offsets_in_range(log, first, last)

    assert landed(spans, read_back) == {5: [OffsetRun(0, 100, 2), OffsetRun(2, 104, 3)]}
    assert calls == [(2, 100, 106)]


def test_source_gaps_inside_a_batch() -> None:
    spans = {0: [_span(0, [3, 4, 9], [50, 51, 52])]}
    assert landed(spans, lambda *_: []) == {0: [OffsetRun(3, 50, 2), OffsetRun(9, 52, 1)]}


def test_failures_and_mismatches() -> None:
    failed = Span(0, range(0, 2))
    failed.on_first(KafkaError(KafkaError._MSG_TIMED_OUT), None)
    with pytest.raises(DeliveryFailedError) as raised:
        landed({0: [failed]}, lambda *_: [])
    assert raised.value.error.code() == KafkaError._MSG_TIMED_OUT
    unreported = Span(0, range(0, 2))
    with pytest.raises(DeliveryMismatchError, match="without its offset"):
        landed({0: [unreported]}, lambda *_: [])
    short = {0: [_span(0, range(0, 3), [10, 11, 20])]}
    with pytest.raises(DeliveryMismatchError, match="2 of our records"):
        landed(short, lambda *_: [10, 20])
    with pytest.raises(DeliveryMismatchError, match="no batch"):
        offsets_in_range([(0, 5, 1)], 9, 12)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5)), min_size=1, max_size=30), st.data())
def test_read_back_recovers_any_interleaving(pieces, data: st.DataObject) -> None:
    """Our records and another producer's batches interleaved at random: the span's offsets are
    exactly ours, from the log alone."""
    log: list[tuple[int, int, int]] = []
    ours: list[int] = []
    offset = data.draw(st.integers(0, 1000))
    pieces = [(True, pieces[0][1]), *pieces[1:], (True, 1)]  # the span starts and ends with ours
    for mine, n in pieces:
        log.append((offset, offset + n - 1, 1 if mine else 2))
        if mine:
            ours.extend(range(offset, offset + n))
        offset += n
    span = _span(0, list(range(len(ours))), ours)
    runs = landed({0: [span]}, lambda _p, first, last: offsets_in_range(log, first, last))[0]
    assert runs == runs_from_pairs(list(range(len(ours))), ours)
