"""Target offsets of restored records from each batch's base offset, whatever lands between."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from processor.restore.delivery import landed
from processor.restore.offset_map import OffsetRun, runs_from_pairs


def test_batches_that_continue_each_other_merge_into_one_run() -> None:
    assert landed([(range(10, 15), 100), (range(15, 18), 105)]) == [OffsetRun(10, 100, 8)]


def test_another_producers_records_between_two_batches_split_the_run() -> None:
    # ours at 100..104, another producer's batch at 105..106, ours at 107..109
    assert landed([(range(10, 15), 100), (range(15, 18), 107)]) == [
        OffsetRun(10, 100, 5),
        OffsetRun(15, 107, 3),
    ]


def test_source_gaps_inside_a_batch() -> None:
    assert landed([([3, 4, 9], 50)]) == [OffsetRun(3, 50, 2), OffsetRun(9, 52, 1)]


@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3), st.integers(0, 4)), min_size=1, max_size=30))
def test_any_batches_and_interleavings_map_every_record(pieces: list[tuple[int, int, int]]) -> None:
    """Batches of n records with source gaps, and foreign records between them in the target: the
    runs place every source offset at its target offset, and no two runs could be merged."""
    sent: list[tuple[range | list[int], int]] = []
    sources: list[int] = []
    targets: list[int] = []
    source, target = 0, 1000
    for n, gap, foreign in pieces:
        offsets = [source + i * (gap + 1) for i in range(n)]
        sent.append((range(offsets[0], offsets[-1] + 1) if gap == 0 else offsets, target))
        sources += offsets
        targets += range(target, target + n)
        source, target = offsets[-1] + 1 + gap, target + n + foreign
    runs = landed(sent)
    assert runs == runs_from_pairs(sources, targets)
