"""Offsets the archive will never hold: where a read inside a lost range goes on.

When the broker deletes offsets before a worker archived them (retention or DeleteRecords while the
worker was behind or stopped), the worker reports the loss and resumes at the broker's log start:
the segment it archives next starts there, so the partition's served segments have a gap
``a..b-1`` between the one ending at ``a - 1`` and the one starting at ``b``. The gap stays in the
metadata as the record of the loss (the audit's ``offset_gap``, Spark's ``not_archived``).

Such a gap is never filled later: a partition's owner copies in offset order and resumes after the
highest finished offset, so once a segment starting at ``b`` is served nothing below ``b`` that is
unserved will be copied. A gap some listed segment still covers is not lost (yet): a copy in
flight, or a served segment being deleted whose deletion its owner may undo. A reader at an offset
inside a lost gap goes on at ``b``, as a consumer steps over a compacted topic's gaps (its fetch at
``x`` is answered from the batch at ``b``), rather than waiting for offsets that never come.
"""

from __future__ import annotations

from collections.abc import Iterable


def lost_range_end(
    offset: int,
    archive_first: int | None,
    next_served_start: int | None,
    listed: Iterable[tuple[int, int]],
) -> int | None:
    """Where a read at ``offset`` goes on when no served segment holds it: the start of the next
    served segment when ``offset`` lies in a lost range, else None (the caller's answer stands).

    ``archive_first``: the first offset the archive serves (None when it serves nothing); below it
    nothing is lost to the archive, the reader is before its start. ``next_served_start``: the start of
    the first served segment after ``offset``. ``listed``: ``(start, end)`` of the partition's segments
    in any state but deleted (copies in flight, deletions under way); one that reaches into
    ``offset..next_served_start - 1`` means the range may still be served."""
    if archive_first is None or next_served_start is None:
        return None
    if not archive_first <= offset < next_served_start:
        return None
    if any(start < next_served_start and end >= offset for start, end in listed):
        return None
    return next_served_start
