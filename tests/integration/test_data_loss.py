"""Data loss on Apache Kafka: a worker is stopped while the broker deletes offsets it had not archived.

The worker archives offsets 0..1999 and stops; 2000 more records arrive; the broker deletes
everything below 3000 (DeleteRecords, as retention would). The worker, started again, finds its
resume position 2000 below the broker's log start: offsets 2000..2999 are lost to the archive. The
loss is reported where docs/operations.md says (the log, ``processor_offsets_lost_total``, the
audit's ``offset_gap`` naming exactly 2000..2999), the archive stays consistent (``processor verify``).

Consumers in a group through the gateway (its default ``below-log-start`` mode) read from offset 0:
every archived record once, byte-exact, then step over 2000..2999 as the broker's reset would (a
fetch in the lost range is answered from the batch at 3000, as over a compacted topic's gap), and
read on to the end without stalling; nothing is invented for the lost offsets.
"""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack import stack
from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.spark.audit.rules import state_findings
from processor.spark.fold_adapter import partition_archive
from processor.wiring.gateway_server import GatewayServer
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.cli import run_cli
from tests.support.consumers import Seen, read_confluent, read_kafka_python
from tests.support.gateway_thread import gateway_running, loopback_gateway
from tests.support.metadata_watch import metadata_watch, wait_offloaded

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
    records: list[SampleRecord]  # offset i is records[i]; 2000..2999 are lost to the archive
    tmp: Path


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
    yield Lost(env, second.log(), metrics, records, tmp)


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


def test_the_audit_names_exactly_the_lost_range(lost: Lost) -> None:
    """The audit's checks over the metadata (the fold's view, no Spark needed for them): one
    ``offset_gap`` error, offsets 2000..2999, and nothing else."""
    tp = TopicPartition(TOPIC, 0)
    with metadata_watch(lost.env["PROCESSOR_BOOTSTRAP_SERVERS"], META) as watch:
        watch.wait_offloaded({tp: len(lost.records) - 1}, 60)
        archive = partition_archive(tp, watch.remote_state(tp))
    findings = state_findings([archive], int(time.time() * 1000), 3_600_000)
    assert [(f.kind, f.start_offset, f.end_offset) for f in findings] == [
        ("offset_gap", ARCHIVED, DELETED_TO - 1)
    ], findings


@pytest.mark.parametrize(
    ("client", "read"),
    [("confluent", read_confluent), ("kafka-python", read_kafka_python)],
    ids=["confluent-kafka", "kafka-python"],
)
def test_consumers_through_the_gateway_step_over_the_lost_range(
    lost: Lost, client: str, read: Callable[[str, str, str, int], list[Seen]]
) -> None:
    """From offset 0 through the gateway: 0..1999 from the archive, then 3000..3999 (from the archive
    at first: 2000 is below the broker's log start), each once, byte-exact; no record for 2000..2999
    and no stall there (the readers stop after 60 s without a record)."""
    gateway = loopback_gateway(
        {**lost.env, "PROCESSOR_METADATA_TOPIC": META, "PROCESSOR_S3_PREFIX": PREFIX},
        lost.tmp / f"gateway-{client}",
    )
    assert gateway.settings.gateway_archive_reads == "below-log-start"  # the default, under test here
    want = ARCHIVED + len(lost.records) - DELETED_TO
    with gateway_running(GatewayServer.build(gateway.settings)):
        began = time.monotonic()
        got = read(gateway.bootstrap, f"loss-{client}", TOPIC, want)
        took = time.monotonic() - began
        metrics = urllib.request.urlopen(f"{gateway.web}/metrics", timeout=10).read().decode()
    waited = [
        line
        for line in metrics.splitlines()
        if line.startswith("processor_gateway_errors_total{") and "not_in_archive_yet" in line
    ]
    assert all(float(line.rsplit(" ", 1)[1]) == 0 for line in waited), waited
    offsets = [g[1] for g in got]
    assert offsets == [*range(ARCHIVED), *range(DELETED_TO, len(lost.records))], (
        f"{client}: {len(got)} records, offsets {offsets[:3]}..{offsets[-3:]}"
    )
    for g in got:
        r = lost.records[g[1]]
        assert (g[2], g[3], g[4], g[5]) == (r.key, r.value, list(r.headers), r.timestamp), (
            f"{client}: offset {g[1]} differs"
        )
    assert took < 55, f"{client}: {took:.0f} s to read {want} records (waited at the lost range?)"
