"""``tiered_records`` against the real archive: byte-exact, ranges, pushdown, streaming, tail=live."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.spark.conftest import PARTITIONS, TOPIC, as_tuple, collect_offsets, consume_all, spark_options

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def read(spark: Any, archive: Any, **extra: str) -> Any:
    return spark.read.format("tiered_records").options(**spark_options(archive, **extra)).load()


def test_batch_returns_every_archived_record_byte_exact(spark, archive) -> None:
    ends = archive.archive_ends()
    plain = consume_all(archive.info.bootstrap_servers)
    rows = read(spark, archive, includeHeaders="true").collect()
    assert collect_offsets(rows) == [(p, o) for p in range(PARTITIONS) for o in range(ends[p])]
    assert all(r["topic"] == TOPIC for r in rows)
    for r in rows:
        assert as_tuple(r) == plain[(r["partition"], r["offset"])], (r["partition"], r["offset"])
    shapes = [as_tuple(r) for r in rows]
    assert any(s[0] is None for s in shapes) and any(s[0] == b"" for s in shapes)
    assert any(s[1] is None for s in shapes) and any(s[1] == b"" for s in shapes)
    assert any(len(s[1] or b"") == 300 * 1024 for s in shapes)
    assert any(
        [n for n, _ in s[2]].count("dup") == 2 and ("null", None) in s[2] and ("empty", b"") in s[2]
        for s in shapes
    )
    assert any(s[2] == [] for s in shapes)
    assert all(r["headers"] is None for r in rows if not as_tuple(r)[2])  # no headers: null, as Spark


def test_offset_and_timestamp_ranges(spark, archive) -> None:
    ends = archive.archive_ends()
    rows = read(
        spark,
        archive,
        startingOffsets='{"spark-records":{"0":10,"1":20}}',
        endingOffsets='{"spark-records":{"0":15,"1":-1}}',
    ).collect()
    assert collect_offsets(rows) == [(0, o) for o in range(10, 15)] + [(1, o) for o in range(20, ends[1])]
    # record i has timestamp BASE + 10 i and is offset i // 2 of partition i % 2
    base = 1_700_000_000_000
    rows = read(
        spark, archive, startingTimestamp=str(base + 1005), endingTimestamp=str(base + 2000)
    ).collect()
    assert collect_offsets(rows) == [(0, o) for o in range(51, 100)] + [(1, o) for o in range(50, 100)]


def test_pushed_filters_read_fewer_blocks(spark, archive) -> None:
    import datetime as dt

    from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, LessThan

    from processor.spark.arrow_records import BLOCKS_READ
    from processor.spark.tiered_records import TieredRecordsReader
    from processor.spark_sources.entry import record_options

    options = record_options(spark_options(archive))

    def blocks_read(filters: list[Any]) -> tuple[int, list[int], list[Any]]:
        reader = TieredRecordsReader(options)
        left = list(reader.pushFilters(filters))
        before = BLOCKS_READ.blocks
        offsets = [
            o for p in reader.partitions() for b in reader.read(p) for o in b.column("offset").to_pylist()
        ]
        return BLOCKS_READ.blocks - before, offsets, left

    all_blocks, _, _ = blocks_read([])
    by_offset = [EqualTo(("partition",), 1), GreaterThanOrEqual(("offset",), 100), LessThan(("offset",), 120)]
    some_blocks, offsets, left = blocks_read(by_offset)
    assert left == [] and offsets == list(range(100, 120))
    assert 0 < some_blocks < all_blocks / 4, (some_blocks, all_blocks)
    late = dt.datetime.fromtimestamp((1_700_000_000_000 + 5000) / 1000, tz=dt.UTC)
    by_time = [GreaterThanOrEqual(("timestamp",), late)]
    time_blocks, _, left = blocks_read(by_time)
    assert left == by_time  # Spark re-checks timestamps; the source only prunes blocks with them
    assert 0 < time_blocks < all_blocks * 0.8, (time_blocks, all_blocks)
    # and through Spark: the same rows
    df = read(spark, archive).where("partition = 1 and offset >= 100 and offset < 120")
    assert collect_offsets(df.collect()) == [(1, o) for o in range(100, 120)]


def _wait(predicate: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.5)


def _contiguous(offsets: list[tuple[int, int]], ends: dict[int, int]) -> bool:
    return offsets == [(p, o) for p in range(PARTITIONS) for o in range(ends[p])]


def test_stream_picks_up_a_segment_finished_after_it_started(spark, archive, tmp_path) -> None:
    ends = archive.archive_ends()
    query = (
        spark.readStream.format("tiered_records")
        .options(**spark_options(archive, startingOffsets="earliest"))
        .load()
        .writeStream.format("memory")
        .queryName("tiered_stream")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:

        def count() -> int:
            return int(spark.sql("select count(*) c from tiered_stream").collect()[0]["c"])

        _wait(lambda: count() >= sum(ends.values()))
        archive.produce(240, value_bytes=1000)  # > 64 KiB more per partition: a new finished segment each
        grown = archive.wait_archived({p: ends[p] + 1 for p in ends})
        _wait(lambda: count() >= sum(grown.values()))
        rows = spark.sql("select partition, offset from tiered_stream").collect()
        final = archive.archive_ends()
        got = collect_offsets(rows)
        assert len(got) == len(set(got))
        assert _contiguous(got, {p: max(o for q, o in got if q == p) + 1 for p in range(PARTITIONS)})
        assert all(max(o for q, o in got if q == p) + 1 >= grown[p] for p in range(PARTITIONS))
        assert all(grown[p] <= final[p] for p in range(PARTITIONS))
    finally:
        query.stop()


def _run_available_now(spark, archive, out, cp, **extra) -> list[int]:
    query = (
        spark.readStream.format("tiered_records")
        .options(**spark_options(archive, startingOffsets="earliest", **extra))
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(cp))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]


def test_restart_from_checkpoint_neither_repeats_nor_skips(spark, archive, tmp_path) -> None:
    out, cp = tmp_path / "out", tmp_path / "cp"
    first = _run_available_now(spark, archive, out, cp, maxOffsetsPerTrigger="150")
    assert len(first) >= 2 and max(first) <= 150  # admission control split the backlog
    ends = archive.archive_ends()
    archive.produce(240, value_bytes=1000)
    grown = archive.wait_archived({p: ends[p] + 1 for p in ends})
    second = _run_available_now(spark, archive, out, cp, maxOffsetsPerTrigger="150")
    assert sum(second) > 0
    got = collect_offsets(spark.read.parquet(str(out)).select("partition", "offset").collect())
    assert len(got) == len(set(got))
    tops = {p: max(o for q, o in got if q == p) + 1 for p in range(PARTITIONS)}
    assert _contiguous(got, tops) and all(tops[p] >= grown[p] for p in range(PARTITIONS))


def test_tail_live_crosses_the_archive_boundary_without_gap_or_duplicate(spark, archive, tmp_path) -> None:
    out, cp = tmp_path / "out", tmp_path / "cp"
    for _ in range(5):  # the open segments (rolled by size only) hold a tail not in the archive
        archive.produce(4, value_bytes=100)
        time.sleep(1.0)
        ends = archive.archive_ends()
        plain = consume_all(archive.info.bootstrap_servers)
        highs = {p: max(o for q, o in plain if q == p) + 1 for p in range(PARTITIONS)}
        if all(highs[p] > ends[p] for p in range(PARTITIONS)):
            break
    assert all(highs[p] > ends[p] for p in range(PARTITIONS)), (highs, ends)
    _run_available_now(spark, archive, out, cp, tail="live", includeHeaders="true")
    rows = spark.read.parquet(str(out)).collect()
    got = collect_offsets(rows)
    assert _contiguous(got, highs), (
        highs,
        ends,
        len(got),
        len(set(got)),
        sorted(set((p, o) for p in range(PARTITIONS) for o in range(highs[p])) ^ set(got))[:20],
    )
    assert all(as_tuple(r) == plain[(r["partition"], r["offset"])] for r in rows)
    archive.produce(10)
    _run_available_now(spark, archive, out, cp, tail="live", includeHeaders="true")
    plain = consume_all(archive.info.bootstrap_servers)
    rows = spark.read.parquet(str(out)).collect()
    assert _contiguous(collect_offsets(rows), {p: highs[p] + 5 for p in range(PARTITIONS)})
    assert all(as_tuple(r) == plain[(r["partition"], r["offset"])] for r in rows)
