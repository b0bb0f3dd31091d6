"""kill -9 of the worker at random points of the copy path, again and again, while records keep
arriving (upstream: Kafka's tiered-storage "offload and consume after a restart", KAFKA-17062 /
KAFKA-17428 dangling copies finished or cleaned by the next leader; Redpanda's closing scrub)."""

from __future__ import annotations

import random
import time
from pathlib import Path

import pytest

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from tests.integration.invariants import (
    SteadyProducer,
    check_invariants,
    expected_ends,
    jitter,
    running_worker,
    wait_for_log,
)
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, WorkerProcess, worker_env
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

KILLS = 10  # the full soak (make test-all); make test kills twice


@pytest.mark.parametrize(
    "kills", [pytest.param(2, id="2-kills"), pytest.param(KILLS, id=f"{KILLS}-kills", marks=pytest.mark.slow)]
)
def test_kill_9_at_random_points_leaves_every_record_once_and_nothing_leaked(
    local_stack: StackInfo, tmp_path: Path, kills: int
) -> None:
    # a topic, metadata topic and prefix of each version's own: test-all runs both on one stack
    topic = prefix = f"faults-kill-{kills}"
    meta = f"__remote_log_metadata_faults_kill_{kills}"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, 3, 1, {})
    env = worker_env(
        local_stack,
        tmp_path / "data",
        topic,
        PROCESSOR_METADATA_TOPIC=meta,
        PROCESSOR_S3_PREFIX=prefix,
        PROCESSOR_SEGMENT_BYTES=str(64 * 1024),
        PROCESSOR_BLOCK_BYTES=str(8 * 1024),
        PROCESSOR_SEGMENT_MS="200",
        PROCESSOR_BUFFER_BYTES=str(8 * 1024 * 1024),
        PROCESSOR_SESSION_TIMEOUT_MS=TEST_SESSION_TIMEOUT_MS,
        PROCESSOR_WORKER_ID="kill-target",
        PROCESSOR_FOLLOWER_ENABLED="false",
    )
    rng = random.Random(8)
    producer = SteadyProducer(local_stack.bootstrap_servers, topic, 3, batch=300, pause_s=0.05).start()
    killed_while_leading = 0
    try:
        for i in range(kills):
            worker = WorkerProcess(env, tmp_path / f"worker{i}.log")
            try:
                wait_for_log(worker, "leading ", 60)
                time.sleep(jitter(rng, 0.2, 2.5))  # the fault: a kill at a random point of the copy path
                killed_while_leading += "resuming at" in worker.log()
            finally:
                worker.proc.kill()
                worker.proc.wait()
    finally:
        counts = producer.stop()
    assert killed_while_leading == kills

    ends = expected_ends(counts, topic)
    with running_worker(env, tmp_path / "final.log") as final:
        wait_offloaded(local_stack.bootstrap_servers, meta, ends, 150, final.proc)
    found = check_invariants(local_stack, meta, prefix, ends)
    assert not found.problems, "\n".join(found.problems[:20])
    assert found.objects == 2 * sum(found.served.values())
    assert found.manifests <= sum(found.served.values())  # each a served segment's (checked above)
