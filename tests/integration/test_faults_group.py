"""Two workers of one group: rebalances keep what stays, and a worker paused past its session timeout
cannot make stale metadata win (upstream: KAFKA-16890 / KAFKA-16511 overlapping segments after a
leader change, Pravega's epoch fencing, Redpanda's orphans after a lost leadership)."""

from __future__ import annotations

import re
import signal
import time
from pathlib import Path

import pytest

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from tests.integration.invariants import (
    SteadyProducer,
    expected_ends,
    running_worker,
    settled_invariants,
    wait_for_log,
)
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, worker_env
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

PARTITIONS = 4


def _env(info: StackInfo, data_dir: Path, topic: str, meta: str, worker: str, **extra: str) -> dict[str, str]:
    return worker_env(
        info,
        data_dir,
        topic,
        PROCESSOR_METADATA_TOPIC=meta,
        PROCESSOR_S3_PREFIX=topic,
        PROCESSOR_SESSION_TIMEOUT_MS=TEST_SESSION_TIMEOUT_MS,
        PROCESSOR_WORKER_ID=worker,
        PROCESSOR_APP_ID=f"app-{topic}",
        **extra,
    )


def test_a_joining_worker_leaves_the_first_workers_remaining_partitions_alone(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    topic, meta = "group-keep", "__remote_log_metadata_group_keep"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, PARTITIONS, 1, {})
    slow = {"PROCESSOR_SEGMENT_BYTES": str(64 * 1024 * 1024), "PROCESSOR_SEGMENT_MS": "600000"}
    producer = SteadyProducer(local_stack.bootstrap_servers, topic, PARTITIONS, batch=40, pause_s=0.2).start()
    try:
        with running_worker(
            _env(local_stack, tmp_path / "a", topic, meta, "keep-a", **slow), tmp_path / "a.log"
        ) as a:
            wait_for_log(a, "new, 0 revoked", 60)
            mark = len(a.log())
            with running_worker(
                _env(local_stack, tmp_path / "b", topic, meta, "keep-b", **slow), tmp_path / "b.log"
            ) as b:
                wait_for_log(b, "resuming at", 60)
                wait_for_log(a, "revoked", 60, after=mark)
                after = a.log()[mark:]
                kept = re.search(
                    r"assignment \(generation \d+\): (\d+) kept, (\d+) new, (\d+) revoked", after
                )
                assert kept, after
                n_kept, n_new, n_revoked = map(int, kept.groups())
                assert n_new == 0
                assert n_kept >= 1 and n_revoked >= 1 and n_kept + n_revoked == PARTITIONS
                # the kept partitions were neither stopped nor re-read: only the revoked ones left
                stopped = re.findall(r"stopped leading (.*)", after)
                assert len(stopped) == 1 and stopped[0].count(f"{topic}-") == n_revoked
                assert "resuming at" not in after
                # the joining worker resumed from its own follower cache, not by re-reading the topic
                assert "partitions from the follower cache" in b.log()
    finally:
        producer.stop()


PAUSES = 2  # the full run (make test-all); make test pauses the zombie once


@pytest.mark.parametrize(
    "pauses",
    [pytest.param(1, id="1-pause"), pytest.param(PAUSES, id=f"{PAUSES}-pauses", marks=pytest.mark.slow)],
)
def test_a_worker_paused_past_its_session_timeout_cannot_make_stale_metadata_win(
    local_stack: StackInfo, tmp_path: Path, pauses: int
) -> None:
    # a topic and metadata topic of each version's own: test-all runs both on one stack
    topic, meta = f"group-zombie-{pauses}", f"__remote_log_metadata_group_zombie_{pauses}"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, PARTITIONS, 1, {})
    fast = {
        "PROCESSOR_SEGMENT_BYTES": str(48 * 1024),
        "PROCESSOR_BLOCK_BYTES": str(8 * 1024),
        "PROCESSOR_SEGMENT_MS": "200",
    }
    producer = SteadyProducer(
        local_stack.bootstrap_servers, topic, PARTITIONS, batch=300, pause_s=0.05
    ).start()
    env_a = _env(local_stack, tmp_path / "a", topic, meta, "zombie-a", **fast)
    env_b = _env(local_stack, tmp_path / "b", topic, meta, "zombie-b", **fast)
    try:
        with running_worker(env_a, tmp_path / "a.log") as a, running_worker(env_b, tmp_path / "b.log") as b:
            wait_for_log(a, "resuming at", 60)
            wait_for_log(b, "resuming at", 60)
            mark = 0
            for _ in range(pauses):
                wait_for_log(a, "segment copied", 60, after=mark)  # a leads and copies
                a.proc.send_signal(signal.SIGSTOP)  # mid-copy: segments roll every 200 ms
                time.sleep(8)  # the fault: paused past the 3 s session timeout, b takes every partition
                mark = len(a.log())
                a.proc.send_signal(signal.SIGCONT)
            # the zombie wakes with its stale view, is fenced and rejoins while records keep arriving
            wait_for_log(a, "Joined group", 60, after=mark)
            counts = producer.stop()
            ends = expected_ends(counts, topic)
            wait_offloaded(local_stack.bootstrap_servers, meta, ends, 120, b.proc)
            assert a.proc.poll() is None and b.proc.poll() is None
    finally:
        producer.stop()
    # the partitions' next leader cleans what the zombie left (dangling copies, superseded segments)
    with running_worker(
        _env(local_stack, tmp_path / "c", topic, meta, "zombie-c", **fast), tmp_path / "c.log"
    ) as c:
        wait_for_log(c, "resuming at", 60)
        found = settled_invariants(local_stack, meta, topic, ends, 60, c)
    assert not found.problems, "\n".join(found.problems[:20])
