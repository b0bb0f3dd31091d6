"""Fetched batches into each led partition's open segment, within the offload buffer's bound.

Batches are taken whole or not at all: one that does not fit in the buffer stays in Kafka (the
returned position points at it) and fetching pauses (``pause``). A segment that reaches its size is
sealed at once (``seal``, by the engine, which hands it to the copy scheduler).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from processor import metrics
from processor.leader.batch_source import Fetched
from processor.leader.led_partition import LedPartition
from processor.leader.offload_buffer import OffloadBuffer
from processor.leader.roll_policy import RollReason
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.segment_assembler import SegmentAssembler

log = logging.getLogger(__name__)

Seal = Callable[[LedPartition, RollReason], None]


class Assembly:
    def __init__(
        self,
        buffer: OffloadBuffer,
        block_bytes: int,
        segment_bytes: int,
        archive_compression: str,
        seal: Seal,
        pause: Callable[[], None],
    ) -> None:
        self.buffer = buffer
        self.block_bytes = block_bytes
        self.segment_bytes = segment_bytes
        self.archive_compression = archive_compression
        self._seal = seal
        self._pause = pause

    def take(self, st: LedPartition, fetched: Fetched) -> int:
        """Add one partition's fetched batches to its open segment; return where fetching goes on."""
        position = fetched.fetch_offset
        buffer = self.buffer
        taken = 0
        for header, batch, keep in fetched.batches:
            last = header.last_offset
            if last <= st.last_taken:
                position = last + 1
                continue
            if keep:
                need = len(batch) + BLOCK_HEADER_LEN + 12
                if buffer.used + need > buffer.bound and buffer.used > 0:
                    self._pause()
                    break
                asm = st.assembler
                if asm is None:
                    start = st.next_start if st.next_start is not None else header.base_offset
                    asm = st.assembler = SegmentAssembler(
                        st.tp.partition, start, self.block_bytes, self.archive_compression
                    )
                    st.opened_at_ms = time.monotonic() * 1000
                buffer.add(asm.append(header, batch))
                taken += header.record_count
            elif st.assembler is not None:
                st.assembler.cover(last)
            elif st.next_start is None:
                st.next_start = header.base_offset  # coverage starts at the first offset seen
            st.last_taken = last
            position = last + 1
            if st.assembler is not None and st.assembler.size_bytes >= self.segment_bytes:
                self._seal(st, RollReason.SIZE)
        if fetched.high_watermark >= 0:
            st.high_watermark = fetched.high_watermark
            st.high_watermark_at = time.monotonic()
        metrics.RECORDS_TAKEN.inc(taken)
        metrics.BUFFER_BYTES.set(buffer.used)
        return position

    def lost(self, st: LedPartition, first: int, last: int) -> None:
        """The broker's retention deleted ``first..last`` before they were offloaded: say so, seal
        what is open and go on after them."""
        count = last - first + 1
        log.error(
            "%s: offsets %d..%d (%d records) were deleted by the broker's retention before they were "
            "offloaded: they are lost; offloading continues at %d",
            st.tp,
            first,
            last,
            count,
            last + 1,
        )
        metrics.OFFSETS_LOST.labels(st.tp.topic, str(st.tp.partition)).inc(count)
        self._seal(st, RollReason.REQUESTED)
        st.next_start = last + 1
        st.last_taken = max(st.last_taken, last)
