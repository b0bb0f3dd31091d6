"""Where a read inside a range the broker deleted before it was archived goes on (pure)."""

from __future__ import annotations

from processor.reader.lost_ranges import lost_range_end

# served: 0..1999 and 3000..3999; 2000..2999 were deleted by the broker before they were archived
SERVED = [(0, 1999), (3000, 3999)]


def test_an_offset_in_a_gap_between_served_segments_goes_on_at_the_next_one() -> None:
    for offset in (2000, 2500, 2999):
        assert lost_range_end(offset, 0, 3000, SERVED) == 3000


def test_a_copy_in_flight_over_the_gap_keeps_the_reader_waiting() -> None:
    """A segment not finished yet (or one being deleted, whose deletion may be undone) that reaches
    into the gap: the range may still be served."""
    assert lost_range_end(2000, 0, 3000, [*SERVED, (2000, 2999)]) is None
    assert lost_range_end(2500, 0, 3000, [*SERVED, (2800, 2900)]) is None
    assert lost_range_end(2500, 0, 3000, [*SERVED, (1500, 2500)]) is None


def test_a_listed_segment_outside_what_is_skipped_does_not_hold_it() -> None:
    """Only what lies between the offset and the next served segment counts: a copy in flight below
    the offset, or one after the next served start, says nothing about the range stepped over."""
    assert lost_range_end(2500, 0, 3000, [(2000, 2400), (3000, 3500)]) == 3000


def test_before_the_archive_or_past_its_end_nothing_is_lost_to_it() -> None:
    assert lost_range_end(500, 1000, 3000, SERVED) is None  # below the archive's first offset
    assert lost_range_end(4000, 0, None, SERVED) is None  # past the archive's end: live data
    assert lost_range_end(0, None, None, []) is None  # nothing archived


def test_an_offset_at_or_after_the_next_served_start_is_not_in_a_gap() -> None:
    assert lost_range_end(3000, 0, 3000, SERVED) is None
