"""S3 faults through the fault-injecting proxy, on the real stack (upstream: Aiven's mock-S3 fault
tests with 500s, throttling, failed upload parts and timeouts; KAFKA-17062 / KAFKA-17428 cleanup of
failed copies and deletes; Redpanda's closing scrub)."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from tests.integration.invariants import expected_ends, running_worker, settled_invariants, wait_for_log
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, worker_env
from tests.support.fault_proxy import FaultProxy, FaultRule, error_rule, slowdown_rule
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

MiB = 1024 * 1024


def _env(info: StackInfo, data_dir: Path, topic: str, meta: str, prefix: str, **extra: str) -> dict[str, str]:
    return worker_env(
        info,
        data_dir,
        topic,
        PROCESSOR_METADATA_TOPIC=meta,
        PROCESSOR_S3_PREFIX=prefix,
        PROCESSOR_SESSION_TIMEOUT_MS=TEST_SESSION_TIMEOUT_MS,
        PROCESSOR_COPY_RETRY_BACKOFF_MAX_MS="2000",
        PROCESSOR_FOLLOWER_ENABLED="false",
        **extra,
    )


def test_s3_errors_throttling_lost_answers_failed_parts_and_deletes(
    local_stack: StackInfo, proxied_stack: StackInfo, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    topic, meta, prefix = "faults-s3", "__remote_log_metadata_faults_s3", "faults-s3"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, 2, 1, {})
    produced = produce_samples(local_stack.bootstrap_servers, topic, 6000, 2, big_every=500)
    ends = expected_ends(Counter(r.partition for r in produced), topic)
    writes = {"put", "upload_part", "complete_multipart", "create_multipart"}
    rules = [
        # copies that fail for good at the processor (the SDK's retries exhausted): the index
        # upload fails, and so does the cleanup's first delete, which leaves a DELETE_SEGMENT_STARTED
        FaultRule("error", frozenset({"put"}), path_contains=".log-index", limit=12),
        FaultRule("error", frozenset({"delete"}), limit=6),
        # answers lost after the object was stored (the SDK's retry then meets 412), a failed part
        FaultRule("drop", frozenset({"put", "complete_multipart"}), limit=3),
        error_rule({"upload_part"}, limit=1),
        error_rule(writes, share=0.15),
        slowdown_rule(writes | {"head", "get"}, share=0.1),
        error_rule({"delete"}, share=0.2),
        FaultRule("delay", frozenset({"put", "upload_part"}), share=0.1, delay_s=0.5),
    ]
    for rule in rules:
        fault_proxy.add_rule(rule)
    env = _env(
        proxied_stack,
        tmp_path / "data",
        topic,
        meta,
        prefix,
        PROCESSOR_SEGMENT_BYTES=str(6 * MiB),
        PROCESSOR_S3_PART_BYTES=str(5 * MiB),
        PROCESSOR_BLOCK_BYTES=str(256 * 1024),
        PROCESSOR_SEGMENT_MS="1000",
        PROCESSOR_BUFFER_BYTES=str(32 * MiB),
    )
    with running_worker(env, tmp_path / "worker.log") as worker:
        wait_offloaded(local_stack.bootstrap_servers, meta, ends, 150, worker.proc)
    faulted = dict(fault_proxy.stats.faulted)
    # two copies failed for good (the SDK makes 6 attempts) and the first one's cleanup too
    assert rules[0].applied == 12 and rules[1].applied == 6, faulted
    assert fault_proxy.stats.forwarded["upload_part"] > 0, "no multipart upload happened"
    assert any(kind == "upload_part" for kind, _action in faulted), faulted
    assert any(action == "drop" for _kind, action in faulted), faulted
    fault_proxy.clear_rules()
    # The next leader of the partitions cleans what the failed deletes left (its assignment).
    with running_worker(env, tmp_path / "next.log") as nxt:
        wait_for_log(nxt, "resuming at", 60)
        found = settled_invariants(local_stack, meta, prefix, ends, 60, nxt)
    assert not found.problems, "\n".join(found.problems[:20])


def _rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_s3_down_fills_the_buffer_pauses_within_memory_and_resumes(
    local_stack: StackInfo, proxied_stack: StackInfo, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    topic, meta, prefix = "faults-s3-down", "__remote_log_metadata_faults_s3_down", "faults-s3-down"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, 2, 1, {})
    bound = 4 * MiB
    env = _env(
        proxied_stack,
        tmp_path / "data",
        topic,
        meta,
        prefix,
        PROCESSOR_SEGMENT_BYTES=str(256 * 1024),
        PROCESSOR_BLOCK_BYTES=str(32 * 1024),
        PROCESSOR_SEGMENT_MS="500",
        PROCESSOR_BUFFER_BYTES=str(bound),
    )
    with running_worker(env, tmp_path / "worker.log") as worker:
        wait_for_log(worker, "resuming at", 60)
        fault_proxy.down("refuse")
        produced = produce_samples(local_stack.bootstrap_servers, topic, 30_000, 2, big_every=0)
        wait_for_log(worker, "consumption paused", 60)
        first = _rss_bytes(worker.proc.pid)
        time.sleep(5)  # the fault goes on: S3 stays down for 5 s while the worker's memory is watched
        later = _rss_bytes(worker.proc.pid)
        # ~20 MB were produced; the worker holds at most the bound plus librdkafka's prefetch
        # queue (16 MiB at this bound) and does not grow while S3 stays down.
        assert later - first < 24 * MiB, (first, later)
        assert later < 400 * MiB, later
        fault_proxy.up()
        ends = expected_ends(Counter(r.partition for r in produced), topic)
        wait_offloaded(local_stack.bootstrap_servers, meta, ends, 150, worker.proc)
        assert "consumption resumed" in worker.log()
    with running_worker(env, tmp_path / "next.log") as nxt:
        wait_for_log(nxt, "resuming at", 60)
        found = settled_invariants(local_stack, meta, prefix, ends, 60, nxt)
    assert not found.problems, "\n".join(found.problems[:20])
