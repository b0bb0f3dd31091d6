"""The Kafka-protocol gateway on the real stack: unmodified Kafka clients read a partition's archived
offsets from the archive and the rest from the broker, through one bootstrap address.

One archive for the module: a worker offloads the first records of a topic and stops; more records
are produced after it (the broker alone has them). The gateway runs in this process (its asyncio
loop in a thread) with ``archived`` reads, so archived offsets come from the bucket even though
Tansu never truncates its log.
"""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from processor.config import load_settings
from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.devstack.stack import StackInfo, free_port
from processor.kafka_clients import ensure_topic, new_admin
from processor.metadata.model import TopicPartition
from processor.wiring.gateway_server import GatewayServer
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.cli import run_cli
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "gw-orders"
PARTITIONS = 2
ARCHIVED = 1200  # records offloaded, then the worker stops
TAIL = 400  # records produced after: only the broker has them
META = "__remote_log_metadata_gw"
PREFIX = "gw"


@dataclass
class RunningGateway:
    bootstrap: str
    web: str
    by_partition: dict[int, list[SampleRecord]]
    archived_end: dict[int, int]  # last archived offset per partition


def _serve(server: GatewayServer, ready: threading.Event, stop_box: list[Any]) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        stop_box.extend([asyncio.get_running_loop(), stop])
        task = asyncio.create_task(server.serve(stop))
        while not server.gateway.servers:
            await asyncio.sleep(0.01)
        ready.set()
        await task

    asyncio.run(main())


@pytest.fixture(scope="module")
def gateway(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningGateway]:
    tmp = tmp_path_factory.mktemp("gateway")
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, PARTITIONS, 1, {})
    first = produce_samples(
        local_stack.bootstrap_servers, TOPIC, ARCHIVED, PARTITIONS, big_every=10**9,
        producer_config={"batch.size": 16 * 1024},
    )  # fmt: skip
    env = worker_env(
        local_stack,
        tmp / "data",
        TOPIC,
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
    worker = WorkerProcess(env, tmp / "worker.log")
    try:
        wait_offloaded(local_stack.bootstrap_servers, META, ends, 180, worker.proc)
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
            "PROCESSOR_GATEWAY_NODE_IDS": "100-127",  # Tansu's node id is 111
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(web),
        }
    )
    server = GatewayServer.build(settings)
    server.follower.materializer.catch_up()
    server.follower.materializer.start()
    ready, box = threading.Event(), list[Any]()
    thread = threading.Thread(target=_serve, args=(server, ready, box), daemon=True)
    thread.start()
    assert ready.wait(60), "gateway did not start"
    try:
        yield RunningGateway(
            f"127.0.0.1:{port}",
            f"http://127.0.0.1:{web}",
            by_partition,
            {tp.partition: e for tp, e in ends.items()},
        )
    finally:
        loop, stop = box
        loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        server.close()


def _metric(web: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"{web}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


Seen = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def _consume_confluent(bootstrap: str, group: str, want: int) -> list[Seen]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "check.crcs": True,
        }
    )
    consumer.subscribe([TOPIC])
    got: list[Seen] = []
    try:
        idle = 0
        while len(got) < want and idle < 300:
            msg = consumer.poll(0.2)
            if msg is None:
                idle += 1
                continue
            assert msg.error() is None, msg.error()
            idle = 0
            raw_headers: list[tuple[str, Any]] = list(msg.headers() or [])  # type: ignore[arg-type]
            headers = [(k, v if isinstance(v, bytes | None) else v.encode()) for k, v in raw_headers]
            got.append(
                (msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(), headers, msg.timestamp()[1])
            )
        consumer.commit(asynchronous=False)
        committed = consumer.committed([KafkaTP(TOPIC, p) for p in range(PARTITIONS)], timeout=10)
        assert all(c.offset >= 0 for c in committed)
    finally:
        consumer.close()
    return got


def test_confluent_kafka_reads_from_offset_0_across_the_archive_and_broker_boundary(
    gateway: RunningGateway,
) -> None:
    before = _metric(gateway.web, "processor_gateway_fetch_bytes_total", topic=TOPIC, source="archive")
    want = sum(len(rs) for rs in gateway.by_partition.values())
    got = _consume_confluent(gateway.bootstrap, "gw-confluent", want)
    assert len(got) == want
    for p, records in gateway.by_partition.items():
        mine = [g for g in got if g[0] == p]
        assert [g[1] for g in mine] == list(range(len(records))), (
            f"partition {p}: not every offset once, in order"
        )
        for g, r in zip(mine, records, strict=True):
            assert (g[2], g[3], [(k, v) for k, v in g[4]], g[5]) == (
                r.key,
                r.value,
                [(k, v) for k, v in r.headers],
                r.timestamp,
            ), f"partition {p} offset {g[1]} differs"
    after = _metric(gateway.web, "processor_gateway_fetch_bytes_total", topic=TOPIC, source="archive")
    assert after > before, "the archived part did not come from the archive"


def test_the_gateway_command_refuses_an_address_clients_cannot_reach(local_stack: StackInfo) -> None:
    """`processor gateway` bound to every interface with no advertised name: clients would be told
    0.0.0.0. It exits 2 naming the setting, before listening."""
    env = {**local_stack.env(), "PROCESSOR_GATEWAY_HOST": "0.0.0.0", "PROCESSOR_WEB_HOST": "127.0.0.1"}
    result = run_cli(env, "gateway")
    assert result.returncode == 2, result.stderr
    assert "PROCESSOR_GATEWAY_ADVERTISED_HOST" in result.stderr
