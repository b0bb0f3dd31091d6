"""The copy lag tells the truth when fetching stalls, on a real broker.

A Tansu broker of its own advertises the address of a Kafka-aware proxy (tests/integration/
kafka_gate.py), so every connection of the worker goes through it. Once the worker has copied what
the topic holds (lag 0), the proxy holds back every Fetch request while everything else passes
(metadata, ListOffsets, produce, the consumer group). Records produced meanwhile are never fetched:
the copy lag in records still rises to exactly their count, because the worker asks the broker for
the high watermark on a schedule of its own, and the lag in seconds grows. When fetches pass
again, the records are copied and the lag returns to 0. (Before, the lag came from the last fetch
response and stayed at 0 through the whole stall.)

Records are produced one per batch: Tansu 0.6 answers ListOffsets(latest) with the last batch's base
offset + 1, not the offset after its last record (seen here: 10-record batches up to offset 299 gave
291); with one record per batch the two agree, as they do on Kafka.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.devstack import servers
from processor.devstack.sample_data import produce_samples
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from tests.integration.kafka_gate import FETCH, LIST_OFFSETS, KafkaGate
from tests.integration.test_operability import http_get, wait_status
from tests.integration.worker_process import start_web_worker

pytestmark = pytest.mark.integration

TOPIC = "lag-stall"
META = "__remote_log_metadata_lag_stall"
FIRST, STALLED = 200, 300  # records produced before and during the stall
ONE_PER_BATCH = {"batch.num.messages": 1, "linger.ms": 0}  # see the module's docstring


@pytest.fixture
def gated_broker(tmp_path: Path) -> Iterator[KafkaGate]:
    """A Tansu broker reachable only through a KafkaGate (it advertises the gate's address)."""
    broker_port = free_port()
    gate = KafkaGate("127.0.0.1", broker_port)
    with (tmp_path / "tansu.log").open("ab") as log:
        tansu = subprocess.Popen(
            [
                str(servers.tansu_binary()),
                "broker",
                "--listener-url", f"tcp://127.0.0.1:{broker_port}",
                "--advertised-listener-url", f"tcp://{gate.address}",
                "--storage-engine", "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip
    gate.start()
    try:
        deadline = time.monotonic() + 60
        admin = new_admin(gate.address, "gate-check")
        while True:
            try:
                admin.list_topics(timeout=2)
                break
            except Exception:
                assert tansu.poll() is None, "tansu exited during start"
                assert time.monotonic() < deadline, "tansu did not answer through the gate"
                time.sleep(0.2)
        yield gate
    finally:
        gate.close()
        tansu.terminate()
        try:
            tansu.wait(20)
        except subprocess.TimeoutExpired:
            tansu.kill()
            tansu.wait()


def _gauge(base: str, name: str) -> float | None:
    for line in http_get(f"{base}/metrics")[2].decode().splitlines():
        match = re.fullmatch(rf"{name}\{{([^}}]*)\}} ([0-9.e+-]+)", line)
        if match and set(match.group(1).split(",")) == {f'topic="{TOPIC}"', 'partition="0"'}:
            return float(match.group(2))
    return None


def _wait_gauge(base: str, name: str, check, timeout_s: float, what: str) -> float:
    deadline = time.monotonic() + timeout_s
    value = None
    while time.monotonic() < deadline:
        value = _gauge(base, name)
        if value is not None and check(value):
            return value
        time.sleep(0.5)
    lines = [line for line in http_get(f"{base}/metrics")[2].decode().splitlines() if name in line]
    raise AssertionError(f"{name} did not become {what} within {timeout_s} s; last {value}; {lines}")


def test_copy_lag_rises_while_fetches_are_stalled(local_stack: StackInfo, gated_broker: KafkaGate, tmp_path):
    gate = gated_broker
    ensure_topic(new_admin(gate.address, "t"), TOPIC, 1, 1, {})
    produce_samples(gate.address, TOPIC, FIRST, 1, big_every=100_000, producer_config=ONE_PER_BATCH)
    worker, base = start_web_worker(
        local_stack,
        tmp_path,
        TOPIC,
        PROCESSOR_BOOTSTRAP_SERVERS=gate.address,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_S3_PREFIX="lag-stall",
    )
    try:
        wait_status(f"{base}/readyz", 200, 120)
        _wait_gauge(base, "processor_remote_copy_lag_records", lambda v: v == 0, 120, "0 (all copied)")
        assert _gauge(base, "processor_remote_end_offset") == FIRST - 1

        gate.stall(FETCH)
        produce_samples(
            gate.address, TOPIC, STALLED, 1, start=FIRST, big_every=100_000, producer_config=ONE_PER_BATCH
        )
        lag = _wait_gauge(
            base, "processor_remote_copy_lag_records", lambda v: v >= STALLED, 60, f">= {STALLED}"
        )
        assert lag == STALLED  # exactly the records produced during the stall
        assert gate.held >= 1 and gate.seen.get(LIST_OFFSETS, 0) >= 1  # fetches held, ListOffsets answered
        first = _wait_gauge(base, "processor_remote_copy_lag_seconds", lambda v: v > 0, 30, "> 0")
        _wait_gauge(base, "processor_remote_copy_lag_seconds", lambda v: v >= first + 2, 30, "growing")
        assert _gauge(base, "processor_remote_end_offset") == FIRST - 1  # nothing new copied meanwhile

        gate.release(FETCH)
        _wait_gauge(base, "processor_remote_copy_lag_records", lambda v: v == 0, 120, "0 again")
        assert _gauge(base, "processor_remote_end_offset") == FIRST + STALLED - 1
        _wait_gauge(base, "processor_remote_copy_lag_seconds", lambda v: v == 0, 60, "0 again")
    finally:
        worker.stop()
