"""The reader of data source ``tiered_records`` (processor/spark_sources/): the archive as Spark's
Kafka source, batch and streaming.

The options and their meaning are Spark's Kafka source's (``processor.spark.options``); the schema
is Spark's (7 columns, ``headers`` with ``includeHeaders=true``). Batch reads resolve the starting
and ending bounds once (``processor.spark.availability``) and plan one input partition per run of
segment blocks (``processor.spark.read_planner``). Filters on ``partition`` and ``offset`` are
applied exactly by the source (planning skips segments and blocks); filters on ``timestamp`` prune
blocks by the index's block times and are re-checked by Spark. Streaming is in
``processor.spark.tiered_stream``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSourceReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from processor.spark.availability import observe, timestamp_lookup
from processor.spark.metadata_view import MaterializedMetadata
from processor.spark.options import RecordOptions
from processor.spark.planning import Slice
from processor.spark.read_planner import plan_ranges
from processor.spark.slice_reader import read_partition

NO_LIMIT = 2**62


def _ts_ms(value: Any, widen_ms: int) -> int | None:
    """A pushed timestamp literal in ms; naive datetimes (session time zone unknown here) are widened
    by a day so pruning stays conservative."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            return int(value.replace(tzinfo=dt.UTC).timestamp() * 1000) + widen_ms * 86_400_000
        return int(value.timestamp() * 1000)
    return None


class TieredRecordsReader(DataSourceReader):
    def __init__(self, options: RecordOptions) -> None:
        self.options = options
        self.partitions_only: set[int] | None = None
        self.offset_lo = 0
        self.offset_hi = NO_LIMIT
        self.ts_lo: int | None = None
        self.ts_hi: int | None = None

    def pushFilters(self, filters: list[Filter]) -> Iterator[Filter]:
        for f in filters:
            column = f.attribute if hasattr(f, "attribute") else ()
            if column == ("partition",) and self._push_partition(f):
                continue
            if column == ("offset",) and self._push_offset(f):
                continue
            if column == ("timestamp",):
                self._push_timestamp(f)  # prunes blocks; Spark still applies the filter exactly
            yield f

    def _push_partition(self, f: Filter) -> bool:
        if isinstance(f, EqualTo) and isinstance(f.value, int):
            chosen = {f.value}
        elif isinstance(f, In) and all(isinstance(v, int) for v in f.value):
            chosen = set(f.value)
        else:
            return False
        self.partitions_only = chosen if self.partitions_only is None else self.partitions_only & chosen
        return True

    def _push_offset(self, f: Filter) -> bool:
        value = getattr(f, "value", None)
        if not isinstance(value, int) or isinstance(value, bool):
            return False
        if isinstance(f, EqualTo):
            self.offset_lo, self.offset_hi = max(self.offset_lo, value), min(self.offset_hi, value + 1)
        elif isinstance(f, GreaterThan):
            self.offset_lo = max(self.offset_lo, value + 1)
        elif isinstance(f, GreaterThanOrEqual):
            self.offset_lo = max(self.offset_lo, value)
        elif isinstance(f, LessThan):
            self.offset_hi = min(self.offset_hi, value)
        elif isinstance(f, LessThanOrEqual):
            self.offset_hi = min(self.offset_hi, value + 1)
        else:
            return False
        return True

    def _push_timestamp(self, f: Filter) -> None:
        value = getattr(f, "value", None)
        if isinstance(f, GreaterThan | GreaterThanOrEqual | EqualTo):
            ms = _ts_ms(value, -1)
            if ms is not None:
                self.ts_lo = ms if self.ts_lo is None else max(self.ts_lo, ms)
        if isinstance(f, LessThan | LessThanOrEqual | EqualTo):
            ms = _ts_ms(value, +1)
            if ms is not None:
                self.ts_hi = ms + 1 if self.ts_hi is None else min(self.ts_hi, ms + 1)

    def plan(self) -> list[Slice]:
        options = self.options
        availability = observe(options, MaterializedMetadata(options.connection, options.metadata_cache_dir))
        lookup = timestamp_lookup(options, availability)
        kept = [
            tp
            for tp in availability.partitions
            if availability.known(tp)
            and (self.partitions_only is None or tp.partition in self.partitions_only)
        ]
        starts = availability.resolve(
            options.starting,
            is_start=True,
            no_match_latest=options.no_match_latest,
            offset_for_timestamp=lookup,
            partitions=kept,
        )
        ends = availability.resolve(
            options.ending, is_start=False, no_match_latest=True, offset_for_timestamp=lookup, partitions=kept
        )
        ranges = {
            tp: (max(starts[tp], self.offset_lo), min(ends[tp], self.offset_hi))
            for tp in kept
            if tp in starts and tp in ends
        }
        return plan_ranges(options, availability, ranges, min_ts=self.ts_lo, max_ts=self.ts_hi)

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(s) for s in self.plan()] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(self.options, partition.value)


__all__ = ["TieredRecordsReader"]
