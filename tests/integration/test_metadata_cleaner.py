"""Apache Kafka's own log cleaner on the metadata topic while workers copy, fail over and delete by
retention: a follower that starts from the topic after the cleaner ran serves exactly what the live
follower (which read every record as it came) serves, and nothing acknowledged is lost or unserved.

The metadata topic rolls its segments every 200 ms and is cleaned as soon as 1 % of it is dirty, its
tombstones kept 100 ms. With the documented ``min.compaction.lag.ms`` (a day: the worker raises it
at start) the cleaner leaves the records it would need for a day alone; with a hostile zero (set by
an operator after the worker started) it cleans them as soon as it can.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import NewTopic  # type: ignore[attr-defined]

from processor.devstack import stack
from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic, set_topic_config
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import load_remote_state
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.metadata_watch import metadata_watch

pytestmark = pytest.mark.integration

PARTITIONS = 2
CLEANED = "cleaned log"  # Kafka's log cleaner, at INFO: "Log cleaner thread 0 cleaned log T-P ..."


def _served(state: PartitionRemoteState) -> tuple[int, list[tuple[str, int, int]]]:
    return state.log_start_offset, [
        (str(s.segment_id), s.start_offset, s.end_offset) for s in state.finished()
    ]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("lag", ["documented", "hostile-zero"])
def test_a_follower_started_after_the_cleaner_serves_what_the_live_follower_serves(
    local_stack: StackInfo, tmp_path: Path, lag: str
) -> None:
    if local_stack.broker != stack.KAFKA:
        pytest.skip("Tansu has no log cleaner")
    bootstrap = local_stack.bootstrap_servers
    topic, meta = f"cleaner-{lag}", f"__remote_log_metadata_cleaner_{lag}"
    admin = new_admin(bootstrap, "cleaner")
    config = {
        "cleanup.policy": "compact", "segment.ms": "200", "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "100", "min.compaction.lag.ms": "0",
    }  # fmt: skip
    admin.create_topics([NewTopic(meta, 2, 1, config=config)])[meta].result(timeout=30)
    ensure_topic(admin, topic, PARTITIONS, 1, {})
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    env = {
        "PROCESSOR_METADATA_TOPIC": meta, "PROCESSOR_S3_PREFIX": f"cleaner-{lag}",
        "PROCESSOR_APP_ID": f"cleaner-{lag}", "PROCESSOR_SEGMENT_BYTES": str(16 * 1024),
        "PROCESSOR_BLOCK_BYTES": str(4 * 1024), "PROCESSOR_SEGMENT_MS": "300",
        "PROCESSOR_REMOTE_RETENTION_BYTES": str(96 * 1024), "PROCESSOR_RETENTION_CHECK_MS": "500",
    }  # fmt: skip
    with metadata_watch(bootstrap, meta) as live:
        first = WorkerProcess(worker_env(local_stack, tmp_path / "a", topic, **env), tmp_path / "a.log")
        second: WorkerProcess | None = None
        try:
            produced = produce_samples(bootstrap, topic, 1500, PARTITIONS, big_every=0)
            ends = {tp: sum(1 for r in produced if r.partition == tp.partition) - 1 for tp in tps}
            live.wait_offloaded(ends, 120, first.proc)
            if lag == "hostile-zero":  # the worker raised it to a day at its start: an operator lowers it
                set_topic_config(admin, meta, "min.compaction.lag.ms", "0")
            # a second worker joins (a rebalance), the first is killed (a failover), more records
            second = WorkerProcess(worker_env(local_stack, tmp_path / "b", topic, **env), tmp_path / "b.log")
            produced += produce_samples(bootstrap, topic, 1500, PARTITIONS, start=1500, big_every=0)
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait(30)
            ends = {tp: sum(1 for r in produced if r.partition == tp.partition) - 1 for tp in tps}
            live.wait_offloaded(ends, 150, second.proc)

            # remote retention (96 KiB a partition) has deleted the first segments
            def retention_deleted() -> bool:
                return all(live.remote_state(tp).log_start_offset > 0 for tp in tps)

            live.wait_until("remote retention deleting", retention_deleted, 60, second.proc)
            if lag == "hostile-zero":
                kafka_log = Path(local_stack.dir) / "kafka.log"
                deadline = time.monotonic() + 90
                while f"{CLEANED} {meta}-" not in kafka_log.read_text(errors="replace"):
                    assert time.monotonic() < deadline, "Kafka's log cleaner did not clean the metadata topic"
                    time.sleep(0.5)
            second.stop()  # the topic quiet: the live follower applies the last records, then compare
            fresh, _skipped = load_remote_state(bootstrap, meta)  # a follower from the topic, now

            def same_as_fresh() -> bool:
                return all(_served(fresh.partition(tp)) == _served(live.remote_state(tp)) for tp in tps)

            try:
                live.wait_until("the live follower serving what a fresh one serves", same_as_fresh, 30)
            except TimeoutError:
                for tp in tps:
                    assert _served(fresh.partition(tp)) == _served(live.remote_state(tp)), tp
            for tp in tps:
                assert fresh.partition(tp).highest_finished_offset() == ends[tp]  # nothing acknowledged lost
        finally:
            for worker in (first, second):
                if worker is not None:
                    worker.stop()
