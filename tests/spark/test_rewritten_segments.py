"""The Spark source over rewritten segments: an archive whose small segments were merged and from
which two keys were erased reads back through ``tiered_records`` exactly as ``fetch`` serves it: every
other record byte-exact at its offset, the erased offsets gaps, nothing twice."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from tests.integration.lifecycle_support import produce, run_cli, view
from tests.integration.test_deletion_commands import META, PREFIX, env_for, offload
from tests.spark.conftest import archive_options

pytestmark = [pytest.mark.spark, pytest.mark.integration]

RECORDS = 240


def test_merged_and_erased_segments_read_back_through_spark(
    spark: Any, local_stack: StackInfo, tmp_path: Path
) -> None:
    tp = TopicPartition("spark-rewritten", 0)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), tp.topic, 1, 1, {})
    stamp = int(time.time() * 1000)
    produce(local_stack.bootstrap_servers, tp.topic, 0, RECORDS, stamp)
    env = env_for(
        local_stack,
        tmp_path,
        tp.topic,
        PROCESSOR_WORKER_ID="spark-rewrite-1",
        PROCESSOR_ERASURE_SECRET="a secret for the spark rewrite test",
        PROCESSOR_MERGE_TARGET_BYTES=str(48 * 1024),
        PROCESSOR_MERGE_SMALL_BYTES=str(16 * 1024),
        PROCESSOR_MERGE_MIN_AGE_MS="0",
    )
    offload(local_stack, env, {tp: RECORDS - 1}, tmp_path / "worker.log")
    before = len(view(local_stack, META, tp, PREFIX).finished)
    merged = run_cli(env, "merge", "--topic", tp.topic, "--json")
    assert merged.returncode == 0, merged.stderr
    erased = run_cli(env, "erase", "--topic", tp.topic, "--key", "k5", "k150", "--json")
    assert erased.returncode == 0, erased.stdout + erased.stderr
    assert json.loads(erased.stdout)["records_removed"] == 2
    served = view(local_stack, META, tp, PREFIX).finished
    assert len(served) < before and any(s.supersedes for s in served)

    options = {**archive_options(local_stack, META, PREFIX), "subscribe": tp.topic, "endingOffsets": "latest"}
    rows = spark.read.format("tiered_records").options(**options).load().collect()
    got = sorted((r["offset"], bytes(r["key"]), bytes(r["value"])) for r in rows)
    expected = [(i, f"k{i}".encode(), bytes([i % 251]) * 1024) for i in range(RECORDS) if i not in (5, 150)]
    assert got == expected
