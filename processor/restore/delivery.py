"""Where the restored records landed: target offsets from each batch's base offset. Pure.

Every batch the restore sends has offset deltas 0..n-1 (:mod:`processor.restore.produce`), and the
broker appends a batch whole, so a batch answered with base offset ``b`` holds its records at
``b..b+n-1``, whatever other producers write into the partition between two batches. The source
offsets of a batch's records (a range, or a list where the source had gaps) and that base offset
give the batch's offset map runs, which merge with their neighbours when both sides continue.
"""

from __future__ import annotations

from collections.abc import Iterable

from processor.restore.offset_map import OffsetRun, runs_from_pairs


def landed(sent: Iterable[tuple[range | list[int], int]]) -> list[OffsetRun]:
    """The offset map runs (source -> target) of batches ``(source offsets, target base offset)``
    sent to one target partition from one source partition, in produce order."""
    runs: list[OffsetRun] = []
    for sources, base in sent:
        if isinstance(sources, range):
            _append(runs, OffsetRun(sources.start, base, len(sources)))
            continue
        for run in runs_from_pairs(sources, range(base, base + len(sources))):
            _append(runs, run)
    return runs


def _append(runs: list[OffsetRun], run: OffsetRun) -> None:
    last = runs[-1] if runs else None
    if last is not None and (last.source_end, last.target_end) == (run.source_start, run.target_start):
        runs[-1] = OffsetRun(last.source_start, last.target_start, last.length + run.length)
    else:
        runs.append(run)
