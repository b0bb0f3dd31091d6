"""Data loss on Apache Kafka: a worker is stopped while the broker deletes offsets it had not archived.

The worker archives offsets 0..1999 and stops; 2000 more records arrive; the broker deletes
everything below 3000 (DeleteRecords, as retention would). The worker, started again, finds its
resume position 2000 below the broker's log start: offsets 2000..2999 are lost to the archive. The
loss is reported where docs/operations.md says (the log, ``processor_offsets_lost_total``), the
archive stays consistent (``processor verify``).

Not yet here: a consumer reading through the gateway from offset 0 gets 0..1999 and then waits at
2000 for good (the gateway answers a gap between archived segments with a retriable error, taking it
for a segment not applied yet; nothing in the metadata says the range was lost).
"""

from __future__ import annotations

import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack import stack
from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.cli import run_cli
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "loss-orders"
META = "__remote_log_metadata_loss"
PREFIX = "loss"
ARCHIVED = 2000
UNARCHIVED = 2000
DELETED_TO = 3000  # the broker's log start after the worker's absence: 2000..2999 are lost


@dataclass
class Lost:
    env: dict[str, str]
    worker_log: str
    worker_metrics: str
    records: list[SampleRecord]


@pytest.fixture(scope="module")
def lost(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lost]:
    if local_stack.broker != stack.KAFKA:
        pytest.skip("Tansu never deletes records: data loss needs Apache Kafka")
    tmp = tmp_path_factory.mktemp("loss")
    bootstrap = local_stack.bootstrap_servers
    ensure_topic(new_admin(bootstrap, "t"), TOPIC, 1, 1, {"retention.ms": "-1"})
    records = produce_samples(bootstrap, TOPIC, ARCHIVED, 1, big_every=0)
    env = worker_env(
        local_stack,
        tmp / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_SEGMENT_BYTES=str(128 * 1024),
        PROCESSOR_SEGMENT_MS="500",
    )
    tp = TopicPartition(TOPIC, 0)
    first = WorkerProcess(env, tmp / "worker-1.log")
    try:
        wait_offloaded(bootstrap, META, {tp: ARCHIVED - 1}, 120, first.proc)
    finally:
        first.stop()
    # in two flushes: a batch ends at 2999, so the log start 3000 is a batch's first offset (a log
    # start inside a batch is tests/unit/test_offload_engine.py's)
    half = DELETED_TO - ARCHIVED
    records += produce_samples(bootstrap, TOPIC, half, 1, start=ARCHIVED, big_every=0)
    records += produce_samples(bootstrap, TOPIC, UNARCHIVED - half, 1, start=DELETED_TO, big_every=0)
    admin = new_admin(bootstrap, "loss-delete")
    for future in admin.delete_records([KafkaTP(TOPIC, 0, DELETED_TO)]).values():
        future.result(timeout=30)
    second = WorkerProcess(env, tmp / "worker-2.log")
    try:
        wait_offloaded(bootstrap, META, {tp: len(records) - 1}, 120, second.proc)
        url = f"http://127.0.0.1:{env['PROCESSOR_WEB_PORT']}/metrics"
        metrics = urllib.request.urlopen(url, timeout=10).read().decode()
    finally:
        second.stop()
    yield Lost(env, second.log(), metrics, records)


def test_the_loss_is_logged_and_counted(lost: Lost) -> None:
    said = f"{TOPIC}-0: offsets {ARCHIVED}..{DELETED_TO - 1} ({DELETED_TO - ARCHIVED} records) were deleted"
    assert said in lost.worker_log, lost.worker_log[-3000:]
    counted = [
        float(line.rsplit(" ", 1)[1])
        for line in lost.worker_metrics.splitlines()
        if line.startswith("processor_offsets_lost_total{") and f'topic="{TOPIC}"' in line
    ]
    assert counted == [DELETED_TO - ARCHIVED]


def test_the_archive_stays_consistent(lost: Lost) -> None:
    """verify checks every archived segment: the lost range is missing from the archive, and what the
    archive holds is whole."""
    done = run_cli(lost.env, "verify", "--topic", TOPIC, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
