"""The Spark source through a SASL_SSL-only broker, configured with Spark's own Kafka option names.

A worker archives part of a topic on the secured stack (segments rolled by size only, so each
partition keeps a tail on the live topic), then a ``tail=live`` stream reads archive and tail with
``kafka.security.protocol``, ``kafka.sasl.mechanism``, ``kafka.sasl.jaas.config`` and
``kafka.ssl.ca.location``: the metadata topic (driver), the watermarks (driver) and the live range
(executors) all go through TLS and SCRAM; then the audit of that archive. The process environment
holds no Kafka security setting, so nothing but the options can have authenticated.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_consumer
from processor.kafka.partition import TopicPartition
from processor.metadata.topic_io import load_remote_state
from processor.spark.audit.run import AuditOptions, run_audit
from processor.spark_sources.entry import connection_from
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, WorkerProcess

pytestmark = pytest.mark.spark

TOPIC = "secured-spark"
PARTITIONS = 2
META = "__remote_log_metadata_secured_spark"
PREFIX = "secured-spark"


def _jaas(user: str, password: str) -> str:
    quoted = password.replace("\\", "\\\\").replace('"', '\\"')
    login = "org.apache.kafka.common.security.scram.ScramLoginModule"
    return f'{login} required username="{user}" password="{quoted}";'


def _archive_ends(stack: StackInfo) -> dict[int, int]:
    state, _ = load_remote_state(stack.kafka, META)
    return {
        p: (state.partition(TopicPartition(TOPIC, p)).highest_finished_offset() or -1) + 1
        for p in range(PARTITIONS)
    }


def test_tail_live_reads_archive_and_topic_through_sasl_ssl(
    spark, secured_stack: StackInfo, tmp_path: Path
) -> None:
    secured = secured_stack.secured
    assert secured is not None
    assert not [
        k for k in os.environ if k.startswith(("PROCESSOR_SASL", "PROCESSOR_SECURITY", "PROCESSOR_SSL"))
    ]
    kafka = secured_stack.kafka
    ensure_topic(new_admin(kafka, "spark-secured"), TOPIC, PARTITIONS, 1, {})
    # One record a batch: Tansu's high watermark counts a multi-record batch as one offset.
    one_a_batch = {"batch.num.messages": 1, "linger.ms": 0}
    produce_samples(kafka, TOPIC, 240, PARTITIONS, big_every=0, producer_config=one_a_batch)
    env = secured_stack.worker_env(
        tmp_path / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_METADATA_PARTITIONS="2",
        PROCESSOR_SEGMENT_BYTES="16KiB",
        PROCESSOR_BLOCK_BYTES="4KiB",
        PROCESSOR_SEGMENT_MS="1h",  # rolled by size only: a tail stays on the topic
        PROCESSOR_BUFFER_BYTES="8MiB",
        PROCESSOR_SESSION_TIMEOUT_MS=TEST_SESSION_TIMEOUT_MS,
        PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_FOLLOWER_ENABLED="false",
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 120
        while not all(end > 0 for end in _archive_ends(secured_stack).values()):
            assert worker.proc.poll() is None and time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.5)
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    # More records while no worker runs: the live tail (the stopped worker rolled what it held).
    produce_samples(kafka, TOPIC, 40, PARTITIONS, start=240, big_every=0, producer_config=one_a_batch)
    archived = _archive_ends(secured_stack)
    consumer = new_consumer(kafka, "spark-secured-highs")
    highs = {p: consumer.get_watermark_offsets(KafkaTP(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.close()
    assert all(highs[p] > archived[p] > 0 for p in range(PARTITIONS)), (archived, highs)

    options = {
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
        "tail": "live",
        "kafka.bootstrap.servers": secured_stack.bootstrap_servers,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": _jaas(secured.username, secured.password),
        "kafka.ssl.ca.location": secured.pki.ca_file,
        "metadata.topic": META,
        "s3.endpoint": secured_stack.s3_endpoint_url,
        "s3.bucket": secured_stack.bucket,
        "s3.prefix": PREFIX,
        "s3.region": "us-east-1",
    }
    out, checkpoint = tmp_path / "out", tmp_path / "cp"
    query = (
        spark.readStream.format("tiered_records")
        .options(**options)
        .load()
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    assert query.exception() is None
    got = sorted((r["partition"], r["offset"]) for r in spark.read.parquet(str(out)).collect())
    assert got == [(p, o) for p in range(PARTITIONS) for o in range(highs[p])]

    # The audit of the same archive: its metadata stream and its Kafka checks go through SASL_SSL too.
    audited = AuditOptions(
        connection=connection_from(options, environ={}),
        checkpoint=tmp_path / "audit-checkpoint",
        output=tmp_path / "findings",
        once=True,
        verify_objects=True,
        stuck_after_ms=60_000,
    )
    assert audited.connection.kafka.security.protocol == "SASL_SSL"
    assert run_audit(spark, audited).findings == []
