"""The Kafka-protocol gateway: a confluent-kafka consumer reading archived records through it, beside
the same consumer reading the same records from the broker directly, in the same run.

The topic is offloaded by a worker first; the gateway then runs as its own process. With
``archived`` reads every archived offset is answered from the bucket while the broker still holds
it. On Apache Kafka a copy of the topic (the same records) is archived and then deleted from the
broker (DeleteRecords up to each partition's end), and a gateway in its default mode,
``below-log-start``, reads it: every offset is below the broker's log start, so every record comes
from the archive, as a user gets it once retention has run. (Tansu does not implement DeleteRecords
and never truncates its log, so there the copy is left out.) Live reads are a ``below-log-start``
gateway over the topic the broker still holds: every fetch passes through to the broker.

The sequential read starts with the gateway's block cache empty (every block from S3, the cache
filled on the way); the random reads and a second sequential read after it (another consumer group
replaying) find their blocks cached, as reads of a range read before do. Reads in order run in
rounds, each beside a direct read of its own round (medians reported). Cold random reads (every
block from S3) run on a gateway without a cache and are reported beside them: the first record of a
cold archived offset, p50 and p99.

Every read in order also reports the CPU-seconds per GB of records of the broker, the S3 server, the
gateway and the consumer (from ``/proc/<pid>/stat``; medians of the rounds), beside the broker's own
for the direct read.
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
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from benchmarks import cpu
from benchmarks.offload import PARTITIONS, LoadedTopic, load_topic, read_archive
from benchmarks.report import Figure, Report, percentile
from processor.config import load_settings
from processor.devstack import servers, stack
from processor.devstack.truncate import truncate_topic
from processor.kafka.partition import TopicPartition
from processor.wiring.follower import build_follower, build_reader
from processor.wiring.storage import build_storage

MiB = 1024 * 1024


@dataclass(frozen=True)
class Gateway:
    bootstrap: str
    pid: int


@contextmanager
def running_gateway(
    env: dict[str, str],
    workdir: Path,
    reads: str = "archived",
    cache_bytes: int | None = None,
    node_ids: str = "0-127",
) -> Iterator[Gateway]:
    """``processor gateway`` over the archive ``env`` names, as its own process (as deployed: the
    consumer measured here must not share an interpreter with it); yields its address and pid.
    ``node_ids``: PROCESSOR_GATEWAY_NODE_IDS, a range holding the broker's node id (the gateway
    listens for node n on its port + 1 + n - the first). A gateway that exits while starting (a
    port of its range taken meanwhile on this shared machine) is started again on other ports."""
    for attempt in range(3):
        proc, log, port, web = _start_gateway(env, workdir, reads, cache_bytes, node_ids)
        try:
            _wait_ready(proc, log, port, web)
        except _ExitedError as exc:
            log.close()
            if attempt == 2:
                raise RuntimeError(str(exc)) from None
            print(f"[gateway] started again: {exc}", flush=True)
            continue
        except BaseException:
            _stop(proc, log)
            raise
        try:
            yield Gateway(f"127.0.0.1:{port}", proc.pid)
        finally:
            _stop(proc, log)
        return


class _ExitedError(Exception):
    pass


def _start_gateway(
    env: dict[str, str], workdir: Path, reads: str, cache_bytes: int | None, node_ids: str
) -> tuple[subprocess.Popen[bytes], BinaryIO, int, int]:
    port, web = servers.free_port(), servers.free_port()
    # a data dir of its own: a port may come round again, and a follower cache refuses another cluster
    name = f"gateway-{port}-{uuid.uuid4().hex[:6]}"
    gateway_env = {
        **os.environ,
        **env,
        "PROCESSOR_DATA_DIR": str(workdir / name),
        "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
        "PROCESSOR_GATEWAY_PORT": str(port),
        "PROCESSOR_GATEWAY_ARCHIVE_READS": reads,
        "PROCESSOR_GATEWAY_NODE_IDS": node_ids,
        "PROCESSOR_WEB_HOST": "127.0.0.1",
        "PROCESSOR_WEB_PORT": str(web),
        "PROCESSOR_LOG_LEVEL": "warn",
    }
    if cache_bytes is not None:
        gateway_env["PROCESSOR_GATEWAY_CACHE_BYTES"] = str(cache_bytes)
    log = (workdir / f"{name}.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "processor", "gateway"], env=gateway_env, stdout=log, stderr=subprocess.STDOUT
    )
    return proc, log, port, web


def _wait_ready(proc: subprocess.Popen[bytes], log: BinaryIO, port: int, web: int) -> None:
    """Until the gateway's /readyz answers and its Kafka port accepts connections."""
    deadline = time.monotonic() + 120
    while True:
        if proc.poll() is not None:
            log.flush()
            tail = Path(log.name).read_text(errors="replace")[-2000:]
            raise _ExitedError(f"the gateway exited with {proc.returncode}; {log.name} ends:\n{tail}")
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{web}/readyz", timeout=2)
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the gateway did not start; see {log.name}") from None
            time.sleep(0.2)


def _stop(proc: subprocess.Popen[bytes], log: BinaryIO) -> None:
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


def _block_get_floor(
    env: dict[str, str], workdir: Path, topic: LoadedTopic, targets: list[tuple[int, int]]
) -> list[float]:
    """Per target, the seconds of one ranged GET of the block holding its offset, alone: the S3
    server's and the S3 client's part of a cold seek (the indexes read first, outside the timing)."""
    settings = load_settings(env)
    follower = build_follower(settings, 4, cache_dir=workdir / f"floor-cache-{uuid.uuid4().hex[:6]}")
    storage = build_storage(settings)
    try:
        follower.materializer.catch_up()
        reader = build_reader(settings, storage, follower.rlmm)
        blocks = []
        for p, offset in targets:
            segment = follower.rlmm.finished_segment_for_offset(TopicPartition(topic.name, p), offset)
            assert segment is not None, (p, offset)
            index = reader.fetch.index(segment)
            number = index.block_for_offset(offset)
            assert number is not None, (p, offset)
            blocks.append((segment.data_object_key, index.blocks[number]))
        seconds = []
        for key, block in blocks:
            t0 = time.perf_counter()
            storage.read(key, block.position, block.length)
            seconds.append(time.perf_counter() - t0)
        return seconds
    finally:
        follower.close()
        storage.close()


@dataclass
class Read:
    seconds: float
    cpu: dict[str, float]  # CPU-seconds per GB of records, by process


def _measured_read(bootstrap: str, topic: LoadedTopic, pids: dict[str, int]) -> Read:
    before = cpu.snapshot(pids)
    seconds = _read_all(bootstrap, topic)
    return Read(seconds, cpu.per_gb(cpu.used(before, cpu.snapshot(pids)), topic.payload_bytes))


def truncated_copy(
    info: stack.StackInfo, workdir: Path, topic: LoadedTopic
) -> tuple[dict[str, str], LoadedTopic]:
    """A copy of ``topic`` (the same records: :func:`load_topic` is deterministic), archived by a
    worker, then deleted from the broker up to each partition's end; returns its archive's settings."""
    copy = load_topic(
        info, f"{topic.name}-truncated", topic.value_bytes, topic.records * (topic.value_bytes + 10)
    )
    if copy.records != topic.records or copy.payload_bytes != topic.payload_bytes:
        raise RuntimeError(f"{copy.name} holds other records than {topic.name}")
    env = read_archive(info, copy, workdir)
    marks = truncate_topic(info.kafka, copy.name)
    print(
        f"[gateway] {copy.name}: the broker deleted offsets below {sorted(set(marks.values()))}", flush=True
    )
    return env, copy


def bench_gateway(
    report: Report, info: stack.StackInfo, workdir: Path, topic: LoadedTopic, reads: int, rounds: int = 3
) -> None:
    env = read_archive(info, topic, workdir)
    truncated = truncated_copy(info, workdir, topic) if info.broker == stack.KAFKA else None
    label = f"{topic.value_bytes} B records"
    mb = topic.payload_bytes / 1e6
    per_partition = topic.records // PARTITIONS
    span = min(100, max(1, per_partition // 2))
    rng = random.Random(11)
    targets = [(rng.randrange(PARTITIONS), rng.randrange(0, per_partition - span)) for _ in range(reads)]
    servers = cpu.stack_pids(info)
    nodes = info.gateway_node_ids
    # Reads in order, in rounds: each round reads from the broker directly, then through a new gateway
    # (its block cache empty: every block from S3), the same again (blocks cached), the truncated copy
    # the same two ways through a gateway in its default mode (Apache Kafka only), then through a
    # gateway passing every fetch to the broker (live). Single reads here move by a fifth from one to
    # the next; the median of the rounds, each read beside a direct read of its own round, is reported.
    runs: dict[str, list[Read]] = {m: [] for m in ("direct", "cold", "cached", "t-cold", "t-cached", "live")}
    t_first: list[float] = []
    t_whole: list[float] = []
    for r in range(rounds):
        runs["direct"].append(_measured_read(info.bootstrap_servers, topic, servers))
        with running_gateway(env, workdir, node_ids=nodes) as gw:
            pids = {**servers, "gateway": gw.pid}
            runs["cold"].append(_measured_read(gw.bootstrap, topic, pids))
            if r == 0:  # the blocks are cached now, as for any range read before
                g_first, g_whole = _random_reads(gw.bootstrap, topic, targets, span)
                b_first, b_whole = _random_reads(info.bootstrap_servers, topic, targets, span)
            runs["cached"].append(_measured_read(gw.bootstrap, topic, pids))  # another group replaying
        if truncated is not None:
            t_env, t_topic = truncated
            with running_gateway(t_env, workdir, reads="below-log-start", node_ids=nodes) as gw:
                pids = {**servers, "gateway": gw.pid}
                runs["t-cold"].append(_measured_read(gw.bootstrap, t_topic, pids))
                if r == 0:
                    t_first, t_whole = _random_reads(gw.bootstrap, t_topic, targets, span)
                runs["t-cached"].append(_measured_read(gw.bootstrap, t_topic, pids))
        # below-log-start over the topic the broker still holds: every fetch passes through to it
        with running_gateway(env, workdir, reads="below-log-start", node_ids=nodes) as gw:
            runs["live"].append(_measured_read(gw.bootstrap, topic, {**servers, "gateway": gw.pid}))
    note = f"median of {rounds} rounds" if rounds > 1 else ""
    base = statistics.median(x.seconds for x in runs["direct"])
    direct_cpu = cpu.median_each([x.cpu for x in runs["direct"]])
    modes = [
        ("cold", f"archived read through the gateway, {label}", ">= broker", 1.0),
        ("cached", f"archived read through the gateway, cached, {label}", "", None),
        ("t-cold", f"truncated topic through the gateway (default mode), {label}", "", None),
        ("t-cached", f"truncated topic through the gateway, cached, {label}", "", None),
        ("live", f"live read through the gateway, {label}", ">= 0.8 x broker", 0.8),
    ]
    for mode, what, target, floor in modes:
        if not runs[mode]:
            continue
        seconds = statistics.median(x.seconds for x in runs[mode])
        ratio = base / seconds
        report.add(
            Figure(
                "gateway", what, mb / seconds, "MB/s", "the same consumer from the broker",
                mb / base, ratio, target, None if floor is None else ratio >= floor, note,
            )
        )  # fmt: skip
    report.add(
        Figure(
            "gateway", f"CPU-s per GB, direct read from the broker, {label}", cpu.servers(direct_cpu),
            "CPU-s/GB", note=cpu.breakdown(direct_cpu),
        )
    )  # fmt: skip
    for mode, what, _target, _floor in modes:
        if not runs[mode]:
            continue
        used = cpu.median_each([x.cpu for x in runs[mode]])
        report.add(
            Figure(
                "gateway", f"CPU-s per GB, {what.replace(' through the gateway', '')}", cpu.servers(used),
                "CPU-s/GB", "the broker, direct read", cpu.servers(direct_cpu),
                cpu.servers(used) / max(cpu.servers(direct_cpu), 1e-9), note=cpu.breakdown(used),
            )
        )  # fmt: skip
    # Cold: other offsets, on a gateway with no block cache (every block from S3)
    cold_targets = [(rng.randrange(PARTITIONS), rng.randrange(0, per_partition - span)) for _ in range(reads)]
    with running_gateway(env, workdir, cache_bytes=0, node_ids=nodes) as gw:
        c_first, _c_whole = _random_reads(gw.bootstrap, topic, cold_targets, span)
    cb_first, _cb_whole = _random_reads(info.bootstrap_servers, topic, cold_targets, span)
    bare_get = _block_get_floor(env, workdir, topic, cold_targets)
    for name, p in (("p50", 50), ("p99", 99)):
        g, b = percentile(g_whole, p) * 1000, percentile(b_whole, p) * 1000
        report.add(
            Figure(
                "gateway", f"{span} records at a random archived offset (cached), {name}", g, "ms",
                "the same reads from the broker", b, g / b, "<= broker" if name == "p99" else "",
                (g <= b) if name == "p99" else None,
            )
        )  # fmt: skip
        if t_whole:
            t = percentile(t_whole, p) * 1000
            report.add(
                Figure(
                    "gateway", f"{span} records at a random truncated offset (cached), {name}", t, "ms",
                    "the same reads from the broker", b, t / b,
                )
            )  # fmt: skip
        report.add(
            Figure(
                "gateway", f"first record of a random archived offset (cached), {name}",
                percentile(g_first, p) * 1000, "ms", "from the broker", percentile(b_first, p) * 1000,
            )
        )  # fmt: skip
        if t_first:
            report.add(
                Figure(
                    "gateway", f"first record of a random truncated offset (cached), {name}",
                    percentile(t_first, p) * 1000, "ms", "from the broker", percentile(b_first, p) * 1000,
                )
            )  # fmt: skip
        report.add(
            Figure(
                "gateway", f"first record of a cold archived offset (from S3), {name}",
                percentile(c_first, p) * 1000, "ms", "from the broker", percentile(cb_first, p) * 1000,
            )
        )  # fmt: skip
        report.add(
            Figure(
                "gateway", f"the same offsets' blocks, one bare ranged GET each (boto3), {name}",
                percentile(bare_get, p) * 1000, "ms", "first record through the gateway",
                percentile(c_first, p) * 1000, percentile(bare_get, p) / max(percentile(c_first, p), 1e-9),
                note="the floor of a cold seek: the S3 server's answer alone",
            )
        )  # fmt: skip
