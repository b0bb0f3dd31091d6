"""The Kafka-protocol gateway: a confluent-kafka consumer reading archived records through it, beside
the same consumer reading the same records from the broker directly, in the same run.

The topic is offloaded by a worker first; the gateway then runs as its own process with
``archived`` reads, so every archived offset is answered from the bucket (Tansu never
truncates its log, so ``below-log-start`` would send everything to the broker).

The sequential read starts with the gateway's block cache empty (every block from S3, the cache
filled on the way); the random reads and a second sequential read after it (another consumer group
replaying) find their blocks cached, as reads of a range read before do. Reads in order run in
rounds, each beside a direct read of its own round (medians reported). Cold random reads (every
block from S3) run on a gateway without a cache and are reported beside them: the first record of a
cold archived offset, p50 and p99.
"""

from __future__ import annotations

import os
import random
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from benchmarks.offload import PARTITIONS, LoadedTopic, read_archive
from benchmarks.report import Figure, Report, percentile
from processor.devstack import stack

MiB = 1024 * 1024


@contextmanager
def running_gateway(
    env: dict[str, str], workdir: Path, reads: str = "archived", cache_bytes: int | None = None
) -> Iterator[str]:
    """``processor gateway`` over the archive ``env`` names, as its own process (as deployed: the
    consumer measured here must not share an interpreter with it); yields its bootstrap address."""
    port, web = stack.free_port(), stack.free_port()
    gateway_env = {
        **os.environ,
        **env,
        "PROCESSOR_DATA_DIR": str(workdir / f"gateway-{port}"),
        "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
        "PROCESSOR_GATEWAY_PORT": str(port),
        "PROCESSOR_GATEWAY_ARCHIVE_READS": reads,
        "PROCESSOR_GATEWAY_NODE_IDS": "0-127",  # Apache Kafka's node id is 1, Tansu's 111
        "PROCESSOR_WEB_HOST": "127.0.0.1",
        "PROCESSOR_WEB_PORT": str(web),
        "PROCESSOR_LOG_LEVEL": "warn",
    }
    if cache_bytes is not None:
        gateway_env["PROCESSOR_GATEWAY_CACHE_BYTES"] = str(cache_bytes)
    log = (workdir / f"gateway-{port}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "processor", "gateway"], env=gateway_env, stdout=log, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the gateway exited with {proc.returncode}; see {log.name}")
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{web}/readyz", timeout=2)
                with socket.create_connection(("127.0.0.1", port), timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the gateway did not start; see {log.name}") from None
                time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


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
        # asks for what is left, no more: consume() waits out its timeout for a batch it cannot fill
        for m in consumer.consume(min(10_000, topic.records - n), 1.0):
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
    report: Report, info: stack.StackInfo, workdir: Path, topic: LoadedTopic, reads: int, rounds: int = 3
) -> None:
    env = read_archive(info, topic, workdir)
    label = f"{topic.value_bytes} B records"
    mb = topic.payload_bytes / 1e6
    per_partition = topic.records // PARTITIONS
    span = min(100, max(1, per_partition // 2))
    rng = random.Random(11)
    targets = [(rng.randrange(PARTITIONS), rng.randrange(0, per_partition - span)) for _ in range(reads)]
    # Reads in order, in rounds: each round reads from the broker directly, then through a new gateway
    # (its block cache empty: every block from S3), the same again (blocks cached), then through a
    # gateway passing every fetch to the broker (live). Single reads here move by a fifth from one to
    # the next; the median of the rounds, each read beside a direct read of its own round, is reported.
    direct: list[float] = []
    cold: list[float] = []
    cached: list[float] = []
    live: list[float] = []
    for r in range(rounds):
        direct.append(_read_all(info.bootstrap_servers, topic))
        with running_gateway(env, workdir) as bootstrap:
            cold.append(_read_all(bootstrap, topic))
            if r == 0:  # the blocks are cached now, as for any range read before
                g_first, g_whole = _random_reads(bootstrap, topic, targets, span)
                b_first, b_whole = _random_reads(info.bootstrap_servers, topic, targets, span)
            cached.append(_read_all(bootstrap, topic))  # another consumer group replaying
        # with below-log-start reads every offset Tansu holds (all of them: it never truncates) is
        # the broker's, so every fetch passes through the gateway to it
        with running_gateway(env, workdir, reads="below-log-start") as bootstrap:
            live.append(_read_all(bootstrap, topic))
    note = f"median of {rounds} rounds" if rounds > 1 else ""
    base = statistics.median(direct)
    for what, seconds, target, floor in (
        (f"archived read through the gateway, {label}", cold, ">= broker", 1.0),
        (f"archived read through the gateway, cached, {label}", cached, "", None),
        (f"live read through the gateway, {label}", live, ">= 0.8 x broker", 0.8),
    ):
        ratio = base / statistics.median(seconds)
        report.add(
            Figure(
                "gateway", what, mb / statistics.median(seconds), "MB/s", "the same consumer from the broker",
                mb / base, ratio, target, None if floor is None else ratio >= floor, note,
            )
        )  # fmt: skip
    # Cold: other offsets, on a gateway with no block cache (every block from S3)
    cold_targets = [(rng.randrange(PARTITIONS), rng.randrange(0, per_partition - span)) for _ in range(reads)]
    with running_gateway(env, workdir, cache_bytes=0) as bootstrap:
        c_first, _c_whole = _random_reads(bootstrap, topic, cold_targets, span)
    cb_first, _cb_whole = _random_reads(info.bootstrap_servers, topic, cold_targets, span)
    for name, p in (("p50", 50), ("p99", 99)):
        g, b = percentile(g_whole, p) * 1000, percentile(b_whole, p) * 1000
        report.add(
            Figure(
                "gateway", f"{span} records at a random archived offset (cached), {name}", g, "ms",
                "the same reads from the broker", b, g / b, "<= broker" if name == "p99" else "",
                (g <= b) if name == "p99" else None,
            )
        )  # fmt: skip
        report.add(
            Figure(
                "gateway", f"first record of a random archived offset (cached), {name}",
                percentile(g_first, p) * 1000, "ms", "from the broker", percentile(b_first, p) * 1000,
            )
        )  # fmt: skip
        report.add(
            Figure(
                "gateway", f"first record of a cold archived offset (from S3), {name}",
                percentile(c_first, p) * 1000, "ms", "from the broker", percentile(cb_first, p) * 1000,
            )
        )  # fmt: skip
