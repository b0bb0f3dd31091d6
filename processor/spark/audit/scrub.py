"""Which segments a bounded storage pass checks. Pure.

The storage checks read objects, so each pass gets a quota (bytes and requests) and goes on where
the last pass stopped: every listed finished segment has an order key (topic, partition, start
offset, segment id); a pass takes segments after the cursor until its quota is used up (always at
least one, so a pass always makes progress), and a cycle ends when the last segment was checked
(the next pass starts again from the first). The cost of a segment is estimated before it is read
(the index's size tells about how many blocks it has); the bytes and requests actually used are
counted by the checks themselves.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.spark.audit.problems import ScrubCursor
from processor.spark.fold_adapter import PartitionArchive

INDEX_BYTES_PER_BLOCK = 74  # a block's entry in the index object (block index + KIP-405 entry)
INDEX_FIXED_BYTES = 100


@dataclass(frozen=True, slots=True)
class ScrubItem:
    order: str
    segment: RemoteLogSegmentMetadata


def scrub_items(archives: Iterable[PartitionArchive]) -> list[ScrubItem]:
    """Every listed COPY_SEGMENT_FINISHED segment (served, superseded or below the log start: all
    have objects until deleted), in order."""
    out = []
    for a in archives:
        for seg in a.listed:
            if seg.state == SegmentState.COPY_SEGMENT_FINISHED:
                sid = seg.segment_id
                order = f"{sid.topic}\0{sid.partition:010d}\0{seg.start_offset:020d}\0{sid.id}"
                out.append(ScrubItem(order, seg))
    return sorted(out, key=lambda i: i.order)


def estimated_cost(seg: RemoteLogSegmentMetadata, full_crc: bool, sample_blocks: int) -> tuple[int, int]:
    """(requests, bytes) one segment's checks will probably take."""
    blocks = max(1, (seg.index_size_in_bytes - INDEX_FIXED_BYTES) // INDEX_BYTES_PER_BLOCK)
    if full_crc:
        return 4, seg.index_size_in_bytes + seg.segment_size_in_bytes
    read = min(blocks, max(2, sample_blocks))
    return 3 + read, seg.index_size_in_bytes + seg.segment_size_in_bytes * read // blocks


def plan_pass(
    items: list[ScrubItem],
    cursor: ScrubCursor,
    *,
    max_bytes: int,
    max_requests: int,
    full_crc: bool,
    sample_blocks: int,
    now_ms: int,
) -> tuple[list[ScrubItem], ScrubCursor]:
    """The segments this pass checks, and the cursor after them."""
    if not items:
        return [], cursor
    start = cursor if cursor.cycle_started_ms is not None else replace(cursor, cycle_started_ms=now_ms)
    todo = [i for i in items if start.after is None or i.order > start.after]
    if not todo:  # the cycle ended with the last pass
        start = replace(start, after=None, cycle=start.cycle + 1, cycle_started_ms=now_ms, checked=0)
        todo = items
    chosen: list[ScrubItem] = []
    used_bytes = used_requests = 0
    for item in todo:
        requests, size = estimated_cost(item.segment, full_crc, sample_blocks)
        if chosen and (used_bytes + size > max_bytes or used_requests + requests > max_requests):
            break
        chosen.append(item)
        used_bytes += size
        used_requests += requests
    after = replace(start, after=chosen[-1].order, checked=start.checked + len(chosen))
    if chosen[-1] is todo[-1]:  # reached the last segment: the cycle is complete
        after = replace(after, last_complete_ms=now_ms)
    return chosen, after


def progress(items: list[ScrubItem], cursor: ScrubCursor) -> float:
    """The share of this cycle's segments checked so far (0..1)."""
    if not items:
        return 1.0
    done = sum(1 for i in items if cursor.after is not None and i.order <= cursor.after)
    return done / len(items)
