"""A merge while a worker leads the partition: the worker hands the partition over to the command's
operator claim and says so at INFO, naming the command's writer and claim (no "stopping at once"
warning, which is for another worker's claim), and claims it again once the command released it."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from tests.integration.lifecycle_support import produce, run_cli
from tests.integration.test_deletion_commands import META, env_for
from tests.integration.worker_process import WorkerProcess
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration


def test_a_merge_is_a_planned_hand_over_in_the_workers_log(local_stack: StackInfo, tmp_path: Path) -> None:
    tp = TopicPartition("merge-handover", 0)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), tp.topic, 1, 1, {})
    produce(local_stack.bootstrap_servers, tp.topic, 0, 60, int(time.time() * 1000))
    env = env_for(local_stack, tmp_path, tp.topic, PROCESSOR_WORKER_ID="handover-1")
    worker = WorkerProcess(env, tmp_path / "worker.log")
    try:
        wait_offloaded(local_stack.bootstrap_servers, META, {tp: 59}, 120, worker.proc)
        merging = {
            **env,
            "PROCESSOR_MERGE_TARGET_BYTES": str(64 * 1024),
            "PROCESSOR_MERGE_SMALL_BYTES": str(16 * 1024),
            "PROCESSOR_MERGE_MIN_AGE_MS": "0",
        }
        done = run_cli(merging, "merge", "--topic", tp.topic)
        assert done.returncode == 0, done.stdout + done.stderr
        claim = re.search(r"under operator claim (\d+)", done.stdout)
        assert claim is not None, done.stdout
        deadline = time.monotonic() + 60
        while "handed over to an operator command" not in worker.log():
            assert time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.2)
        time.sleep(1)  # the revocation and the claim again, logged after it
    finally:
        assert worker.stop() == 0
    log = worker.log()
    (line,) = [line for line in log.splitlines() if "handed over to an operator command" in line]
    assert " INFO " in line and f"claim {claim.group(1)}" in line and str(tp) in line, line
    assert "stopping at once" not in log
