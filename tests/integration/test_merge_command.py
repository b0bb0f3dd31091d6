"""``processor merge`` on the real stack: a partition archived in many small segments is merged into
a few, every record reads back byte-exact through ``fetch`` and, once the broker deleted them,
through the gateway to an unmodified consumer, the bucket holds fewer objects, and the same merge
again changes nothing."""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from tests.integration.lifecycle_support import produce, run_cli, view
from tests.integration.test_deletion_commands import META, PREFIX, env_for, offload
from tests.integration.worker_process import WorkerProcess
from tests.support.gateway_thread import consume_archive

pytestmark = pytest.mark.integration


def fetch_all(env: dict[str, str], tp: TopicPartition, count: int) -> list[dict[str, object]]:
    done = run_cli(
        env, "fetch", "--topic", tp.topic, "--partition", str(tp.partition), "--offset", "0",
        "--max-records", str(count), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def test_small_segments_merge_into_few_and_every_record_reads_back_byte_exact(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    tp = TopicPartition("merge-me", 0)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), tp.topic, 1, 1, {})
    produce(local_stack.bootstrap_servers, tp.topic, 0, 200, int(time.time() * 1000))
    env = env_for(local_stack, tmp_path, tp.topic, PROCESSOR_WORKER_ID="merge-1")
    offload(local_stack, env, {tp: 199}, tmp_path / "w1.log")
    before = view(local_stack, META, tp, PREFIX)
    assert len(before.finished) >= 10
    records = fetch_all(env, tp, 200)
    assert [r["offset"] for r in records] == list(range(200))

    merging = {
        **env,
        "PROCESSOR_MERGE_TARGET_BYTES": str(64 * 1024),
        "PROCESSOR_MERGE_SMALL_BYTES": str(16 * 1024),
        "PROCESSOR_MERGE_MIN_AGE_MS": "0",
    }
    dry = run_cli(merging, "merge", "--topic", tp.topic, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    planned = json.loads(dry.stdout)["partitions"][0]["runs_planned"]
    assert planned and view(local_stack, META, tp, PREFIX).finished == before.finished

    done = run_cli(merging, "merge", "--topic", tp.topic, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)["partitions"][0]
    after = view(local_stack, META, tp, PREFIX)
    assert len(after.finished) == report["segments_after"] < len(before.finished)
    assert coverage_gaps_and_overlaps(after.finished) == []
    assert (after.finished[0].start_offset, after.finished[-1].end_offset) == (
        before.finished[0].start_offset,
        before.finished[-1].end_offset,
    )
    assert len(after.objects) < len(before.objects)
    assert fetch_all(env, tp, 200) == records  # every record, byte-exact, at its offset
    verified = run_cli(env, "verify", "--topic", tp.topic, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr  # nothing missing, corrupt or left

    again = run_cli(merging, "merge", "--topic", tp.topic, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["partitions"][0]["runs"] == 0
    assert view(local_stack, META, tp, PREFIX).finished == after.finished

    # the broker drops them; a consumer reads them through the gateway from the merged segments
    admin = new_admin(local_stack.bootstrap_servers, "t")
    for future in admin.delete_records([KafkaTP(tp.topic, 0, 200)]).values():
        future.result(timeout=30)
    archive_env = {**local_stack.env(), "PROCESSOR_METADATA_TOPIC": META, "PROCESSOR_S3_PREFIX": PREFIX}
    got = consume_archive(archive_env, tmp_path / "gateway", tp.topic, 200, "merged")
    assert got == [(i, f"k{i}".encode(), bytes([i % 251]) * 1024) for i in range(200)]


def test_the_worker_merges_the_partitions_it_leads(local_stack: StackInfo, tmp_path: Path) -> None:
    """PROCESSOR_MERGE_CHECK_MS: the worker merges its own partitions' small segments after its
    retention passes, under its own claim, while it goes on copying; every record reads back."""
    tp = TopicPartition("merge-auto", 0)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), tp.topic, 1, 1, {})
    produce(local_stack.bootstrap_servers, tp.topic, 0, 150, int(time.time() * 1000))
    env = env_for(
        local_stack,
        tmp_path,
        tp.topic,
        PROCESSOR_WORKER_ID="merge-auto-1",
        PROCESSOR_RETENTION_CHECK_MS="500",
        PROCESSOR_MERGE_CHECK_MS="500",
        PROCESSOR_MERGE_TARGET_BYTES=str(64 * 1024),
        PROCESSOR_MERGE_SMALL_BYTES=str(16 * 1024),
        PROCESSOR_MERGE_MIN_AGE_MS="0",
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        deadline = time.monotonic() + 120
        while True:
            part = view(local_stack, META, tp, PREFIX)
            finished = part.finished
            merged = [s for s in finished if s.supersedes]
            if finished and finished[-1].end_offset >= 149 and merged and not part.part.rewritten():
                break
            assert worker.proc.poll() is None, worker.log()[-3000:]
            assert time.monotonic() < deadline, f"no merge: {len(finished)} segments, {len(merged)} merged"
            time.sleep(0.5)
        assert coverage_gaps_and_overlaps(finished) == []
    finally:
        assert worker.stop() == 0
    records = fetch_all(env, tp, 150)
    expected = [(i, base64.b64encode(f"k{i}".encode()).decode()) for i in range(150)]
    assert [(r["offset"], r["key"]) for r in records] == expected
