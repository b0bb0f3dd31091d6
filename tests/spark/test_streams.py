"""Streams that never skip and never repeat: a new query's initial offsets survive a crash before its
first batch commits; a crash in batch 0 and one mid-stream both end with every record exactly once;
admission control (maxOffsetsPerTrigger, minOffsetsPerTrigger / maxTriggerDelay) with Spark's
arithmetic."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMinRows

from processor.devstack.stack import StackInfo
from processor.kafka.clients import new_producer
from processor.spark.tiered_stream import TieredRecordsStreamReader
from processor.spark_sources.entry import record_options
from tests.spark.kafka_reference import KafkaReference
from tests.spark.planted import PlantedArchive, plant

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.fixture
def topic(local_stack: StackInfo, request: pytest.FixtureRequest) -> Iterator[PlantedArchive]:
    name = "spark-" + request.node.name.split("[")[0].removeprefix("test_")[:40].replace("_", "-")
    arch = plant(local_stack, name, partitions=2)
    yield arch
    arch.close()


def reader(arch: PlantedArchive, **extra: str) -> TieredRecordsStreamReader:
    return TieredRecordsStreamReader(record_options({**arch.options, "tail": "live", **extra}, mode="stream"))


def read(r: TieredRecordsStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[tuple[int, int]]:
    return sorted(
        (p, o)
        for part in r.partitions(start, end)
        for b in r.read(part)
        for p, o in zip(b.column("partition").to_pylist(), b.column("offset").to_pylist(), strict=True)
    )


def test_initial_offsets_survive_a_restart_before_the_first_batch_commits(topic) -> None:
    topic.produce(0, 20)
    topic.copy(0, 0, 10)  # part archived, part only on the topic
    first = reader(topic)  # startingOffsets: latest (a stream's default)
    initial = first.initialOffset()
    assert initial[topic.topic] == {"0": 20, "1": 0} and initial["@initial"] == {
        topic.topic: {"0": 20, "1": 0}
    }
    topic.produce(0, 10)
    batch0_end = first.latestOffset(initial, ReadAllAvailable())
    assert batch0_end[topic.topic]["0"] == 30 and batch0_end["@initial"] == initial["@initial"]
    # the query dies before batch 0 commits; more records arrive; it restarts from its checkpoint and
    # Spark re-runs batch 0 from a start it asks initialOffset() for again: the new latest (40)
    topic.produce(0, 10)
    second = reader(topic)
    restarted = second.initialOffset()
    assert restarted[topic.topic]["0"] == 40
    assert read(second, restarted, batch0_end) == [(0, o) for o in range(20, 30)]  # still from 20
    batch1_end = second.latestOffset(batch0_end, ReadAllAvailable())
    assert "@initial" not in batch1_end and batch1_end[topic.topic]["0"] == 40
    assert read(second, batch0_end, batch1_end) == [(0, o) for o in range(30, 40)]


def test_min_offsets_per_trigger_holds_a_batch_back_until_enough_waits(topic) -> None:
    topic.produce(0, 20)
    r = reader(topic, startingOffsets="earliest", minOffsetsPerTrigger="50", maxTriggerDelay="1h")
    start = r.initialOffset()
    first = r.latestOffset(start, ReadMinRows(50))  # the first trigger fires (as Spark's: no last one)
    assert first[topic.topic] == {"0": 20, "1": 0}
    topic.produce(0, 10)
    assert r.latestOffset(first, ReadMinRows(50)) == first  # 10 waiting, 50 asked: held back
    assert r.latestOffset(first, ReadAllAvailable())[topic.topic]["0"] == 30  # the engine's override wins
    topic.produce(1, 45)
    released = r.latestOffset(first, ReadMinRows(50))
    assert released[topic.topic] == {"0": 30, "1": 45}
    quick = reader(topic, startingOffsets="earliest", minOffsetsPerTrigger="50", maxTriggerDelay="0s")
    s = quick.initialOffset()
    e = quick.latestOffset(s, ReadMinRows(50))
    topic.produce(0, 1)
    assert quick.latestOffset(e, ReadMinRows(50)) != e  # the delay passed: a batch for one record


# -- through Spark: crash and restart ---------------------------------------------------------------


def batch_offsets(checkpoint: Path) -> dict[int, dict[str, Any]]:
    """The source offsets of each batch in a checkpoint's offset log."""
    out = {}
    for f in (checkpoint / "offsets").iterdir():
        if f.name.isdigit():
            out[int(f.name)] = json.loads(f.read_text().strip().splitlines()[-1])
    return out


class Sink:
    """foreachBatch: each batch's rows to Parquet under its batch id (a replay overwrites); crashes
    once in the batch named by ``crash_in``."""

    def __init__(self, out: Path, crash_in: int | None) -> None:
        self.out = out
        self.crash_in = crash_in

    def __call__(self, df: Any, batch_id: int) -> None:
        df.select("partition", "offset").write.mode("overwrite").parquet(str(self.out / f"batch={batch_id}"))
        if batch_id == self.crash_in:
            self.crash_in = None
            raise RuntimeError(f"crash in batch {batch_id}")

    def offsets(self, spark: Any) -> list[tuple[int, int]]:
        rows = spark.read.parquet(str(self.out)).select("partition", "offset").collect()
        return sorted((r["partition"], r["offset"]) for r in rows)


def run(
    spark: Any, arch: PlantedArchive, sink: Sink, checkpoint: Path, available_now: bool, **extra: str
) -> Any:
    writer = (
        spark.readStream.format("tiered_records")
        .options(**{**arch.options, "tail": "live", **extra})
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
    )
    writer = (
        writer.trigger(availableNow=True)
        if available_now
        else writer.trigger(processingTime="500 milliseconds")
    )
    query = writer.start()
    try:
        query.awaitTermination()
    except Exception as exc:  # the crash
        return exc
    return None


class Producer(threading.Thread):
    def __init__(self, arch: PlantedArchive) -> None:
        super().__init__(daemon=True)
        self.arch = arch
        self.stop = threading.Event()

    def run(self) -> None:
        producer = new_producer(self.arch.stack.bootstrap_servers, "stream-test")
        i = 0
        while not self.stop.wait(0.005):
            producer.produce(self.arch.topic, value=b"x%d" % i, partition=i % 2)
            producer.poll(0)
            i += 1
        producer.flush(30)
        producer.produce(self.arch.topic, value=b"last", partition=0)  # Tansu: a request of its own
        producer.produce(self.arch.topic, value=b"last", partition=1)
        producer.flush(30)


def test_a_crash_in_batch_0_with_latest_neither_skips_nor_repeats(spark, topic, tmp_path) -> None:
    topic.produce(0, 30)
    topic.copy(0, 0, 30)
    for attempt in range(3):  # batch 0 must have caught records (its end above its start) to prove anything
        checkpoint, sink = tmp_path / f"cp{attempt}", Sink(tmp_path / f"out{attempt}", crash_in=0)
        producer = Producer(topic)
        producer.start()
        try:
            crash = run(spark, topic, sink, checkpoint, available_now=False)
        finally:
            producer.stop.set()
            producer.join()
        assert crash is not None and "crash in batch 0" in str(crash)
        batch0 = batch_offsets(checkpoint)[0]
        initial = {int(p): o for p, o in batch0["@initial"][topic.topic].items()}
        ends0 = {int(p): o for p, o in batch0[topic.topic].items()}
        if any(ends0[p] > initial[p] for p in ends0):
            break
    else:
        pytest.fail("batch 0 never caught a record in 3 attempts")
    assert run(spark, topic, sink, checkpoint, available_now=True) is None  # restart, then stop at the end
    last = batch_offsets(checkpoint)[max(batch_offsets(checkpoint))]
    ends = {int(p): o for p, o in last[topic.topic].items()}
    got = sink.offsets(spark)
    assert len(got) == len(set(got))  # nothing twice
    assert got == [(p, o) for p in sorted(ends) for o in range(initial[p], ends[p])]  # nothing skipped


def test_a_crash_mid_stream_neither_skips_nor_repeats(spark, topic, tmp_path) -> None:
    topic.produce(0, 150)
    topic.produce(1, 90)
    topic.copy(0, 0, 100)
    topic.copy(1, 0, 40)
    sink = Sink(tmp_path / "out", crash_in=2)
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "60", "includeHeaders": "true"}
    crash = run(spark, topic, sink, tmp_path / "cp", available_now=True, **options)
    assert crash is not None and "crash in batch 2" in str(crash)
    assert run(spark, topic, sink, tmp_path / "cp", available_now=True, **options) is None
    got = sink.offsets(spark)
    assert got == [(0, o) for o in range(150)] + [(1, o) for o in range(90)]


def test_max_offsets_per_trigger_cuts_batches_as_sparks_kafka_source(spark, topic, tmp_path) -> None:
    topic.produce(0, 200)
    topic.produce(1, 50)
    topic.copy(0, 0, 120)
    sink = Sink(tmp_path / "out", crash_in=None)
    options = {"startingOffsets": "earliest", "maxOffsetsPerTrigger": "70"}
    assert run(spark, topic, sink, tmp_path / "cp", available_now=True, **options) is None
    ends = [
        {(topic.topic, int(p)): o for p, o in doc[topic.topic].items()}
        for _, doc in sorted(batch_offsets(tmp_path / "cp").items())
    ]
    start = {(topic.topic, 0): 0, (topic.topic, 1): 0}
    latest = {(topic.topic, 0): 200, (topic.topic, 1): 50}
    assert ends == KafkaReference.rate_limited_batches(start, latest, 70)
    assert sink.offsets(spark) == [(0, o) for o in range(200)] + [(1, o) for o in range(50)]
