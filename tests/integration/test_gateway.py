"""The Kafka-protocol gateway on the real stack: unmodified Kafka clients read a partition's archived
offsets from the archive and the rest from the broker, through one bootstrap address.

One archive for the module: a worker offloads the first records of a topic and stops; more records
are produced after it (the broker alone has them). The gateway runs in this process (its asyncio
loop in a thread) with ``archived`` reads, so archived offsets come from the bucket even though
Tansu never truncates its log.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP

from processor.config import load_settings
from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.wiring.gateway_server import GatewayServer
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.consumers import (
    Seen,
    committed_offsets,
    read_aiokafka,
    read_confluent,
    read_kafka_python,
    read_kcat,
)
from tests.support.gateway_thread import gateway_running
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "gw-orders"
PARTITIONS = 2
ARCHIVED = 1200  # records offloaded, then the worker stops
TAIL = 400  # records produced after: only the broker has them
TXN = "gw-txn"  # transactions: some committed, some aborted, all archived
META = "__remote_log_metadata_gw"
# Tansu answers a JoinGroup after half the member's session timeout (librdkafka's default 45 s would
# make every group join here wait 22 s).
SESSION_MS = 6000
PREFIX = "gw"


@dataclass
class RunningGateway:
    bootstrap: str
    web: str
    direct: str  # the broker's own address
    by_partition: dict[int, list[SampleRecord]]
    archived_end: dict[int, int]  # last archived offset per partition
    txn_committed: list[tuple[int, bytes | None, bytes | None]]  # what read_committed sees of TXN


@pytest.fixture(scope="module")
def gateway(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    tmp = tmp_path_factory.mktemp("gateway")
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, PARTITIONS, 1, {})
    first = produce_samples(
        local_stack.bootstrap_servers, TOPIC, ARCHIVED, PARTITIONS, big_every=10**9,
        producer_config={"batch.size": 16 * 1024},
    )  # fmt: skip
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TXN, 1, 1, {})
    _produce_transactions(local_stack.bootstrap_servers)
    txn_committed = _read_committed(local_stack.bootstrap_servers)
    env = worker_env(
        local_stack,
        tmp / "data",
        f"{TOPIC},{TXN}",
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_SEGMENT_BYTES=str(64 * 1024),
        PROCESSOR_BLOCK_BYTES=str(16 * 1024),
        PROCESSOR_SEGMENT_MS="500",
    )
    by_partition: dict[int, list[SampleRecord]] = {p: [] for p in range(PARTITIONS)}
    for r in first:
        by_partition[r.partition].append(r)
    ends = {TopicPartition(TOPIC, p): len(rs) - 1 for p, rs in by_partition.items()}
    txn_end = _high_watermark(local_stack.bootstrap_servers, TXN) - 1  # its last commit or abort marker
    worker = WorkerProcess(env, tmp / "worker.log")
    try:
        wait_offloaded(
            local_stack.bootstrap_servers, META, {**ends, TopicPartition(TXN, 0): txn_end}, 180, worker.proc
        )
    finally:
        worker.stop()
    for r in produce_samples(
        local_stack.bootstrap_servers, TOPIC, TAIL, PARTITIONS, start=ARCHIVED, big_every=10**9
    ):
        by_partition[r.partition].append(r)
    port, web = free_port(), free_port()
    settings = load_settings(
        {
            **local_stack.env(),
            "PROCESSOR_METADATA_TOPIC": META,
            "PROCESSOR_S3_PREFIX": PREFIX,
            "PROCESSOR_S3_REGION": "us-east-1",
            "PROCESSOR_DATA_DIR": str(tmp / "gateway-data"),
            "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
            "PROCESSOR_GATEWAY_PORT": str(port),
            "PROCESSOR_GATEWAY_ARCHIVE_READS": "archived",
            "PROCESSOR_GATEWAY_NODE_IDS": local_stack.gateway_node_ids,
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(web),
        }
    )
    with gateway_running(GatewayServer.build(settings)):
        yield RunningGateway(
            f"127.0.0.1:{port}",
            f"http://127.0.0.1:{web}",
            str(local_stack.bootstrap_servers),
            by_partition,
            {tp.partition: e for tp, e in ends.items()},
            txn_committed,
        )


def _produce_transactions(bootstrap: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "gw-txn-producer", "linger.ms": 2}
    )
    producer.init_transactions(30)
    for n in range(9):
        producer.begin_transaction()
        for i in range(40):
            producer.produce(TXN, value=b"txn-%d-%d" % (n, i), key=None if i % 7 == 0 else b"k%d" % i)
        producer.flush(30)
        if n % 3 == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)


def _high_watermark(bootstrap: str, topic: str) -> int:
    return _high_watermark_of(bootstrap, topic, 0)


def _high_watermark_of(bootstrap: str, topic: str, partition: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "gw-watermarks"})
    try:
        return int(consumer.get_watermark_offsets(KafkaTP(topic, partition), timeout=10)[1])
    finally:
        consumer.close()


def _read_committed(bootstrap: str, group: str = "gw-direct") -> list[tuple[int, bytes | None, bytes | None]]:
    """What a read_committed consumer gets of TXN's partition from ``bootstrap``, to its end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": group, "isolation.level": "read_committed",
            "enable.auto.commit": False, "fetch.wait.max.ms": 10,
        }
    )  # fmt: skip
    high = _high_watermark(bootstrap, TXN)
    consumer.assign([KafkaTP(TXN, 0, 0)])
    out: list[tuple[int, bytes | None, bytes | None]] = []
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                if consumer.position([KafkaTP(TXN, 0)])[0].offset >= high:
                    break
                continue
            assert msg.error() is None, msg.error()
            out.append((msg.offset() or 0, msg.key(), msg.value()))
    finally:
        consumer.close()
    return out


def _metric(web: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"{web}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def _check_every_record_once(
    gateway: RunningGateway, got: list[Seen], client: str, headers: bool = True
) -> None:
    """Every record of the topic once, in offset order per partition, byte-exact (headers too, for
    a client that reports them as bytes)."""
    want = sum(len(rs) for rs in gateway.by_partition.values())
    assert len(got) == want, f"{client}: {len(got)} records, not {want}"
    for p, records in gateway.by_partition.items():
        mine = [g for g in got if g[0] == p]
        assert gateway.archived_end[p] < len(records) - 1  # the partition crosses into the broker
        assert [g[1] for g in mine] == list(range(len(records))), (
            f"{client} {p}: not every offset once, in order"
        )
        for g, r in zip(mine, records, strict=True):
            seen = (g[2], g[3], g[4] if headers else [], g[5])
            assert seen == (r.key, r.value, list(r.headers) if headers else [], r.timestamp), (
                f"{client}: partition {p} offset {g[1]} differs"
            )


def _served_bytes(gateway: RunningGateway, topic: str = TOPIC, source: str = "archive") -> float:
    return _metric(gateway.web, "processor_gateway_fetch_bytes_total", topic=topic, source=source)


def _served_records(gateway: RunningGateway, source: str) -> float:
    return _metric(gateway.web, "processor_gateway_fetch_records_total", topic=TOPIC, source=source)


def test_confluent_kafka_reads_from_offset_0_across_the_archive_and_broker_boundary(
    gateway: RunningGateway,
) -> None:
    before = _served_bytes(gateway)
    before_broker = _served_bytes(gateway, source="broker")
    records_before = {s: _served_records(gateway, s) for s in ("archive", "broker")}
    want = sum(len(rs) for rs in gateway.by_partition.values())
    _check_every_record_once(
        gateway, read_confluent(gateway.bootstrap, "gw-confluent", TOPIC, want), "confluent"
    )
    assert _served_bytes(gateway) > before, "the archived part did not come from the archive"
    assert _served_bytes(gateway, source="broker") > before_broker, "the rest came from the broker"
    served = {s: _served_records(gateway, s) - records_before[s] for s in ("archive", "broker")}
    assert served["archive"] > 0 and served["broker"] > 0, served
    # every record the consumer got was counted where it came from (a record fetched twice, twice)
    assert served["archive"] + served["broker"] >= want, (served, want)


def _committed_at_every_end(gateway: RunningGateway, group: str) -> None:
    """The group's commits went through the gateway to the broker: each partition at its end."""
    ends = {p: len(rs) for p, rs in gateway.by_partition.items()}
    assert committed_offsets(gateway.direct, group, TOPIC, PARTITIONS) == ends


def test_confluent_kafka_commits_reach_the_broker(gateway: RunningGateway) -> None:
    _committed_at_every_end(gateway, "gw-confluent")


def test_aiokafka_reads_from_offset_0_across_the_boundary(gateway: RunningGateway) -> None:
    want = sum(len(rs) for rs in gateway.by_partition.values())
    before = _served_bytes(gateway)
    _check_every_record_once(
        gateway, read_aiokafka(gateway.bootstrap, "gw-aiokafka", TOPIC, want), "aiokafka"
    )
    assert _served_bytes(gateway) > before
    _committed_at_every_end(gateway, "gw-aiokafka")


def test_kafka_python_reads_from_offset_0_across_the_boundary(gateway: RunningGateway) -> None:
    want = sum(len(rs) for rs in gateway.by_partition.values())
    got = read_kafka_python(gateway.bootstrap, "gw-kafka-python", TOPIC, want)
    before = _served_bytes(gateway)
    _check_every_record_once(gateway, got, "kafka-python")
    assert _served_bytes(gateway) >= before
    _committed_at_every_end(gateway, "gw-kafka-python")


def test_kcat_reads_from_offset_0_across_the_boundary(gateway: RunningGateway) -> None:
    """kcat in a consumer group (balanced mode), exiting at the end of every partition. kcat prints
    headers only as text, so headers are compared by the other clients."""
    want = sum(len(rs) for rs in gateway.by_partition.values())
    _check_every_record_once(
        gateway, read_kcat(gateway.bootstrap, "gw-kcat", TOPIC, want), "kcat", headers=False
    )


def test_a_read_committed_consumer_sees_exactly_the_committed_records_of_an_archived_range(
    gateway: RunningGateway,
) -> None:
    before = _served_bytes(gateway, TXN)
    through_gateway = _read_committed(gateway.bootstrap, "gw-committed")
    # exactly what a read_committed consumer gets from the broker itself (Tansu, the test broker,
    # does not leave aborted records out: the comparison is the check, not a count)
    assert through_gateway == gateway.txn_committed and len(through_gateway) >= 6 * 40
    assert _served_bytes(gateway, TXN) > before, "the archived range did not come from the archive"


def test_offsets_for_times_and_earliest_through_the_gateway(gateway: RunningGateway) -> None:
    consumer = Consumer({"bootstrap.servers": gateway.bootstrap, "group.id": "gw-times"})
    try:
        records = gateway.by_partition[0]
        wanted = records[gateway.archived_end[0] // 2]
        found = consumer.offsets_for_times([KafkaTP(TOPIC, 0, wanted.timestamp)], timeout=15)[0]
        assert found.offset == records.index(wanted)
        low, high = consumer.get_watermark_offsets(KafkaTP(TOPIC, 0), timeout=15)
        # LATEST is the broker's (Tansu's high watermark is its last batch's base offset + 1)
        assert (low, high) == (0, _high_watermark_of(gateway.direct, TOPIC, 0))
    finally:
        consumer.close()


def _gateway_process(local_stack: StackInfo, tmp: Path, port: int, web: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        **local_stack.env(),
        "PROCESSOR_METADATA_TOPIC": META,
        "PROCESSOR_S3_PREFIX": PREFIX,
        "PROCESSOR_S3_REGION": "us-east-1",
        "PROCESSOR_DATA_DIR": str(tmp),
        "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
        "PROCESSOR_GATEWAY_PORT": str(port),
        "PROCESSOR_GATEWAY_ARCHIVE_READS": "archived",
        "PROCESSOR_GATEWAY_NODE_IDS": local_stack.gateway_node_ids,
        "PROCESSOR_WEB_HOST": "127.0.0.1",
        "PROCESSOR_WEB_PORT": str(web),
    }
    with (tmp / "gateway.log").open("ab") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor", "gateway"], env=env, stdout=log, stderr=log
        )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        assert proc.poll() is None, (tmp / "gateway.log").read_text(errors="replace")[-3000:]
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{web}/readyz", timeout=2)
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return proc
        except OSError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError("the gateway process did not start: " + (tmp / "gateway.log").read_text()[-3000:])


def test_a_consumer_goes_on_after_the_gateway_is_killed_mid_read(
    gateway: RunningGateway, local_stack: StackInfo, tmp_path: Path
) -> None:
    """`processor gateway` as a process, killed with SIGKILL while a consumer group reads through it,
    then started again on the same ports: the consumer resumes from its committed offsets (a new
    member of the group, as after a crash of the application too), and every record is read once."""
    port, web = free_port(), free_port()
    proc = _gateway_process(local_stack, tmp_path, port, web)
    want = sum(len(rs) for rs in gateway.by_partition.values())
    config = {
        "bootstrap.servers": f"127.0.0.1:{port}", "group.id": "gw-killed", "auto.offset.reset": "earliest",
        "session.timeout.ms": SESSION_MS,
        "enable.auto.commit": False, "fetch.wait.max.ms": 10, "max.partition.fetch.bytes": 16384,
    }  # fmt: skip
    got: list[Seen] = []
    consumer = Consumer(config)
    consumer.subscribe([TOPIC])
    try:
        while len(got) < want // 3:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(
                (msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(), [], msg.timestamp()[1])
            )
            consumer.commit(message=msg, asynchronous=False)  # processed, then committed: once
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        consumer.close()
    proc = _gateway_process(local_stack, tmp_path, port, web)
    try:
        consumer = Consumer(config)
        consumer.subscribe([TOPIC])
        deadline = time.monotonic() + 120
        while len(got) < want and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(
                (msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(), [], msg.timestamp()[1])
            )
            consumer.commit(message=msg, asynchronous=False)
        consumer.close()
    finally:
        proc.terminate()
        proc.wait(30)
    _check_every_record_once(gateway, got, "confluent across a gateway restart", headers=False)
