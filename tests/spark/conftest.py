"""Spark tests: one local SparkSession per test session, and one archive shared by the modules.

The archive is made by the real worker (a child process) on the local stack, with small segments
rolled only by size (segment.ms is huge), so a deterministic tail of each partition stays on the
live topic and never reaches the archive: ``tail=live`` always has a boundary to cross.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack import emulators, jars, stack
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_consumer, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata.topic_io import load_remote_state
from tests.integration.worker_process import WorkerProcess, worker_env

TOPIC = "spark-records"
PARTITIONS = 2
META = "__remote_log_metadata_spark"
PREFIX = "spark"
SEGMENT_BYTES = 64 * 1024
BASE_TS = 1_700_000_000_000


@pytest.fixture(scope="session")
def spark(local_stack: StackInfo) -> Iterator[Any]:
    # local_stack first: it puts the AWS credentials in the environment the JVM and its workers inherit.
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from processor.spark_sources import local_session

    # Spark's own Kafka source too (tests/spark/test_kafka_source.py), from the pinned Maven file
    # the emulators' public credentials, as each node's settings (tests/spark/test_cloud_stores.py)
    extra = {"spark__executorEnv__PROCESSOR_AZURE_ACCOUNT_KEY": emulators.AZURITE_KEY,
             "spark__executorEnv__PROCESSOR_GCS_ANONYMOUS": "true"}  # fmt: skip
    if local_stack.broker == stack.KAFKA:
        extra["spark__jars"] = ",".join(str(jar) for jar in jars.jar_files("spark-kafka"))
    session = local_session(
        "processor-tests", spark__sql__shuffle__partitions="2", spark__driver__memory="1g", **extra
    )
    yield session
    session.stop()


def record_shape(i: int) -> dict[str, Any]:
    """Every shape a record can take: null vs empty keys, values and header values, duplicate header
    names, 300 KB values."""
    shape = i % 8
    key: bytes | None = f"k{i}".encode()
    value: bytes | None = bytes([i % 251]) * (200 + (i * 37) % 1200)
    headers: list[tuple[str, bytes | None]] = []
    if shape == 1:
        key = None
    elif shape == 2:
        key = b""
    elif shape == 3:
        value = None
    elif shape == 4:
        value = b""
    elif shape == 5:
        headers = [("dup", b"a"), ("dup", b"b"), ("empty", b""), ("null", None)]
    elif shape == 6:
        headers = [("bin", b"\x00\xff")]
    if i % 97 == 50:
        value = os.urandom(300 * 1024)
    return {"key": key, "value": value, "headers": headers, "timestamp": BASE_TS + i * 10}


@dataclass
class Archive:
    info: StackInfo
    worker: WorkerProcess
    options: dict[str, str]
    produced: int = 0

    def produce(self, count: int, value_bytes: int | None = None) -> None:
        # Small record batches (format 2 archives whole batches): many blocks per segment, so the
        # tests that prune blocks by offset or time have blocks to prune.
        producer = new_producer(
            self.info.bootstrap_servers,
            "spark-tests",
            **{"message.max.bytes": 2 << 20, "batch.num.messages": 8},
        )
        last = self.produced + count
        for i in range(self.produced, last):
            rec = record_shape(i)
            if value_bytes is not None:
                rec["value"] = bytes([i % 251]) * value_bytes
            alone = i >= last - PARTITIONS
            if alone:
                # Tansu reports a wrong high watermark after a multi-record batch until the next produce
                # request: each partition's last record goes in a request of its own.
                assert producer.flush(30) == 0
            producer.produce(
                TOPIC,
                value=rec["value"],
                key=rec["key"],
                partition=i % PARTITIONS,
                headers=rec["headers"] or None,
                timestamp=rec["timestamp"],
            )
            producer.poll(0)
            if alone:
                assert producer.flush(30) == 0
        assert producer.flush(30) == 0
        self.produced += count
        time.sleep(0.3)  # Tansu's high watermark can lag a moment behind a flush

    def archive_ends(self) -> dict[int, int]:
        """Next offset after each partition's archived (finished) range."""
        state, _ = load_remote_state(self.info.bootstrap_servers, META)
        return {
            p: (state.partition(TopicPartition(TOPIC, p)).highest_finished_offset() or -1) + 1
            for p in range(PARTITIONS)
        }

    def wait_archived(self, at_least: dict[int, int], timeout_s: float = 120) -> dict[int, int]:
        deadline = time.monotonic() + timeout_s
        while True:
            ends = self.archive_ends()
            if all(ends[p] >= at_least.get(p, 0) for p in ends):
                return ends
            if self.worker.proc.poll() is not None:
                raise RuntimeError("worker exited:\n" + self.worker.log()[-3000:])
            if time.monotonic() > deadline:
                raise TimeoutError(f"archive reached {ends}, wanted {at_least}")
            time.sleep(0.5)


def consume_all(bootstrap: str, topic: str = TOPIC) -> dict[tuple[int, int], tuple[Any, ...]]:
    """Every record of the topic from a plain consumer: (partition, offset) -> (key, value, headers,
    timestamp, timestamp type in Spark's numbering)."""
    consumer = new_consumer(bootstrap, "spark-tests-plain")
    ends = {p: consumer.get_watermark_offsets(KafkaTP(topic, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.assign([KafkaTP(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    out: dict[tuple[int, int], tuple[Any, ...]] = {}
    deadline = time.monotonic() + 60
    while any(sum(1 for (p, _o) in out if p == q) < ends[q] for q in ends) and time.monotonic() < deadline:
        for m in consumer.consume(1000, 0.2):
            assert m.error() is None
            ts_type, ts = m.timestamp()
            out[(int(m.partition() or 0), int(m.offset() or 0))] = (
                m.key(),
                m.value(),
                list(m.headers() or []),
                ts,
                ts_type - 1,
            )
    consumer.close()
    return out


@pytest.fixture(scope="session")
def archive(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    tmp = tmp_path_factory.mktemp("spark-archive")
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, PARTITIONS, 1, {})
    env = worker_env(
        local_stack,
        tmp / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_METADATA_PARTITIONS="2",
        PROCESSOR_SEGMENT_BYTES=str(SEGMENT_BYTES),
        PROCESSOR_BLOCK_BYTES=str(8 * 1024),
        PROCESSOR_SEGMENT_MS=str(3_600_000),
        PROCESSOR_BUFFER_BYTES=str(16 * 1024 * 1024),
        PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_FOLLOWER_ENABLED="false",
    )
    worker = WorkerProcess(env, tmp / "worker.log")
    archive = Archive(local_stack, worker, archive_options(local_stack, META, PREFIX))
    try:
        archive.produce(600)
        # 600 records of ~1 KiB in 64 KiB segments: every partition has several finished segments,
        # and its last records stay in the open segment (rolled only by size).
        archive.wait_archived({p: 200 for p in range(PARTITIONS)})
        time.sleep(2)
        yield archive
    finally:
        worker.stop()


def as_tuple(row: Any) -> tuple[Any, ...]:
    """A Spark row as (key, value, headers, timestamp ms, timestamp type), comparable to consume_all."""
    ms = round(row["timestamp"].timestamp() * 1000)  # naive local datetimes, as pyspark makes them
    raw = row.asDict().get("headers")
    headers = [(h["key"], None if h["value"] is None else bytes(h["value"])) for h in raw or []]
    key = None if row["key"] is None else bytes(row["key"])
    value = None if row["value"] is None else bytes(row["value"])
    return (key, value, headers, ms, row["timestampType"])


def archive_options(info: StackInfo, meta: str, prefix: str) -> dict[str, str]:
    """The Spark sources' options for an archive on the stack: its metadata topic and S3 prefix."""
    return {
        "kafka.bootstrap.servers": info.bootstrap_servers,
        "metadata.topic": meta,
        "s3.endpoint": info.s3_endpoint_url,
        "s3.bucket": info.bucket,
        "s3.prefix": prefix,
        "s3.region": "us-east-1",
    }


def spark_options(archive: Archive, **extra: str) -> dict[str, str]:
    return {**archive.options, "subscribe": TOPIC, **extra}


def collect_offsets(rows: list[Any]) -> list[tuple[int, int]]:
    return sorted((r["partition"], r["offset"]) for r in rows)
