"""failOnDataLoss with Spark's meaning, on archives made to order: offsets in neither the archive nor
the topic fail the read (true) or are skipped with a warning and a count (false); a hole the topic
still holds is read from it under tail=live; a segment deleted between planning and reading; a
topic deleted and re-created under a running stream (offsets carry the topic id)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable

from processor.devstack.stack import StackInfo
from processor.spark.planning import DataLossError
from processor.spark.slice_reader import DATA_LOSS
from processor.spark.tiered_records import TieredRecordsReader
from processor.spark.tiered_stream import TieredRecordsStreamReader
from processor.spark_sources.entry import record_options
from tests.spark.kafka_reference import KafkaReference
from tests.spark.planted import PlantedArchive, plant
from tests.spark.test_conformance import spark_rows

pytestmark = [pytest.mark.spark, pytest.mark.integration]


@pytest.fixture(scope="module")
def holed(local_stack: StackInfo) -> Iterator[PlantedArchive]:
    """Partition 0: 150 records on the topic, archived 0..49 and 100..149 (a hole at 50..99)."""
    arch = plant(local_stack, "spark-holed")
    arch.produce(0, 150)
    arch.copy(0, 0, 50)
    arch.copy(0, 100, 150)
    yield arch
    arch.close()


def offsets(rows: list[tuple[Any, ...]]) -> list[int]:
    return [r[4] for r in rows]


def test_a_hole_in_the_archive_fails_or_is_skipped_and_counted(spark, holed) -> None:
    with pytest.raises(Exception, match=r"offsets 50\.\.99 of spark-holed-0 are not in the archive"):
        spark_rows(spark, holed.options)
    reader = TieredRecordsReader(record_options({**holed.options, "failOnDataLoss": "false"}))
    before = DATA_LOSS.offsets.get("not_archived", 0)
    got = [
        o for part in reader.partitions() for b in reader.read(part) for o in b.column("offset").to_pylist()
    ]
    assert got == list(range(50)) + list(range(100, 150))
    assert DATA_LOSS.offsets["not_archived"] - before == 50
    assert offsets(spark_rows(spark, {**holed.options, "failOnDataLoss": "false"})) == got


def test_a_hole_the_topic_still_holds_is_read_from_the_topic_under_tail_live(spark, holed) -> None:
    expected = KafkaReference(holed.stack.bootstrap_servers).batch(
        {"subscribe": holed.topic, "includeHeaders": "true"}
    )
    got = spark_rows(spark, {**holed.options, "tail": "live", "includeHeaders": "true"})
    assert got == expected and offsets(got) == list(range(150))


def test_an_archive_starting_above_the_requested_offset_is_data_loss(spark, local_stack) -> None:
    arch = plant(local_stack, "spark-late-start")
    try:
        arch.produce(0, 60)
        arch.copy(0, 20, 60)
        asked = {**arch.options, "startingOffsets": json.dumps({arch.topic: {"0": 5}})}
        with pytest.raises(Exception, match=r"offsets 5\.\.19 of spark-late-start-0 are not in the archive"):
            spark_rows(spark, asked)
        assert offsets(spark_rows(spark, {**asked, "failOnDataLoss": "false"})) == list(range(20, 60))
        assert offsets(spark_rows(spark, arch.options)) == list(range(20, 60))  # earliest: no loss
    finally:
        arch.close()


def test_a_segment_deleted_between_planning_and_reading(local_stack) -> None:
    arch = plant(local_stack, "spark-deleted")
    try:
        arch.produce(0, 80)
        arch.copy(0, 0, 40)
        gone = arch.copy(0, 40, 80)

        def planned(**extra: str) -> tuple[TieredRecordsReader, list[Any]]:
            reader = TieredRecordsReader(record_options({**arch.options, **extra}))
            return reader, list(reader.partitions())

        strict, strict_parts = planned()
        lenient, lenient_parts = planned(failOnDataLoss="false")
        tail, tail_parts = planned(tail="live")
        arch.storage.delete(gone.data_object_key)  # retention removed it after the queries were planned

        def read(reader: TieredRecordsReader, parts: list[Any]) -> list[int]:
            return [o for p in parts for b in reader.read(p) for o in b.column("offset").to_pylist()]

        with pytest.raises(
            DataLossError, match=r"offsets 40\.\.79 of spark-deleted-0 are in segment .*deleted"
        ):
            read(strict, strict_parts)
        before = DATA_LOSS.offsets.get("deleted", 0)
        assert read(lenient, lenient_parts) == list(range(40))
        assert DATA_LOSS.offsets["deleted"] - before == 40
        assert read(tail, tail_parts) == list(range(80))  # the topic still holds them
    finally:
        arch.close()


def test_a_segment_deleted_while_its_slice_is_read(local_stack, monkeypatch) -> None:
    from processor.spark import arrow_records

    monkeypatch.setattr(arrow_records, "CHUNK_BYTES", 4096)  # several ranged GETs per slice
    monkeypatch.setattr(arrow_records, "BATCH_ROWS", 5)  # and rows out after each block or so
    arch = plant(local_stack, "spark-deleted-midway")
    try:
        arch.produce(0, 120)
        seg = arch.copy(0, 0, 120)
        for extra, expected in (({"tail": "live"}, list(range(120))), ({"failOnDataLoss": "false"}, None)):
            reader = TieredRecordsReader(record_options({**arch.options, **extra}))
            (part,) = reader.partitions()
            batches = reader.read(part)
            first = next(batches).column("offset").to_pylist()
            kept = arch.storage.read_all(seg.data_object_key)
            arch.storage.delete(seg.data_object_key)
            try:
                rest = [o for b in batches for o in b.column("offset").to_pylist()]
            finally:
                arch.storage.create(seg.data_object_key, [kept])
            got = first + rest
            assert len(got) == len(set(got)), "a row returned twice"
            if expected is not None:
                assert got == expected  # the rest came from the topic, from where the archive stopped
            else:
                assert got == list(range(len(got))) and 0 < len(got) < 120  # the rest skipped, counted
    finally:
        arch.close()


def _read_stream(reader: TieredRecordsStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[int]:
    return sorted(
        o
        for part in reader.partitions(start, end)
        for b in reader.read(part)
        for o in b.column("offset").to_pylist()
    )


def test_a_topic_deleted_and_recreated_under_a_stream_is_data_loss(local_stack) -> None:
    arch = plant(local_stack, "spark-recreated")
    try:
        arch.produce(0, 30)
        arch.copy(0, 0, 30)
        options = {**arch.options, "startingOffsets": "earliest"}
        strict = TieredRecordsStreamReader(record_options(options, mode="stream"))
        lenient = TieredRecordsStreamReader(
            record_options({**options, "failOnDataLoss": "false"}, mode="stream")
        )
        start = strict.initialOffset()
        end = strict.latestOffset(start, ReadAllAvailable())
        old_id = end["@ids"][arch.topic]
        assert end[arch.topic] == {"0": 30} and _read_stream(strict, start, end) == list(range(30))

        arch.recreate_topic(1)
        arch.produce(0, 12)
        arch.copy(0, 0, 12)  # the new incarnation's first segment: a new topic id in the archive
        nxt = strict.latestOffset(end, ReadAllAvailable())
        assert nxt["@ids"][arch.topic] != old_id and nxt[arch.topic] == {"0": 12}  # offsets went back
        with pytest.raises(DataLossError, match=r"spark-recreated was deleted and re-created"):
            strict.partitions(end, nxt)
        before = DATA_LOSS.events.get("topic_recreated", 0)
        assert _read_stream(lenient, end, nxt) == list(range(12))  # the new topic, from its beginning
        assert DATA_LOSS.events["topic_recreated"] - before == 1
    finally:
        arch.close()
