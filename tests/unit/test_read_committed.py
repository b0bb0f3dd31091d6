"""The archive keeps what a read_committed consumer sees: aborted and control batches dropped."""

from __future__ import annotations

from processor.segment.entries_v2 import split_batches
from processor.segment.read_committed import committed
from tests.batch_samples import control_batch, make_batch


def _kept(raw: bytes, aborted: list[tuple[int, int]]) -> list[tuple[int, bool]]:
    return [(h.base_offset, keep) for h, _v, keep in committed(split_batches(raw), aborted)]


def _tx(offset: int, pid: int) -> bytes:
    return make_batch(offset, [(1, None, b"x", [])], producer_id=pid, transactional=True)


def test_aborted_transactions_and_markers_are_dropped() -> None:
    raw = (
        _tx(0, 1)  # committed transaction of producer 1
        + control_batch(1, 1, commit=True)
        + _tx(2, 2)  # producer 2 aborts
        + make_batch(3, [(1, None, b"plain", [])])  # non-transactional, interleaved
        + _tx(4, 2)
        + control_batch(5, 2, commit=False)
        + _tx(6, 2)  # producer 2's next transaction, committed
        + control_batch(7, 2, commit=True)
    )
    assert _kept(raw, [(2, 2)]) == [
        (0, True),
        (1, False),
        (2, False),
        (3, True),
        (4, False),
        (5, False),
        (6, True),
        (7, False),
    ]


def test_without_an_aborted_list_only_markers_are_dropped() -> None:
    raw = _tx(0, 1) + control_batch(1, 1, commit=False)
    assert _kept(raw, []) == [(0, True), (1, False)]


def test_an_abort_starting_in_a_later_batch_does_not_drop_earlier_ones() -> None:
    raw = _tx(0, 3) + control_batch(1, 3, commit=True) + _tx(2, 3) + control_batch(3, 3, commit=False)
    assert _kept(raw, [(3, 2)]) == [(0, True), (1, False), (2, False), (3, False)]
