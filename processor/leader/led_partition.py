"""The offload engine's state of one partition it leads, and the status it reports of it."""

from __future__ import annotations

from dataclasses import dataclass

from processor.kafka.partition import TopicPartition
from processor.segment.segment_assembler import SegmentAssembler


@dataclass(eq=False)
class LedPartition:
    tp: TopicPartition
    next_start: int | None  # where the next segment's coverage starts; None: at the first batch
    last_taken: int  # highest offset in a segment (open or sealed) or covered by one
    assembler: SegmentAssembler | None = None
    opened_at_ms: float = 0.0
    lag: int | None = None
    remote_end: int | None = None
    high_watermark: int | None = None  # the source's, from the last fetch response; None: unknown
    high_watermark_at: float = 0.0  # time.monotonic() of that fetch response


@dataclass(frozen=True, slots=True)
class PartitionStatus:
    remote_end: int | None
    open_bytes: int
    pending_segments: int
    copying: bool
    lag: int | None  # source high watermark - (remote_end + 1); None: no recent high watermark
