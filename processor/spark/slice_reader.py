"""Executor side of ``tiered_records``: one planned slice as Arrow batches, with Spark's
``failOnDataLoss`` meaning for what disappeared since planning.

- A segment deleted between planning and reading (retention, delete-before), before a slice's first
  ranged GET or between two of them: with ``tail=live`` the rest of the slice (from the first
  offset not returned yet) is read from the topic if it still holds it; otherwise it is lost.
- A live slice whose start retention removed from the topic meanwhile: the part still there is read.
- Lost offsets fail the task with ``DataLossError`` when ``failOnDataLoss`` is true (the default);
  when false they are skipped with a warning and counted (``DATA_LOSS``).
Corrupt bytes are never data loss: a CRC mismatch or a truncated object fails the read.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from processor import metrics
from processor.errors import SegmentObjectMissingError
from processor.kafka.partition import TopicPartition
from processor.spark.arrow_records import read_slice_as_arrow
from processor.spark.live_tail import OffsetsGoneError, live_low, read_live_slice
from processor.spark.options import RecordOptions
from processor.spark.planning import (
    FAIL_ON_DATA_LOSS_HINT,
    DataLossError,
    LiveSlice,
    SegmentSlice,
    describe_lost,
)

log = logging.getLogger(__name__)


class DataLossCounter:
    """Data losses skipped by this process (failOnDataLoss=false), by reason: how many times, and
    how many offsets where that is known."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.events: dict[str, int] = {}
        self.offsets: dict[str, int] = {}

    def add(self, reason: str, offsets: int) -> None:
        with self._lock:
            self.events[reason] = self.events.get(reason, 0) + 1
            self.offsets[reason] = self.offsets.get(reason, 0) + offsets


DATA_LOSS = DataLossCounter()


def report_data_loss(options: RecordOptions, message: str, reason: str, offsets: int = 0) -> None:
    """Spark's reportDataLoss: fail when failOnDataLoss is true, else warn and count."""
    if options.fail_on_data_loss:
        raise DataLossError(f"{message}. {FAIL_ON_DATA_LOSS_HINT}")
    log.warning("%s (failOnDataLoss=false: skipped)", message)
    DATA_LOSS.add(reason, offsets)
    metrics.SPARK_DATA_LOSS.labels(reason).inc()
    metrics.SPARK_DATA_LOSS_OFFSETS.labels(reason).inc(offsets)


def report_lost_offsets(
    options: RecordOptions, tp: TopicPartition, lo: int, hi: int, why: str, reason: str
) -> None:
    if lo < hi:
        report_data_loss(options, describe_lost(tp, lo, hi, why), reason, hi - lo)


def _live_low(options: RecordOptions, tp: TopicPartition) -> int:
    return live_low(options.connection, options.group_id, tp)


def read_live(options: RecordOptions, tp: TopicPartition, lo: int, hi: int) -> Iterator[pa.RecordBatch]:
    """``[lo, hi)`` of the live topic; what retention removed is reported as data loss."""
    start = lo
    while start < hi:
        low = _live_low(options, tp)
        if start < low:
            report_lost_offsets(options, tp, start, min(low, hi), "no longer on the topic", "live_retention")
            start = low
        try:
            yield from read_live_slice(
                options.connection,
                tp.topic,
                tp.partition,
                start,
                hi,
                group_id=options.group_id,
                include_headers=options.include_headers,
                stall_timeout_s=options.poll_timeout_ms / 1000,
            )
            return
        except OffsetsGoneError as gone:  # retention moved the start while reading: report, go on
            start = max(start, gone.offset)


def read_partition(options: RecordOptions, value: Any) -> Iterator[pa.RecordBatch]:
    """One slice of the archive, or of the live topic, as Arrow batches."""
    if isinstance(value, LiveSlice):
        yield from read_live(options, value.tp, value.from_offset, value.until_offset)
        return
    if not isinstance(value, SegmentSlice):
        return  # the empty placeholder partition
    resume = value.from_offset  # past the last row returned: nothing below it is read again
    try:
        for batch in read_slice_as_arrow(
            options.connection.shared_storage(),
            topic=value.topic,
            partition=value.partition,
            data_object_key=value.data_object_key,
            segment_name=value.segment_name,
            blocks=value.blocks,
            first_block=value.first_block,
            from_offset=value.from_offset,
            until_offset=value.until_offset,
            min_timestamp=value.min_timestamp,
            max_timestamp=value.max_timestamp,
            include_headers=options.include_headers,
            cipher=options.connection.decryption().cipher_for(value.segment_id, value.custom_metadata)
            if value.segment_id is not None
            else None,
        ):
            if batch.num_rows:
                resume = max(resume, int(pc.max(batch.column("offset")).as_py()) + 1)
            yield batch
    except SegmentObjectMissingError:
        # Deleted since planning (retention), before the slice's first ranged GET or between two.
        if options.tail_live:
            low = _live_low(options, value.tp)
            if low < value.until_offset:
                why = "deleted from the archive and the topic"
                report_lost_offsets(options, value.tp, resume, low, why, "deleted")
                yield from read_live(options, value.tp, max(low, resume), value.until_offset)
                return
        report_lost_offsets(
            options,
            value.tp,
            resume,
            value.until_offset,
            f"in segment {value.segment_name}, deleted from the archive after the query was planned",
            "deleted",
        )
