"""Data source ``tiered_records``: the archive as Spark's Kafka source, batch and streaming.

Batch: ``startingOffsets`` (default earliest) to ``endingOffsets`` (default latest, exclusive), or by
timestamp; filters on ``partition`` and ``offset`` are applied exactly by the source (planning skips
segments and blocks), filters on ``timestamp`` prune blocks by the index's block times and are
re-checked by Spark.

Streaming: offsets are ``{topic: {partition: next_offset}}`` with sorted keys; the latest offset of
a partition is its highest COPY_SEGMENT_FINISHED end + 1 (with ``tail=live``: the topic's high
watermark, the part past the archive read from Kafka in the executors). ``maxOffsetsPerTrigger``
caps a micro-batch through admission control (``latestOffset(start, limit)``, pyspark >= 4.2);
where the engine calls the old ``latestOffset()`` the cap is applied from the option itself.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    LessThan,
    LessThanOrEqual,
)

from processor.metadata.model import TopicPartition
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.arrow_records import SCHEMA_DDL, read_slice_as_arrow
from processor.spark.live_tail import live_ends, read_live_slice
from processor.spark.options import RecordOptions, record_options
from processor.spark.planning import (
    Catalog,
    LiveSlice,
    SegmentSlice,
    archive_bounds,
    load_catalog,
    offset_for_timestamp,
    plan_partition,
    read_indexes,
    resolve_offsets,
)

try:  # pyspark >= 4.2: admission control
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover - pyspark 4.1: no admission control, no AvailableNow mixin
    ReadLimit = object  # type: ignore[misc,assignment]
    ReadAllAvailable = ReadMaxRows = None  # type: ignore[misc,assignment]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


Offsets = dict[TopicPartition, int]
NO_LIMIT = 2**62


def encode_offsets(offsets: Mapping[TopicPartition, int]) -> dict[str, Any]:
    """``{topic: {partition: next_offset}}``, topics and partitions in sorted (string) key order."""
    out: dict[str, dict[str, int]] = {}
    for tp in sorted(offsets, key=lambda t: (t.topic, str(t.partition))):
        out.setdefault(tp.topic, {})[str(tp.partition)] = int(offsets[tp])
    return {t: dict(sorted(ps.items())) for t, ps in sorted(out.items())}


def decode_offsets(doc: Mapping[str, Any] | None) -> Offsets:
    if not doc:
        return {}
    return {TopicPartition(t, int(p)): int(o) for t, ps in doc.items() for p, o in ps.items()}


def cap_offsets(start: Offsets, latest: Offsets, max_rows: int) -> Offsets:
    """Spread ``max_rows`` over the partitions in proportion to what each has waiting (as Spark's
    Kafka source does), each partition moving forward by at least one record while it has any."""
    lag = {tp: max(0, end - start.get(tp, end)) for tp, end in latest.items()}
    total = sum(lag.values())
    if total <= max_rows:
        return dict(latest)
    out: Offsets = {}
    for tp, end in latest.items():
        begin = start.get(tp, end)
        share = (lag[tp] * max_rows) // total if total else 0
        out[tp] = min(end, begin + max(share, 1 if lag[tp] else 0))
    return out


class _Planner:
    """What batch and stream readers share: the catalog, offset resolution, and slice planning."""

    def __init__(self, options: RecordOptions) -> None:
        self.options = options
        self.keys = ObjectKeyFactory(options.connection.s3_prefix)

    def catalog(self) -> Catalog:
        return load_catalog(self.options.connection, self.options)

    def timestamp_offsets(self, catalog: Catalog, timestamp: int, fallback: Offsets) -> Offsets:
        # The process's shared client (as the executors use): planning runs for every query, and a
        # new boto3 client costs 0.1-0.3 s.
        storage = self.options.connection.shared_storage()
        out: Offsets = {}
        for tp, segments in catalog.items():
            found = offset_for_timestamp(storage, self.keys, segments, timestamp)
            out[tp] = fallback[tp] if found is None else found
        return out

    def plan(
        self,
        catalog: Catalog,
        ranges: Mapping[TopicPartition, tuple[int, int]],
        min_ts: int | None = None,
        max_ts: int | None = None,
    ) -> list[SegmentSlice]:
        wanted = {
            tp: [s for s in catalog.get(tp, []) if s.end_offset >= lo and s.start_offset < hi]
            for tp, (lo, hi) in ranges.items()
            if lo < hi
        }
        storage = self.options.connection.shared_storage()
        indexes = read_indexes(storage, self.keys, (s for segs in wanted.values() for s in segs))
        slices: list[SegmentSlice] = []
        for tp, segments in wanted.items():
            lo, hi = ranges[tp]
            slices.extend(
                plan_partition(
                    tp,
                    segments,
                    indexes,
                    lo,
                    hi,
                    min_ts=min_ts,
                    max_ts=max_ts,
                    partition_bytes=self.options.partition_bytes,
                    fail_on_data_loss=self.options.fail_on_data_loss,
                )
            )
        return slices


def read_partition(options: RecordOptions, value: Any) -> Iterator[pa.RecordBatch]:
    """Executor side: one slice of the archive, or of the live topic, as Arrow batches."""
    if isinstance(value, LiveSlice):
        yield from read_live_slice(options.connection.kafka, value, options.fail_on_data_loss)
        return
    if not isinstance(value, SegmentSlice):
        return  # the empty placeholder partition
    yield from read_slice_as_arrow(
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
    )


def _ts_ms(value: Any, widen_ms: int) -> int | None:
    """A pushed timestamp literal in ms; naive datetimes (session time zone unknown here) are widened
    by a day so pruning stays conservative."""
    import datetime as dt

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

    def plan(self) -> list[SegmentSlice]:
        planner = _Planner(self.options)
        catalog = planner.catalog()
        if self.partitions_only is not None:
            catalog = {tp: s for tp, s in catalog.items() if tp.partition in self.partitions_only}
        starts = resolve_offsets(self.options.starting or "earliest", catalog, "earliest")
        ends = resolve_offsets(self.options.ending, catalog, "latest")
        if self.options.starting_timestamp is not None:
            latest = resolve_offsets("latest", catalog, "latest")
            starts = planner.timestamp_offsets(catalog, self.options.starting_timestamp, latest)
        if self.options.ending_timestamp is not None:
            latest = resolve_offsets("latest", catalog, "latest")
            ends = planner.timestamp_offsets(catalog, self.options.ending_timestamp, latest)
        ranges = {
            tp: (max(starts[tp], self.offset_lo), min(ends[tp], self.offset_hi))
            for tp in catalog
            if tp in starts and tp in ends
        }
        return planner.plan(catalog, ranges, self.ts_lo, self.ts_hi)

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(s) for s in self.plan()] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(self.options, partition.value)


class TieredRecordsStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: RecordOptions) -> None:
        self.options = options
        self.planner = _Planner(options)
        self._catalog: Catalog | None = None
        self._live: dict[TopicPartition, tuple[int, int]] = {}
        self._target: Offsets | None = None  # Trigger.AvailableNow: never read past this
        self._last_end: Offsets | None = None

    def _refresh(self) -> Catalog:
        self._catalog = self.planner.catalog()
        if self.options.tail_live:
            self._live = {
                tp: bounds
                for tp, bounds in live_ends(
                    self.options.connection.kafka, list(self.options.wanted_topics)
                ).items()
                if self.options.wants(tp.topic, tp.partition)
            }
        return self._catalog

    def _earliest(self, tp: TopicPartition) -> int:
        segments = (self._catalog or {}).get(tp)
        if segments:
            return archive_bounds(segments)[0]
        return self._live.get(tp, (0, 0))[0]

    def _latest(self) -> Offsets:
        catalog = self._catalog or {}
        latest = {tp: archive_bounds(segs)[1] for tp, segs in catalog.items()}
        for tp, (_low, high) in self._live.items():
            latest[tp] = max(latest.get(tp, 0), high)
        return latest

    def initialOffset(self) -> dict[str, Any]:
        catalog = self._refresh()
        live_high = {tp: high for tp, (_low, high) in self._live.items()}
        spec = self.options.starting or "latest"
        if self.options.starting_timestamp is not None:
            latest = resolve_offsets("latest", catalog, "latest", live_high)
            offsets = self.planner.timestamp_offsets(catalog, self.options.starting_timestamp, latest)
        else:
            offsets = resolve_offsets(spec, catalog, "latest", live_high)
        for tp, (low, high) in self._live.items():  # partitions with nothing archived yet
            if tp not in offsets:
                offsets[tp] = low if spec == "earliest" else high
        self._last_end = offsets
        return encode_offsets(offsets)

    def getDefaultReadLimit(self) -> Any:
        if self.options.max_offsets_per_trigger is not None and ReadMaxRows is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._refresh()
        self._target = self._latest()

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        begin = decode_offsets(start) if start is not None else dict(self._last_end or {})
        self._refresh()
        latest = {tp: max(end, begin.get(tp, 0)) for tp, end in self._latest().items()}
        for tp, offset in begin.items():
            latest.setdefault(tp, offset)
        if self._target is not None:
            latest = {
                tp: max(begin.get(tp, 0), min(end, self._target.get(tp, end))) for tp, end in latest.items()
            }
        max_rows: int | None = None
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            max_rows = limit.max_rows
        elif limit is None and start is None:  # old engine (pyspark < 4.2): apply the option here
            max_rows = self.options.max_offsets_per_trigger
        full_begin = {tp: begin.get(tp, self._earliest(tp)) for tp in latest}
        if max_rows is not None:
            latest = cap_offsets(full_begin, latest, max_rows)
        self._last_end = latest
        return encode_offsets(latest)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return encode_offsets(self._latest()) if self._catalog is not None else None

    def plan(self, start: Offsets, end: Offsets) -> list[SegmentSlice | LiveSlice]:
        catalog = self._catalog
        archive_end = {tp: archive_bounds(s)[1] for tp, s in (catalog or {}).items()}
        if catalog is None or (
            not self.options.tail_live and any(end[tp] > archive_end.get(tp, 0) for tp in end)
        ):
            catalog = self._refresh()
            archive_end = {tp: archive_bounds(s)[1] for tp, s in catalog.items()}
        archived: dict[TopicPartition, tuple[int, int]] = {}
        live: list[LiveSlice | SegmentSlice] = []
        for tp, e in end.items():
            s = start.get(tp, self._earliest(tp))
            if e <= s:
                continue
            a_end = archive_end.get(tp, s) if self.options.tail_live else e
            if s < min(e, a_end):
                archived[tp] = (s, min(e, a_end))
            if self.options.tail_live and max(s, a_end) < e:
                live.append(LiveSlice(tp.topic, tp.partition, max(s, a_end), e))
        return [*self.planner.plan(catalog, archived), *live]

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return [InputPartition(s) for s in self.plan(decode_offsets(start), decode_offsets(end))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_partition(self.options, partition.value)

    def commit(self, end: dict[str, Any]) -> None:
        """Nothing to release: the archive is immutable and the source keeps no consumer open."""


class TieredRecordsDataSource(DataSource):
    """``spark.read.format("tiered_records")`` / ``spark.readStream.format("tiered_records")``."""

    @classmethod
    def name(cls) -> str:
        return "tiered_records"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return TieredRecordsReader(record_options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return TieredRecordsStreamReader(record_options(self.options))


__all__ = ["TieredRecordsDataSource", "cap_offsets", "decode_offsets", "encode_offsets"]
