"""Reading the live topic in the executors (``tail=live``), and its high watermarks on the driver.

Offsets are the identity of a Kafka record, so the boundary between archive and live topic is exact:
the archive serves ``[start, archive_end)``, the topic ``[archive_end, end)``; nothing is read twice
and nothing is skipped. Offsets the topic does not hold (compaction, transaction markers) are simply
absent, as for any consumer; a range that starts below the topic's log start offset is data loss.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from confluent_kafka import KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from processor.errors import ServiceUnavailableError
from processor.kafka_clients import KafkaTarget, new_admin, new_consumer, partition_counts
from processor.metadata.model import TopicPartition
from processor.spark.arrow_records import BATCH_ROWS, Row, rows_to_batch
from processor.spark.planning import DataLossError, LiveSlice

STALL_TIMEOUT_S = 60.0


def live_ends(kafka: KafkaTarget, topics: list[str]) -> dict[TopicPartition, tuple[int, int]]:
    """(log start offset, high watermark) of every partition of ``topics``."""
    try:
        counts = partition_counts(new_admin(kafka, "processor-spark-live"), topics)
        consumer = new_consumer(kafka, "processor-spark-live")
        try:
            out: dict[TopicPartition, tuple[int, int]] = {}
            for topic in topics:
                for p in range(counts.get(topic, 0)):
                    low, high = consumer.get_watermark_offsets(KafkaTP(topic, p), timeout=10)
                    out[TopicPartition(topic, p)] = (int(low), int(high))
            return out
        finally:
            consumer.close()
    except KafkaException as exc:
        raise ServiceUnavailableError(f"cannot read watermarks of {topics}: {exc.args[0]}") from None


def _header_list(raw: list[tuple[str, bytes | None]] | None) -> list[tuple[str, bytes | None]]:
    return list(raw) if raw else []


def consume_range(kafka: KafkaTarget, topic: str, partition: int, lo: int, hi: int) -> Iterator[Any]:
    """Messages with offsets in ``[lo, hi)`` of one partition (absent offsets are skipped)."""
    if lo >= hi:
        return
    consumer = new_consumer(kafka, "processor-spark-range")
    try:
        consumer.assign([KafkaTP(topic, partition, lo)])
        deadline = time.monotonic() + STALL_TIMEOUT_S
        while True:
            batch = consumer.consume(1000, 0.2)
            if not batch:
                position = consumer.position([KafkaTP(topic, partition)])[0].offset
                if position >= hi:
                    return
                if time.monotonic() > deadline:
                    raise ServiceUnavailableError(f"reading {topic}-{partition} stalled before offset {hi}")
                continue
            deadline = time.monotonic() + STALL_TIMEOUT_S
            for msg in batch:
                err = msg.error()
                if err is not None:
                    raise ServiceUnavailableError(f"reading {topic}-{partition}: {err}")
                offset = int(msg.offset() or 0)
                if offset >= hi:
                    return
                yield msg
                if offset == hi - 1:
                    return
    except KafkaException as exc:
        raise ServiceUnavailableError(f"reading {topic}-{partition}: {exc.args[0]}") from None
    finally:
        consumer.close()


def read_live_slice(
    kafka: KafkaTarget, part: LiveSlice, fail_on_data_loss: bool = True
) -> Iterator[pa.RecordBatch]:
    """Offsets ``[from, until)`` of one partition from the broker, as Arrow batches."""
    low = live_ends(kafka, [part.topic]).get(TopicPartition(part.topic, part.partition), (0, 0))[0]
    if part.from_offset < low and fail_on_data_loss:
        raise DataLossError(
            f"offsets {part.from_offset}..{low - 1} of {part.topic}-{part.partition} are neither in the "
            "archive nor on the topic any more (set failOnDataLoss=false to skip them)"
        )
    rows: list[Row] = []
    for msg in consume_range(
        kafka, part.topic, part.partition, max(part.from_offset, low), part.until_offset
    ):
        ts_type, ts = msg.timestamp()
        rows.append(
            Row(
                int(msg.offset()),
                int(ts),
                int(ts_type) - 1,
                msg.key(),
                msg.value(),
                _header_list(msg.headers()),
            )
        )
        if len(rows) >= BATCH_ROWS:
            yield rows_to_batch(part.topic, part.partition, rows)
            rows = []
    if rows:
        yield rows_to_batch(part.topic, part.partition, rows)
