"""Remote retention in a real worker: by size (with failing S3 deletes that drain through the
deletion topic) and by time, deleting exactly the right segments and objects."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_topic import DeletionTopic
from processor.metadata.model import SegmentState
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from processor.metadata.topic_io import DurableProducer
from tests.integration.lifecycle_support import produce, view, wait_for
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.fault_proxy import FaultProxy, error_rule

pytestmark = pytest.mark.integration

META = "__remote_log_metadata_retention"
DELETIONS = "__remote_segments_to_be_deleted_retention"
SIZED = TopicPartition("ret-size", 0)
TIMED = TopicPartition("ret-time", 0)
LIMIT = 40 * 1024
DAY = 86_400_000
PREFIX = "ret"


def test_retention_by_size_and_time_with_failed_deletes_draining(
    local_stack: StackInfo, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    admin = new_admin(local_stack.bootstrap_servers, "t")
    for tp in (SIZED, TIMED):
        ensure_topic(admin, tp.topic, 1, 1, {})
    env = worker_env(
        local_stack,
        tmp_path / "data",
        f"{SIZED.topic},{TIMED.topic}",
        PROCESSOR_S3_ENDPOINT_URL=fault_proxy.endpoint_url,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_METADATA_PARTITIONS="2",
        PROCESSOR_DELETION_TOPIC=DELETIONS,
        PROCESSOR_SEGMENT_BYTES=str(12 * 1024),
        PROCESSOR_BLOCK_BYTES="4096",
        PROCESSOR_SEGMENT_MS="800",
        PROCESSOR_BUFFER_BYTES=str(4 * 1024 * 1024),
        PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_WORKER_ID="ret-1",
        PROCESSOR_REMOTE_RETENTION_BYTES=str(LIMIT),
        PROCESSOR_REMOTE_RETENTION_OVERRIDES=f"{TIMED.topic}=ms:{DAY},{TIMED.topic}=bytes:-1",
        PROCESSOR_RETENTION_CHECK_MS="1000",
    )
    # Every delete of the size-limited topic's objects fails (non-retriable) until the rule goes: the
    # deleter's batch deletes (DeleteObjects, whose body names the keys) and single ones alike.
    failing = fault_proxy.add_rule(
        error_rule(
            {"delete", "delete_objects"},
            status=403,
            code="AccessDenied",
            path_contains=f"{PREFIX}/{SIZED.topic}-",  # its topic-id folder
        )
    )
    now = int(time.time() * 1000)
    produce(local_stack.bootstrap_servers, TIMED.topic, 0, 60, now - 3 * DAY)  # old records
    produce(local_stack.bootstrap_servers, SIZED.topic, 0, 150, now)
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        # the old records of the timed topic are offloaded, then newer ones arrive
        wait_for(
            "old records offloaded",
            lambda: (view(local_stack, META, TIMED, PREFIX).part.highest_finished_offset() or -1) >= 59,
            120,
            worker.proc,
        )
        produce(local_stack.bootstrap_servers, TIMED.topic, 0, 30, int(time.time() * 1000))

        deletions = DeletionTopic(
            local_stack.bootstrap_servers,
            DELETIONS,
            2,
            DurableProducer(local_stack.bootstrap_servers, "t-deletions"),
        )
        wait_for(
            "failed deletions on the deletion topic",
            lambda: bool(deletions.pending({SIZED})),
            120,
            worker.proc,
        )
        assert failing.applied > 0
        fault_proxy.clear_rules()

        def size_settled() -> bool:
            v = view(local_stack, META, SIZED, PREFIX)
            return (
                (v.part.highest_finished_offset() or -1) >= 149
                and sum(s.segment_size_in_bytes for s in v.finished) <= LIMIT
                and not any(s.state is SegmentState.DELETE_SEGMENT_STARTED for s in v.live)
                and v.objects == v.referenced
                and not deletions.pending({SIZED})
            )

        wait_for("size retention settled and failed deletions drained", size_settled, 180, worker.proc)

        def time_settled() -> bool:
            v = view(local_stack, META, TIMED, PREFIX)
            return (
                (v.part.highest_finished_offset() or -1) >= 89
                and bool(v.deleted)
                and v.objects == v.referenced
            )

        wait_for("time retention settled", time_settled, 120, worker.proc)
        metrics_text = worker_metrics(env)
    finally:
        worker.stop()

    # size: the oldest went, the kept suffix is the largest that fits the limit
    v = view(local_stack, META, SIZED, PREFIX)
    kept, gone = v.finished, v.deleted
    assert kept and gone and coverage_gaps_and_overlaps(kept) == []
    assert max(s.end_offset for s in gone) < kept[0].start_offset, "only the oldest are deleted"
    kept_bytes = sum(s.segment_size_in_bytes for s in kept)
    assert kept_bytes <= LIMIT < kept_bytes + gone[-1].segment_size_in_bytes
    assert v.part.log_start_offset == kept[0].start_offset
    assert v.objects == v.referenced, "no object in the bucket that no live segment references"

    # time: exactly the segments of the old records went
    t = view(local_stack, META, TIMED, PREFIX)
    assert max(s.end_offset for s in t.deleted) == 59
    assert all(s.max_timestamp_ms < now - DAY for s in t.deleted)
    assert t.finished and all(s.max_timestamp_ms >= now for s in t.finished)
    assert min(s.start_offset for s in t.finished) == 60 and t.part.log_start_offset == 60
    assert t.objects == t.referenced

    assert "processor_remote_delete_failures_total" in metrics_text
    failures = float(
        next(
            line.split()[-1]
            for line in metrics_text.splitlines()
            if line.startswith("processor_remote_delete_failures_total ")
        )
    )
    assert failures >= 1
    assert 'processor_remote_segments_deleted_total{reason="time"}' in metrics_text
    # the size-limited topic's deletions all failed first, so they were finished as retries
    assert 'processor_remote_segments_deleted_total{reason="retry"}' in metrics_text


def worker_metrics(env: dict[str, str]) -> str:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{env['PROCESSOR_WEB_PORT']}/metrics", timeout=10) as resp:
        return str(resp.read().decode())
