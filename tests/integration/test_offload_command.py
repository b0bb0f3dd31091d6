"""``processor offload``: the open segment of a partition is rolled and copied on request, long
before its size or time would roll it (PIP-17's admin-triggered offload)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from tests.integration.lifecycle_support import produce, run_cli, view, wait_for
from tests.integration.worker_process import WorkerProcess, worker_env

pytestmark = pytest.mark.integration

META = "__remote_log_metadata_offload_cmd"


def test_offload_rolls_and_copies_the_open_segment_now(local_stack: StackInfo, tmp_path: Path) -> None:
    tp = TopicPartition("offload-now", 0)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), tp.topic, 1, 1, {})
    produce(local_stack.bootstrap_servers, tp.topic, 0, 50, int(time.time() * 1000))
    env = worker_env(
        local_stack,
        tmp_path / "data",
        tp.topic,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_SEGMENT_MS="3600000",  # nothing would roll by itself during the test
        PROCESSOR_S3_PREFIX="offload",
        PROCESSOR_WORKER_ID="offload-1",
    )
    url = f"http://127.0.0.1:{env['PROCESSOR_WEB_PORT']}"
    unreachable = run_cli(
        env,
        "offload",
        "--topic",
        tp.topic,
        "--worker-url",
        f"http://127.0.0.1:{free_port()}",
        "--timeout-s",
        "1",
    )
    assert unreachable.returncode == 3 and "unreachable" in unreachable.stderr
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        # asked at once: the command waits for the worker's web server, then for its leadership
        result = run_cli(env, "offload", "--topic", tp.topic, "--worker-url", url, "--timeout-s", "90")
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"{tp}: offloaded (remote end 49, target 49)" in result.stdout
        assert (view(local_stack, META, tp, "offload").part.highest_finished_offset() or -1) == 49
        bad = run_cli(env, "offload", "--topic", "a/b", "--worker-url", url)
        assert bad.returncode == 2 and "invalid topic name" in bad.stderr
        wait_for("worker still up", lambda: worker.proc.poll() is None, 1)
    finally:
        worker.stop()
