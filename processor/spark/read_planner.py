"""Offset ranges to input partitions, for batch and stream reads alike (driver side).

``plan_ranges`` turns ``{partition: (lo, hi)}`` into slices: archived pieces read from segment
blocks (indexes fetched in parallel), holes and the part past the archive read from the live topic
with ``tail=live``, lost offsets reported with Spark's ``failOnDataLoss`` meaning, then split by
``maxRecordsPerPartition`` / ``minPartitions``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from processor.errors import ConfigError, SegmentObjectMissingError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.availability import Availability
from processor.spark.options import RecordOptions
from processor.spark.planning import (
    Coverage,
    LiveSlice,
    Slice,
    cover,
    divvy,
    plan_archived,
    read_indexes,
)
from processor.spark.slice_reader import report_lost_offsets

log = logging.getLogger(__name__)


def _indexes(options: RecordOptions, segments: list[RemoteLogSegmentMetadata]) -> dict[str, SegmentIndex]:
    """Indexes of the segments; a segment whose objects vanished since the metadata was read (a
    delete raced the planning) has no entry."""
    storage = options.connection.shared_storage()
    keys = ObjectKeyFactory(options.connection.s3_prefix)
    decryption = options.connection.decryption()
    try:
        return read_indexes(storage, keys, segments, decryption)
    except SegmentObjectMissingError:
        out: dict[str, SegmentIndex] = {}
        for seg in segments:
            try:
                out.update(read_indexes(storage, keys, [seg], decryption))
            except SegmentObjectMissingError:
                continue
        return out


def plan_ranges(
    options: RecordOptions,
    availability: Availability,
    ranges: Mapping[TopicPartition, tuple[int, int]],
    *,
    min_ts: int | None = None,
    max_ts: int | None = None,
) -> list[Slice]:
    coverages: dict[TopicPartition, Coverage] = {}
    for tp, (lo, hi) in sorted(ranges.items()):
        if lo >= hi:
            continue
        if not options.tail_live and hi > availability.latest(tp):
            raise ConfigError(
                f"offsets up to {hi - 1} of {tp} were asked for; the archive ends at "
                f"{availability.latest(tp) - 1} (set tail=live to read the rest from the topic)"
            )
        coverages[tp] = cover(availability.archived(tp), lo, hi, availability.live_low(tp))
    indexes = _indexes(options, [seg for c in coverages.values() for _lo, _hi, seg in c.archived])
    slices: list[Slice] = []
    for tp, coverage in coverages.items():
        for lo, hi in coverage.lost:
            why = "in neither the archive nor the topic" if options.tail_live else "not in the archive"
            report_lost_offsets(options, tp, lo, hi, why, "not_archived")
        present = []
        for lo, hi, seg in coverage.archived:
            if str(seg.segment_id.id) in indexes:
                present.append((lo, hi, seg))
                continue
            live_low = availability.live_low(tp)
            if live_low is not None and live_low < hi:
                report_lost_offsets(
                    options, tp, lo, live_low, "deleted from the archive and the topic", "deleted"
                )
                slices.append(LiveSlice(tp.topic, tp.partition, max(lo, live_low), hi))
            else:
                report_lost_offsets(
                    options, tp, lo, hi, f"in segment {seg.segment_id}, deleted from the archive", "deleted"
                )
        slices.extend(
            plan_archived(
                tp, present, indexes, partition_bytes=options.partition_bytes, min_ts=min_ts, max_ts=max_ts
            )
        )
        slices.extend(LiveSlice(tp.topic, tp.partition, lo, hi) for lo, hi in coverage.live)
    return divvy(slices, options.min_partitions, options.max_records_per_partition)
