"""Transactions on Apache Kafka, read through the gateway after the broker deleted them: committed and
aborted transactions interleaved across two partitions (and plain records between them), archived,
then DeleteRecords to the end. A ``read_committed`` consumer through the gateway gets exactly what the
same consumer got from the broker before the truncation. A ``read_uncommitted`` one gets the committed
records too and no aborted one: the archive keeps what a read_committed consumer sees (docs/gateway.md
says so), where the broker would have shown the aborted records as well. And a consumer's position
at the end of an archived range stops before its last transaction markers, which are not archived.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack import stack
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.wiring.gateway_server import GatewayServer
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.gateway_thread import gateway_running, loopback_gateway
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "txn-truncated"
PARTITIONS = 2
META = "__remote_log_metadata_txn"
PREFIX = "txn"
IDLE_S = 5.0
Seen = list[tuple[int, int, bytes | None, bytes | None]]  # partition, offset, key, value


def _produce(bootstrap: str) -> None:
    """Twelve transactions over both partitions, every third aborted, with plain records between."""
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": "txn-truncated", "linger.ms": 2})
    plain = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    txn.init_transactions(30)
    for n in range(12):
        txn.begin_transaction()
        for i in range(30):
            txn.produce(TOPIC, key=b"k%d" % i, value=b"t%d-%d" % (n, i), partition=i % PARTITIONS)
        txn.flush(30)
        for p in range(PARTITIONS):
            plain.produce(TOPIC, key=None, value=b"plain-%d-%d" % (n, p), partition=p)
        assert plain.flush(30) == 0
        if n % 3 == 1:
            txn.abort_transaction(30)
        else:
            txn.commit_transaction(30)


def _read(bootstrap: str, isolation: str, group: str) -> Seen:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": group, "isolation.level": isolation,
            "auto.offset.reset": "earliest", "enable.auto.commit": False, "fetch.wait.max.ms": 10,
        }
    )  # fmt: skip
    ends = {p: consumer.get_watermark_offsets(KafkaTP(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.assign([KafkaTP(TOPIC, p, 0) for p in range(PARTITIONS)])
    seen: Seen = []
    idle_since = time.monotonic()
    try:
        # to each partition's end; through the gateway a position stops before the last transaction
        # markers of an archived range (the archive has none to hand out): there, until it idles
        while any(consumer.position([KafkaTP(TOPIC, p)])[0].offset < ends[p] for p in range(PARTITIONS)):
            msg = consumer.poll(0.2)
            if msg is None:
                if seen and time.monotonic() - idle_since > IDLE_S:
                    break
                continue
            assert msg.error() is None, msg.error()
            idle_since = time.monotonic()
            seen.append((msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value()))
    finally:
        consumer.close()
    return sorted(seen)


@dataclass
class Transactions:
    gateway: str
    committed: Seen  # what read_committed got from the broker before the truncation
    uncommitted: Seen  # what read_uncommitted got from it


@pytest.fixture(scope="module")
def transactions(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Transactions]:
    if local_stack.broker != stack.KAFKA:
        pytest.skip("Tansu leaves aborted records in read_committed answers and never truncates")
    tmp = tmp_path_factory.mktemp("txn")
    bootstrap = local_stack.bootstrap_servers
    ensure_topic(new_admin(bootstrap, "t"), TOPIC, PARTITIONS, 1, {})
    _produce(bootstrap)
    committed, uncommitted = (
        _read(bootstrap, "read_committed", "txn-c"),
        _read(bootstrap, "read_uncommitted", "txn-u"),
    )
    assert len(uncommitted) > len(committed) > 0  # the broker leaves aborted records out, or shows them
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "txn-ends"})
    ends = {p: consumer.get_watermark_offsets(KafkaTP(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.close()
    env = worker_env(
        local_stack, tmp / "data", TOPIC, PROCESSOR_METADATA_TOPIC=META, PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_SEGMENT_BYTES=str(16 * 1024), PROCESSOR_BLOCK_BYTES=str(4 * 1024),
        PROCESSOR_SEGMENT_MS="500",
    )  # fmt: skip
    worker = WorkerProcess(env, tmp / "worker.log")
    try:  # every offset covered, the last commit or abort marker included
        wait_offloaded(
            bootstrap, META, {TopicPartition(TOPIC, p): e - 1 for p, e in ends.items()}, 120, worker.proc
        )
    finally:
        worker.stop()
    admin = new_admin(bootstrap, "txn-delete")
    for future in admin.delete_records([KafkaTP(TOPIC, p, e) for p, e in ends.items()]).values():
        future.result(timeout=30)
    gateway = loopback_gateway(
        {**local_stack.env(), "PROCESSOR_METADATA_TOPIC": META, "PROCESSOR_S3_PREFIX": PREFIX},
        tmp / "gateway",
    )
    with gateway_running(GatewayServer.build(gateway.settings)):
        yield Transactions(gateway.bootstrap, committed, uncommitted)


def test_read_committed_through_the_gateway_is_what_the_broker_gave(transactions: Transactions) -> None:
    assert _read(transactions.gateway, "read_committed", "txn-gw-c") == transactions.committed


def test_read_uncommitted_through_the_gateway_sees_no_aborted_record(transactions: Transactions) -> None:
    """The documented difference: the archive holds what read_committed sees."""
    got = _read(transactions.gateway, "read_uncommitted", "txn-gw-u")
    assert got == transactions.committed
    aborted = set(transactions.uncommitted) - set(transactions.committed)
    assert aborted and not aborted & set(got)
