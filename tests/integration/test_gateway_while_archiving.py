"""Consumers reading through the gateway (``archived`` reads) while the worker is still archiving the
topic: segments finish under their feet, so each partition's reads move between the broker and the
archive as they go. kafka-python, in a group, reads every record of both partitions once, in order,
byte-exact, and never throws a fetch answer away (it drops a full answer that does not name every
partition it asked for: behind Tansu, which leaves out partitions it has nothing for, the gateway's
answers did, and kafka-python read partition 0 to 728 of 1,250, then nothing more)."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from processor.config import load_settings
from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.wiring.gateway_server import GatewayServer
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.gateway_thread import gateway_running
from tests.support.metadata_watch import metadata_watch

pytestmark = pytest.mark.integration

TOPIC = "gw-live"
PARTITIONS = 2
RECORDS = 2500  # 1,250 a partition
META = "__remote_log_metadata_gw_live"
PREFIX = "gw-live"
IDLE_S = 20.0  # no record for this long: the reader stops with what it has


def _gateway_port(stack: StackInfo) -> int:
    """A free bootstrap port whose broker's port (bootstrap + 1 + node id - first) is free too."""
    brokers = new_admin(stack.bootstrap_servers, "t").list_topics(timeout=15).brokers
    first = int(stack.gateway_node_ids.partition("-")[0])
    offsets = [1 + int(node) - first for node in brokers]
    for _ in range(50):
        port = free_port()
        try:
            for offset in offsets:
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", port + offset))
        except OSError:
            continue
        return port
    raise AssertionError("no free gateway port with its brokers' ports free")


def _served(source: str) -> float:
    labels = {"topic": TOPIC, "source": source}
    return REGISTRY.get_sample_value("processor_gateway_fetch_records_total", labels) or 0.0


class _Dropped(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "invalid full fetch response" in record.getMessage():
            self.lines.append(record.getMessage())


@pytest.fixture
def gateway_and_worker(
    local_stack: StackInfo, tmp_path: Path
) -> Iterator[tuple[str, list[SampleRecord], Path]]:
    """The topic's records, a gateway (archived reads) before the broker, and a worker archiving the
    topic in small segments at a bounded rate (still archiving while a consumer reads)."""
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, PARTITIONS, 1, {})
    records = produce_samples(
        local_stack.bootstrap_servers, TOPIC, RECORDS, PARTITIONS, big_every=10**9,
        producer_config={"batch.size": 8 * 1024},
    )  # fmt: skip
    port, web = _gateway_port(local_stack), free_port()
    settings = load_settings(
        {
            **local_stack.env(),
            "PROCESSOR_METADATA_TOPIC": META,
            "PROCESSOR_S3_PREFIX": PREFIX,
            "PROCESSOR_S3_REGION": "us-east-1",
            "PROCESSOR_DATA_DIR": str(tmp_path / "gateway-data"),
            "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
            "PROCESSOR_GATEWAY_PORT": str(port),
            "PROCESSOR_GATEWAY_ARCHIVE_READS": "archived",
            "PROCESSOR_GATEWAY_NODE_IDS": local_stack.gateway_node_ids,
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(web),
        }
    )
    env = worker_env(
        local_stack, tmp_path / "worker-data", TOPIC,
        PROCESSOR_METADATA_TOPIC=META, PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_SEGMENT_BYTES=str(32 * 1024), PROCESSOR_BLOCK_BYTES=str(8 * 1024),
        PROCESSOR_SEGMENT_MS="500", PROCESSOR_UPLOAD_BYTES_PER_SECOND=str(96 * 1024),
    )  # fmt: skip
    with gateway_running(GatewayServer.build(settings)):
        worker = WorkerProcess(env, tmp_path / "worker.log")
        try:
            first = {TopicPartition(TOPIC, p): 0 for p in range(PARTITIONS)}
            with metadata_watch(local_stack.bootstrap_servers, META) as watch:
                watch.wait_offloaded(first, 60, worker.proc)  # archiving has begun: read now
            yield f"127.0.0.1:{port}", records, tmp_path
        finally:
            worker.stop()


def test_kafka_python_reads_every_record_while_segments_finish(
    gateway_and_worker: tuple[str, list[SampleRecord], Path],
) -> None:
    from kafka import KafkaConsumer

    bootstrap, records, _tmp = gateway_and_worker
    before = {source: _served(source) for source in ("archive", "broker")}
    dropped = _Dropped()  # full fetch answers kafka-python threw away (not naming every partition)
    fetcher_log = logging.getLogger("kafka.consumer.fetcher")
    fetcher_log.addHandler(dropped)
    fetcher_log.setLevel(logging.INFO)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id="gw-live-kafka-python", session_timeout_ms=6000,
        heartbeat_interval_ms=1000, auto_offset_reset="earliest", enable_auto_commit=False,
        fetch_max_wait_ms=10, max_partition_fetch_bytes=4096, max_poll_records=20,
    )  # fmt: skip
    # The topic's metadata before the group's first join: kafka-python 3.0 joining before it knows the
    # topic gets an empty first assignment, then rejoins, and on a loaded machine it sometimes stopped
    # there (it sent no request after the second SyncGroup, and its heartbeats stopped).
    assert consumer.partitions_for_topic(TOPIC) == set(range(PARTITIONS))
    consumer.subscribe([TOPIC])
    got: dict[int, list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]] = {
        p: [] for p in range(PARTITIONS)
    }
    try:
        last = time.monotonic()
        while sum(map(len, got.values())) < RECORDS and time.monotonic() - last < IDLE_S:
            for tp, messages in consumer.poll(timeout_ms=200).items():
                got[tp.partition] += [
                    (m.offset, m.key, m.value, list(m.headers), m.timestamp) for m in messages
                ]
                last = time.monotonic()
            time.sleep(0.02)  # a consumer slower than the worker's first segments: they finish as it reads
        consumer.commit()
    finally:
        consumer.close()
        fetcher_log.removeHandler(dropped)
        fetcher_log.setLevel(logging.NOTSET)
    assert dropped.lines == []
    served = {source: _served(source) - before[source] for source in before}
    assert served["archive"] > 0 and served["broker"] > 0, served  # it crossed between them as it read
    for p in range(PARTITIONS):
        want = [r for r in records if r.partition == p]
        offsets = [g[0] for g in got[p]]
        assert offsets == list(range(len(want))), (
            f"partition {p}: {len(offsets)} records, up to offset {max(offsets, default=-1)}, of {len(want)}"
        )
        for g, r in zip(got[p], want, strict=True):
            assert g[1:] == (r.key, r.value, list(r.headers), r.timestamp), f"partition {p} offset {g[0]}"
