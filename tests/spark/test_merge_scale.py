"""Merging at scale on the running stack (``make test-slow``): one partition archived in 1,000 small
segments is merged into segments near the target size; the bucket's object count drops with the
segment count, and every record reads back byte-exact through ``fetch``, through the gateway to an
unmodified consumer once the broker deleted them, and through the Spark source."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from tests.integration.lifecycle_support import run_cli, view
from tests.integration.test_deletion_commands import META, PREFIX, env_for, offload
from tests.spark.conftest import archive_options
from tests.support.gateway_thread import consume_archive

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

SEGMENTS = 1000
# records of 900 bytes in batches of about 2: an 8 KiB segment holds about 10 (measured), ~1,050
RECORDS = 10_500
TARGET = 1024 * 1024


def value_of(i: int) -> bytes:
    return b"%08d" % i + bytes([i % 251]) * 892


@pytest.mark.timeout(1200)
def test_a_thousand_small_segments_merge_near_the_target_and_read_back_everywhere(
    spark: Any, local_stack: StackInfo, tmp_path: Path
) -> None:
    tp = TopicPartition("merge-scale", 0)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), tp.topic, 1, 1, {})
    stamp = int(time.time() * 1000)
    producer = new_producer(
        local_stack.bootstrap_servers, "scale", **{"linger.ms": 2, "batch.num.messages": 2}
    )
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(tp.topic, value_of(i), b"k%d" % i, partition=0, timestamp=stamp + i)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(120) == 0
    env = env_for(
        local_stack,
        tmp_path,
        tp.topic,
        PROCESSOR_WORKER_ID="merge-scale-1",
        PROCESSOR_SEGMENT_MS="600000",
        PROCESSOR_MERGE_TARGET_BYTES=str(TARGET),
        PROCESSOR_MERGE_SMALL_BYTES=str(64 * 1024),
        PROCESSOR_MERGE_MIN_AGE_MS="0",
    )
    # a segment at a time, each a confirmed record pair and three objects: minutes on a loaded machine
    offload(local_stack, env, {tp: RECORDS - 1}, tmp_path / "worker.log", timeout_s=900)
    before = view(local_stack, META, tp, PREFIX)
    assert len(before.finished) >= SEGMENTS, len(before.finished)

    t0 = time.monotonic()
    done = run_cli(env, "merge", "--topic", tp.topic, "--json")
    merge_s = time.monotonic() - t0
    assert done.returncode == 0, done.stderr
    after = view(local_stack, META, tp, PREFIX)
    total = sum(s.segment_size_in_bytes for s in before.finished)
    assert len(after.finished) <= total // (TARGET // 2) + 1
    assert all(s.segment_size_in_bytes >= TARGET * 0.9 for s in after.finished[:-1])
    assert coverage_gaps_and_overlaps(after.finished) == []
    assert len(after.objects) <= len(before.objects) * (len(after.finished) + 1) // len(before.finished) + 3
    print(
        f"merged {len(before.finished)} segments ({len(before.objects)} objects) into {len(after.finished)} "
        f"({len(after.objects)} objects) in {merge_s:.1f} s"
    )

    expected = [(i, b"k%d" % i, value_of(i)) for i in range(RECORDS)]
    fetched = run_cli(env, "fetch", "--topic", tp.topic, "--partition", "0", "--offset", "0",
                      "--max-records", str(RECORDS), "--json")  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    rows = [json.loads(line) for line in fetched.stdout.splitlines()]
    assert [r["offset"] for r in rows] == list(range(RECORDS))

    options = {**archive_options(local_stack, META, PREFIX), "subscribe": tp.topic, "endingOffsets": "latest"}
    got = spark.read.format("tiered_records").options(**options).load().collect()
    assert sorted((r["offset"], bytes(r["key"]), bytes(r["value"])) for r in got) == expected

    admin = new_admin(local_stack.bootstrap_servers, "t")
    for future in admin.delete_records([KafkaTP(tp.topic, 0, RECORDS)]).values():
        future.result(timeout=30)
    archive_env = {**local_stack.env(), "PROCESSOR_METADATA_TOPIC": META, "PROCESSOR_S3_PREFIX": PREFIX}
    assert consume_archive(archive_env, tmp_path / "gateway", tp.topic, RECORDS, "scale") == expected
