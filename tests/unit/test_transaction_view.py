"""read_committed computed from the log's own transaction markers, against a model."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.restore.transaction_view import Outcome, resolve
from processor.segment.entries_v2 import split_batches
from tests.batch_samples import control_batch, make_batch


def _data(offset: int, pid: int, transactional: bool) -> bytes:
    return make_batch(offset, [(1, None, b"v%d" % offset, [])], producer_id=pid, transactional=transactional)


def test_commit_abort_open_and_plain_batches() -> None:
    raw = (
        _data(0, 1, True)
        + _data(1, 9, False)
        + _data(2, 2, True)
        + control_batch(3, 1, commit=True)
        + control_batch(4, 2, commit=False)
        + _data(5, 3, True)  # never ends
        + _data(6, 9, False)
    )
    view = resolve(split_batches(raw))
    assert [b.outcome for b in view.batches] == [
        Outcome.COMMITTED,
        Outcome.COMMITTED,
        Outcome.ABORTED,
        Outcome.CONTROL,
        Outcome.CONTROL,
        Outcome.OPEN,
        Outcome.COMMITTED,
    ]
    assert view.last_stable_offset == 5
    assert [b.header.base_offset for b in view.visible()] == [0, 1]


@st.composite
def logs(draw: st.DrawFn) -> tuple[bytes, dict[int, str]]:
    """A random interleaving of producers' transactions, plain batches and markers, with the
    outcome every data batch must get."""
    raw = b""
    expected: dict[int, str] = {}
    open_txns: dict[int, list[int]] = {}
    for offset in range(draw(st.integers(0, 60))):
        pid = draw(st.integers(1, 4))
        action = draw(st.sampled_from(["data", "data", "plain", "commit", "abort"]))
        if action == "plain":
            raw += _data(offset, 100, False)
            expected[offset] = "committed"
        elif action == "data":
            raw += _data(offset, pid, True)
            open_txns.setdefault(pid, []).append(offset)
        else:
            raw += control_batch(offset, pid, commit=action == "commit")
            for o in open_txns.pop(pid, []):
                expected[o] = "committed" if action == "commit" else "aborted"
    for offsets in open_txns.values():
        for o in offsets:
            expected[o] = "open"
    return raw, expected


@given(logs())
def test_outcomes_match_the_model(log) -> None:
    raw, expected = log
    view = resolve(split_batches(raw))
    got = {b.header.base_offset: b.outcome.value for b in view.batches if b.outcome is not Outcome.CONTROL}
    assert got == expected
    opens = [o for o, v in expected.items() if v == "open"]
    assert view.last_stable_offset == (min(opens) if opens else None)
    visible = [b.header.base_offset for b in view.visible()]
    assert visible == sorted(
        o for o, v in expected.items() if v == "committed" and (not opens or o < min(opens))
    )
