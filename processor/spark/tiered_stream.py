"""``spark.readStream.format("tiered_records")``: the archive (and with ``tail=live`` the topic) as a
stream with Spark's Kafka source semantics.

- Offsets: ``processor.spark.stream_offsets`` (``{topic: {partition: next offset}}`` plus the topic
  ids they belong to and, in a new query's first batch, the initial offsets).
- Initial offsets are resolved once per query and kept: in this process, and in the checkpoint
  inside the first batch's end offsets; the first batch always reads from those, so a query that
  crashes before its first batch commits re-runs it from where it first started, not from a new
  ``latest`` (what Spark's Kafka source achieves with its initial offset writer).
- Admission control (pyspark >= 4.2): ``maxOffsetsPerTrigger`` caps a batch (spread over partitions
  as Spark does), ``minOffsetsPerTrigger`` holds one back until that many offsets wait or
  ``maxTriggerDelay`` passed; ``ReadAllAvailable`` from the engine overrides both, as in Spark.
  ``Trigger.AvailableNow`` reads up to what was there when the query started, then stops (the
  minimum is not waited for past that point: nothing more would come).
- ``failOnDataLoss``: a topic deleted and re-created (its topic id changed), partitions that are
  gone, offsets no longer in the archive or on the topic: the query fails (true) or goes on with
  a warning and a count (false); a re-created topic is then read from its beginning.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)

from processor.kafka.partition import TopicPartition
from processor.spark.availability import Availability, observe, timestamp_lookup
from processor.spark.metadata_view import MaterializedMetadata
from processor.spark.options import RecordOptions
from processor.spark.read_planner import plan_ranges
from processor.spark.slice_reader import read_partition, report_data_loss
from processor.spark.stream_offsets import Offsets, StreamOffsets, delay_batch, rate_limit

log = logging.getLogger(__name__)


class TieredRecordsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: RecordOptions) -> None:
        self.options = options
        self.metadata = MaterializedMetadata(options.connection, options.metadata_cache_dir)
        self._availability: Availability | None = None
        self._initial: StreamOffsets | None = None
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past this
        self._last_trigger_ms = 0

    # -- what is there ------------------------------------------------------------------------------

    def _observe(self) -> Availability:
        self._availability = observe(self.options, self.metadata)
        return self._availability

    def _latest(self, availability: Availability) -> Offsets:
        return {tp: availability.latest(tp) for tp in availability.partitions if availability.known(tp)}

    def _remember(self, offsets: StreamOffsets) -> None:
        """Initial offsets found in offsets Spark hands back (a restarted query's first batch)."""
        if self._initial is None and offsets.initial is not None:
            self._initial = StreamOffsets(offsets.initial, offsets.topic_ids, offsets.initial)

    def _recreated(self, begin: StreamOffsets, availability: Availability, topic: str) -> bool:
        before, now = begin.topic_ids.get(topic), availability.topic_ids.get(topic)
        return before is not None and now is not None and before != now

    def _begin(self, begin: StreamOffsets, availability: Availability, tp: TopicPartition) -> int:
        """Where a partition goes on from: its offset, or (new partition, re-created topic) its earliest."""
        if tp in begin.offsets and not self._recreated(begin, availability, tp.topic):
            return begin.offsets[tp]
        return availability.earliest(tp)

    # -- the DataSourceStreamReader API --------------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            options = self.options
            availability = self._observe()
            chosen = [tp for tp in availability.partitions if availability.known(tp)]
            named = options.starting.named_partitions()
            if named is not None:
                chosen = sorted(set(chosen) | named)
            offsets = availability.resolve(
                options.starting,
                is_start=True,
                no_match_latest=options.no_match_latest,
                offset_for_timestamp=timestamp_lookup(options, availability),
                partitions=chosen,
            )
            self._initial = StreamOffsets(offsets, dict(availability.topic_ids), offsets)
            log.info("tiered_records: initial offsets %s", self._initial.to_json())
        return self._initial.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest(self._observe())

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        begin = StreamOffsets.from_json(start)
        self._remember(begin)
        availability = self._observe()
        latest = self._latest(availability)
        for tp, offset in begin.offsets.items():
            if tp not in latest and not self._recreated(begin, availability, tp.topic):
                latest[tp] = offset  # not known now (nothing archived yet, or gone): no progress
        from_ = {tp: self._begin(begin, availability, tp) for tp in latest}
        # The same topic incarnation never goes backwards (the archive shrinking is not new data).
        latest = {tp: max(end, from_[tp]) for tp, end in latest.items()}
        if self._target is not None:
            latest = {tp: max(from_[tp], min(end, self._target.get(tp, end))) for tp, end in latest.items()}
        end = self._admit(from_, latest, limit)
        if end == begin.offsets and availability.topic_ids == begin.topic_ids:
            return start  # nothing new: the very same offsets (Spark compares them as JSON)
        carry_initial = begin.initial is not None and begin.offsets == begin.initial
        return StreamOffsets(
            end, dict(availability.topic_ids), begin.initial if carry_initial else None
        ).to_json()

    def _admit(self, from_: Offsets, latest: Offsets, limit: ReadLimit) -> Offsets:
        """Spark's admission control over ``[from_, latest]``."""
        if isinstance(limit, ReadAllAvailable):
            return latest
        min_rows = self.options.min_offsets_per_trigger
        max_rows = self.options.max_offsets_per_trigger
        if isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif isinstance(limit, ReadMinRows):
            min_rows = limit.min_rows
        if min_rows is not None and self._target is None:
            hold, self._last_trigger_ms = delay_batch(
                min_rows,
                latest,
                from_,
                int(time.time() * 1000),
                self._last_trigger_ms,
                self.options.max_trigger_delay_ms,
            )
            if hold:
                return dict(from_)
        if max_rows is not None:
            return rate_limit(max_rows, from_, latest)
        return latest

    def reportLatestOffset(self) -> dict[str, Any] | None:
        if self._availability is None:
            return None
        latest = self._latest(self._availability)
        return StreamOffsets(latest).to_json() if latest else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = StreamOffsets.from_json(start), StreamOffsets.from_json(end)
        self._remember(begin)
        self._remember(until)
        if start == end:
            return []
        if until.initial is not None:
            # The query's first batch: it starts at the initial offsets persisted in its end offsets
            # (in the checkpoint), whatever ``start`` a restarted query resolved anew.
            begin = StreamOffsets(until.initial, until.topic_ids, until.initial)
        availability = self._availability
        if availability is None or any(
            hi > availability.latest(tp) for tp, hi in until.offsets.items() if availability.known(tp)
        ):
            availability = self._observe()
        options = self.options
        ranges: dict[TopicPartition, tuple[int, int]] = {}
        for tp, hi in until.offsets.items():
            if tp in begin.offsets and self._recreated(begin, availability, tp.topic):
                report_data_loss(
                    options,
                    f"topic {tp.topic} was deleted and re-created (topic id {begin.topic_ids[tp.topic]} -> "
                    f"{availability.topic_ids[tp.topic]}): {tp} of the old topic was not read from offset "
                    f"{begin.offsets[tp]} on; the new topic is read from its beginning",
                    "topic_recreated",
                )
            lo = self._begin(begin, availability, tp)
            if tp not in begin.offsets and options.tail_live and lo != 0:
                report_data_loss(
                    options, f"Added partition {tp} starts from {lo} instead of 0", "added_partition", lo
                )
            if hi < lo:
                report_data_loss(
                    options,
                    f"Partition {tp}'s offset was changed from {lo} to {hi}",
                    "offset_changed",
                    lo - hi,
                )
                continue
            ranges[tp] = (lo, hi)
        for tp in sorted(set(begin.offsets) - set(until.offsets) - set(availability.partitions)):
            report_data_loss(options, f"{tp} is gone: it no longer exists", "partition_gone")
        return [InputPartition(s) for s in plan_ranges(options, availability, ranges)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(self.options, partition.value)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the archive is immutable and pooled consumers hold no positions."""
