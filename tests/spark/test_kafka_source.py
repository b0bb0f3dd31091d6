"""Spark's own Kafka source (``format("kafka")``, the connector from Maven Central) through the gateway,
on Apache Kafka after the broker deleted what the worker archived: the same rows as
``format("tiered_records")`` over the archive, and as the same source gave from the broker before the
truncation. Earliest to latest, a range by offsets, a start by timestamp; a batch and a stream."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack import stack
from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.wiring.gateway_server import GatewayServer
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.spark.conftest import as_tuple
from tests.support.gateway_thread import gateway_running, loopback_gateway
from tests.support.metadata_watch import wait_offloaded

TOPIC = "spark-kafka-source"
PARTITIONS = 2
RECORDS = 600
META = "__remote_log_metadata_spark_kafka"
PREFIX = "spark-kafka"
Row = tuple[int, int, tuple[Any, ...]]  # partition, offset, (key, value, headers, timestamp, type)


@dataclass
class Truncated:
    gateway: str
    before: dict[str, list[Row]]  # what Spark's Kafka source read from the broker before truncation
    tiered: dict[str, str]  # tiered_records options over the archive


def _rows(df: Any) -> list[Row]:
    return sorted((r["partition"], r["offset"], as_tuple(r)) for r in df.collect())


QUERIES: dict[str, dict[str, str]] = {
    "earliest": {"startingOffsets": "earliest"},
    "by offsets": {
        "startingOffsets": json.dumps({TOPIC: {"0": 20, "1": 35}}),
        "endingOffsets": json.dumps({TOPIC: {"0": 120, "1": 250}}),
    },
    "by timestamp": {"startingTimestamp": str(1_700_000_000_000 + 10 * 200)},
}


def _kafka(spark: Any, bootstrap: str, query: dict[str, str]) -> Any:
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
    return reader.option("subscribe", TOPIC).option("includeHeaders", "true").options(**query).load()


@pytest.fixture(scope="module")
def truncated(
    spark: Any, local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Truncated]:
    if local_stack.broker != stack.KAFKA:
        pytest.skip("Spark's Kafka connector and a truncating broker need Apache Kafka")
    tmp = tmp_path_factory.mktemp("spark-kafka")
    bootstrap = local_stack.bootstrap_servers
    ensure_topic(new_admin(bootstrap, "t"), TOPIC, PARTITIONS, 1, {})
    produce_samples(bootstrap, TOPIC, RECORDS, PARTITIONS, big_every=0, producer_config={"batch.size": 8192})
    before = {name: _rows(_kafka(spark, bootstrap, q)) for name, q in QUERIES.items()}
    env = worker_env(
        local_stack, tmp / "data", TOPIC, PROCESSOR_METADATA_TOPIC=META, PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_SEGMENT_BYTES=str(64 * 1024), PROCESSOR_BLOCK_BYTES=str(8 * 1024),
        PROCESSOR_SEGMENT_MS="500",
    )  # fmt: skip
    worker = WorkerProcess(env, tmp / "worker.log")
    ends = {TopicPartition(TOPIC, p): RECORDS // PARTITIONS - 1 for p in range(PARTITIONS)}
    try:
        wait_offloaded(bootstrap, META, ends, 120, worker.proc)
    finally:
        worker.stop()
    admin = new_admin(bootstrap, "spark-kafka-delete")
    for future in admin.delete_records(
        [KafkaTP(TOPIC, p, RECORDS // PARTITIONS) for p in range(PARTITIONS)]
    ).values():
        future.result(timeout=30)
    gateway = loopback_gateway(
        {**local_stack.env(), "PROCESSOR_METADATA_TOPIC": META, "PROCESSOR_S3_PREFIX": PREFIX},
        tmp / "gateway",
    )
    tiered = {
        "kafka.bootstrap.servers": bootstrap, "metadata.topic": META,
        "s3.endpoint": local_stack.s3_endpoint_url, "s3.bucket": local_stack.bucket, "s3.prefix": PREFIX,
        "s3.region": "us-east-1", "subscribe": TOPIC, "includeHeaders": "true",
    }  # fmt: skip
    with gateway_running(GatewayServer.build(gateway.settings)):
        yield Truncated(gateway.bootstrap, before, tiered)


@pytest.mark.parametrize("query", list(QUERIES))
def test_sparks_kafka_source_through_the_gateway_reads_what_the_broker_deleted(
    spark: Any, truncated: Truncated, query: str
) -> None:
    through = _rows(_kafka(spark, truncated.gateway, QUERIES[query]))
    assert through == truncated.before[query] and through, query
    tiered = _rows(spark.read.format("tiered_records").options(**truncated.tiered, **QUERIES[query]).load())
    assert tiered == through, query


def test_a_stream_of_sparks_kafka_source_through_the_gateway(
    spark: Any, truncated: Truncated, tmp_path: Path
) -> None:
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", truncated.gateway)
        .option("subscribe", TOPIC)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .load()
    )
    query = (
        stream.writeStream.format("memory").queryName("through_gateway")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True).start()
    )  # fmt: skip
    query.awaitTermination(120)
    assert query.exception() is None, query.exception()
    assert _rows(spark.table("through_gateway")) == truncated.before["earliest"]
