"""The Kafka-protocol gateway: a confluent-kafka consumer reading archived records through it, beside
the same consumer reading the same records from the broker directly, in the same run.

The topic is offloaded by a worker first; the gateway then runs in this process (its asyncio loop in
a thread) with ``archived`` reads, so every archived offset is answered from the bucket (Tansu never
truncates its log, so ``below-log-start`` would send everything to the broker).
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from benchmarks.offload import PARTITIONS, LoadedTopic, run_worker_offload
from benchmarks.report import Figure, Report, percentile
from processor.config import load_settings
from processor.devstack import stack
from processor.wiring.gateway_server import GatewayServer

MiB = 1024 * 1024


@contextmanager
def running_gateway(env: dict[str, str], workdir: Path) -> Iterator[str]:
    """A gateway over the archive ``env`` names; yields its bootstrap address."""
    port, web = stack.free_port(), stack.free_port()
    settings = load_settings(
        {
            **env,
            "PROCESSOR_DATA_DIR": str(workdir / f"gateway-{port}"),
            "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
            "PROCESSOR_GATEWAY_PORT": str(port),
            "PROCESSOR_GATEWAY_ARCHIVE_READS": "archived",
            "PROCESSOR_GATEWAY_NODE_IDS": "100-127",  # Tansu's node id is 111
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(web),
            "PROCESSOR_LOG_LEVEL": "warn",
        }
    )
    server = GatewayServer.build(settings)
    server.follower.materializer.catch_up()
    server.follower.materializer.start()
    box: list[Any] = []
    ready = threading.Event()

    async def main() -> None:
        stop = asyncio.Event()
        box.extend([asyncio.get_running_loop(), stop])
        task = asyncio.create_task(server.serve(stop))
        while not server.gateway.servers:
            await asyncio.sleep(0.01)
        ready.set()
        await task

    thread = threading.Thread(target=asyncio.run, args=(main(),), daemon=True)
    thread.start()
    if not ready.wait(60):
        raise RuntimeError("the gateway did not start")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        box[0].call_soon_threadsafe(box[1].set)
        thread.join(30)
        server.close()


def _consumer(bootstrap: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-gw-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "queued.max.messages.kbytes": 65536,
        }
    )


def _read_all(bootstrap: str, topic: LoadedTopic) -> float:
    """Seconds for one consumer to read every record of ``topic`` from offset 0."""
    consumer = _consumer(bootstrap)
    consumer.assign([KafkaTP(topic.name, p, 0) for p in range(PARTITIONS)])
    t0 = time.perf_counter()
    n = 0
    while n < topic.records:
        for m in consumer.consume(10_000, 1.0):
            if m.error() is None:
                n += 1
    seconds = time.perf_counter() - t0
    consumer.close()
    return seconds


def _random_reads(
    bootstrap: str, topic: LoadedTopic, targets: list[tuple[int, int]], span: int
) -> tuple[list[float], list[float]]:
    """Per target: seconds to the first record, and seconds to ``span`` records."""
    consumer = _consumer(bootstrap)
    first: list[float] = []
    whole: list[float] = []
    for p, offset in targets:
        t0 = time.perf_counter()
        consumer.assign([KafkaTP(topic.name, p, offset)])
        n = 0
        t_first = None
        while n < span:
            for m in consumer.consume(span - n, 1.0):
                if m.error() is None:
                    n += 1
                    if t_first is None:
                        t_first = time.perf_counter() - t0
        whole.append(time.perf_counter() - t0)
        first.append(t_first or 0.0)
    consumer.close()
    return first, whole


def bench_gateway(
    report: Report, info: stack.StackInfo, workdir: Path, topic: LoadedTopic, reads: int
) -> None:
    print(f"[gateway] offloading {topic.name} for the gateway benchmark ...", flush=True)
    tag = uuid.uuid4().hex[:8]
    env = {
        **{k: v for k, v in info.env().items() if k.startswith("PROCESSOR_")},
        "PROCESSOR_TOPICS": topic.name,
        "PROCESSOR_METADATA_TOPIC": f"__bench_gw_meta_{tag}",
        "PROCESSOR_S3_PREFIX": f"bench-gw-{tag}",
        "PROCESSOR_S3_REGION": "us-east-1",
    }
    run_worker_offload(info, topic, workdir, 256 * MiB, 64 * MiB, extra_env=env)
    label = f"{topic.value_bytes} B records"
    mb = topic.payload_bytes / 1e6
    with running_gateway(env, workdir) as bootstrap:
        direct = _read_all(info.bootstrap_servers, topic)
        through = _read_all(bootstrap, topic)
        report.add(
            Figure(
                "gateway", f"archived read through the gateway, {label}", mb / through, "MB/s",
                "the same consumer from the broker", mb / direct, direct / through, ">= broker",
                through <= direct,
            )
        )  # fmt: skip
        per_partition = topic.records // PARTITIONS
        span = min(100, max(1, per_partition // 2))
        rng = random.Random(11)
        targets = [(rng.randrange(PARTITIONS), rng.randrange(0, per_partition - span)) for _ in range(reads)]
        g_first, g_whole = _random_reads(bootstrap, topic, targets, span)
        b_first, b_whole = _random_reads(info.bootstrap_servers, topic, targets, span)
    for name, p in (("p50", 50), ("p99", 99)):
        g, b = percentile(g_whole, p) * 1000, percentile(b_whole, p) * 1000
        report.add(
            Figure(
                "gateway", f"{span} records at a random archived offset, {name}", g, "ms",
                "the same reads from the broker", b, g / b, "<= broker" if name == "p99" else "",
                (g <= b) if name == "p99" else None,
            )
        )  # fmt: skip
        report.add(
            Figure(
                "gateway", f"first record of a random archived offset, {name}", percentile(g_first, p) * 1000,
                "ms", "from the broker", percentile(b_first, p) * 1000,
            )
        )  # fmt: skip
