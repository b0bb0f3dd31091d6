"""Offload throughput and worker memory, each next to its baselines measured in the same run."""

from __future__ import annotations

import functools
import io
import random
import re
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path

import boto3
from confluent_kafka import OFFSET_BEGINNING, Producer
from confluent_kafka import TopicPartition as KafkaTP

from benchmarks import cpu
from benchmarks.report import Figure, Report
from processor.devstack import stack
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_consumer
from processor.metadata.codec import decode_message
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.storage.s3_client import OBJECT_CONTENT_TYPE, label_parts

MiB = 1024 * 1024
PARTITIONS = 8


@dataclass
class LoadedTopic:
    name: str
    records: int
    value_bytes: int
    payload_bytes: int  # keys + values


def text_pool(size: int, seed: int = 11) -> bytes:
    """Text-like bytes for record values (JSON-ish events from a 4,096-word vocabulary with random
    numbers), compressible about as much as real events, logs and CDC payloads; random bytes would
    make every codec a no-op, and a small repeated pool would make them look far too good."""
    rng = random.Random(seed)
    vocab = [
        bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz_") for _ in range(rng.randint(3, 10)))
        for _ in range(4096)
    ]
    out = bytearray()
    while len(out) < size:
        out += b'{"%s":%d,"%s":"%s %s"} ' % (
            rng.choice(vocab),
            rng.randrange(10**9),
            rng.choice(vocab),
            rng.choice(vocab),
            rng.choice(vocab),
        )
    return bytes(out[:size])


def load_topic(
    info: stack.StackInfo, name: str, value_bytes: int, total_bytes: int, compression: str = "none"
) -> LoadedTopic:
    ensure_topic(new_admin(info.bootstrap_servers, "bench"), name, PARTITIONS, 1, {})
    producer = Producer(
        {
            "bootstrap.servers": info.bootstrap_servers,
            "linger.ms": 20,
            "batch.size": 1 * MiB,
            "queue.buffering.max.kbytes": 512 * 1024,
            "acks": 1,
            "compression.type": compression,
        }
    )
    pool = text_pool(value_bytes + 8 * MiB)
    count = max(total_bytes // (value_bytes + 10), PARTITIONS)
    payload = 0
    for i in range(count):
        key = b"k%09d" % i
        start = (i * 7919) % (8 * MiB)  # a prime stride: neighbouring records differ
        value = pool[start : start + value_bytes]
        payload += len(key) + len(value)
        while True:
            try:
                producer.produce(name, value, key, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.01)
        if i % 20000 == 0:
            producer.poll(0)
    if producer.flush(300):
        raise RuntimeError("load producer did not deliver everything")
    return LoadedTopic(name, count, value_bytes, payload)


def baseline_consumer(info: stack.StackInfo, topic: LoadedTopic) -> tuple[float, dict[str, float]]:
    """Seconds for a bare confluent-kafka consumer to read the whole topic, and the CPU-seconds the
    consumer and the broker spent on it."""
    before = cpu.snapshot(cpu.stack_pids(info))
    consumer = new_consumer(info.bootstrap_servers, "bench-baseline")
    consumer.assign([KafkaTP(topic.name, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    seen = 0
    t0 = time.perf_counter()
    while seen < topic.records:
        # asks for what is left, no more: consume() waits out its timeout for a batch it cannot fill
        batch = consumer.consume(min(10_000, topic.records - seen), 0.5)
        for m in batch:
            if m.error() is None:
                seen += 1
                m.value()
    elapsed = time.perf_counter() - t0
    consumer.close()
    spent = cpu.used(before, cpu.snapshot(cpu.stack_pids(info)))
    return elapsed, {name: spent[name] for name in ("broker", cpu.CONSUMER) if name in spent}


def baseline_upload(info: stack.StackInfo, total_bytes: int, object_bytes: int) -> float:
    """Seconds for one bare boto3 client to upload ``total_bytes`` in ``object_bytes`` objects.

    The bytes are text-like, as the topics' records are, and labelled as the worker labels its
    objects (``binary/octet-stream``, each part too): SeaweedFS spends 1-2 CPU-s per GB more on
    such bytes than on random ones (measured here at 16 MiB objects: 12.5-13.5 against 10.7-11.6),
    so a baseline of random bytes would be cheaper for the S3 server than the same upload of the
    topic's bytes; unlabelled, it would gzip them."""
    client = boto3.client("s3", endpoint_url=info.s3_endpoint_url, region_name="us-east-1")
    label_parts(client)
    body = _upload_body(object_bytes)
    prefix = f"bench-baseline/{uuid.uuid4()}"
    t0 = time.perf_counter()
    sent = 0
    n = 0
    while sent < total_bytes:
        size = min(object_bytes, total_bytes - sent)
        client.upload_fileobj(
            io.BytesIO(body[:size]),
            info.bucket,
            f"{prefix}/{n}",
            ExtraArgs={"ContentType": OBJECT_CONTENT_TYPE},
        )
        sent += size
        n += 1
    return time.perf_counter() - t0


@functools.cache
def _upload_body(size: int) -> bytes:
    return text_pool(size, seed=23)


_METRIC = re.compile(r"^(processor_[a-z_]+?)(?:_total)?(?:\{[^}]*\})? ([0-9.e+-]+)$", re.M)


def scrape(port: int) -> dict[str, float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    out: dict[str, float] = {}
    for name, value in _METRIC.findall(text):
        out[name] = out.get(name, 0.0) + float(value)
    return out


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


@dataclass
class OffloadRun:
    seconds: float  # first record taken -> last record in a finished segment
    wall_seconds: float  # worker start -> done (includes Faust start and group join)
    peak_rss: int
    steady_seconds: float  # 10% -> 90% of the records in finished segments (no start-up, no tail roll)
    stored_bytes: int = 0  # bytes of the data and index objects in S3
    cpu: dict[str, float] | None = None  # CPU-seconds of the worker, the broker and the S3 server


def stored_bytes(info: stack.StackInfo, prefix: str) -> int:
    client = boto3.client("s3", endpoint_url=info.s3_endpoint_url, region_name="us-east-1")
    total = 0
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=info.bucket, Prefix=prefix + "/"):
        total += sum(int(obj.get("Size", 0)) for obj in page.get("Contents", []))
    return total


def archive_env(info: stack.StackInfo, topic: LoadedTopic, name: str) -> dict[str, str]:
    """A worker's settings offloading ``topic`` into an archive of its own: its own metadata topic
    and S3 prefix (``name`` and a fresh tag in both), so sections never read each other's."""
    tag = uuid.uuid4().hex[:8]
    return {
        **{k: v for k, v in info.env().items() if k.startswith("PROCESSOR_")},
        "PROCESSOR_TOPICS": topic.name,
        "PROCESSOR_METADATA_TOPIC": f"__bench_{name}_meta_{tag}",
        "PROCESSOR_S3_PREFIX": f"bench-{name}-{tag}",
        "PROCESSOR_S3_REGION": "us-east-1",
    }


_ARCHIVES: dict[tuple[str, str], dict[str, str]] = {}  # by stack (its bootstrap servers) and topic


def read_archive(info: stack.StackInfo, topic: LoadedTopic, workdir: Path) -> dict[str, str]:
    """The settings of an archive of ``topic`` for the sections that only read one (random reads,
    the gateway, Spark): offloaded by a worker the first time a section asks, then shared (each
    offload of 1 GiB is a worker run of its own, outside every figure). Same buffer and segment size
    as the offload section's run."""
    env = _ARCHIVES.get((info.bootstrap_servers, topic.name))
    if env is None:
        print(f"[archive] offloading {topic.name} for the sections that read it ...", flush=True)
        env = archive_env(info, topic, "read")
        run_worker_offload(info, topic, workdir, 256 * MiB, 64 * MiB, extra_env=env)
        _ARCHIVES[(info.bootstrap_servers, topic.name)] = env
    return env


class FinishedWatch:
    """Records of ``source_topic`` in segments whose COPY_SEGMENT_FINISHED is on the worker's
    metadata topic: copied and served (the manifest the copier writes next is for rebuilds). Read
    by a consumer of this process, so watching costs the worker nothing."""

    def __init__(self, info: stack.StackInfo, metadata_topic: str, source_topic: str) -> None:
        # a fetch wait of 100 ms, not the 10 ms of the product's consumers: an idle consumer at 10 ms
        # costs the broker ~0.13 CPU-s a second, which would count against the offload measured
        self._consumer = new_consumer(info.bootstrap_servers, "bench-watch", **{"fetch.wait.max.ms": 100})
        found = self._consumer.list_topics(metadata_topic, timeout=10).topics[metadata_topic]
        self._consumer.assign(
            [KafkaTP(metadata_topic, p, OFFSET_BEGINNING) for p in sorted(found.partitions)]
        )
        self._source = source_topic
        self._seen: set[object] = set()
        self.records = 0

    def poll(self, timeout_s: float) -> int:
        for m in self._consumer.consume(1000, timeout_s):
            if m.error() is not None:
                continue
            record = decode_message(m.key(), m.value())
            if (
                isinstance(record, RemoteLogSegmentMetadata)
                and record.state is SegmentState.COPY_SEGMENT_FINISHED
                and record.segment_id.topic == self._source
                and record.segment_id not in self._seen
            ):
                self._seen.add(record.segment_id)
                self.records += record.record_count
        return self.records

    def close(self) -> None:
        self._consumer.close()


# Settings every worker this harness starts gets, under a section's own (``--key-filters``: the
# erasure secret, so offloads are measured with the key filters the copier then builds).
EXTRA_WORKER_ENV: dict[str, str] = {}


def run_worker_offload(
    info: stack.StackInfo,
    topic: LoadedTopic,
    workdir: Path,
    buffer_bytes: int,
    segment_bytes: int,
    extra_env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
) -> OffloadRun:
    tag = uuid.uuid4().hex[:8]
    overrides = {
        "PROCESSOR_APP_ID": f"bench-{tag}",
        "PROCESSOR_METADATA_TOPIC": f"__bench_meta_{tag}",
        "PROCESSOR_S3_PREFIX": f"bench-{tag}",
        "PROCESSOR_SEGMENT_BYTES": str(segment_bytes),
        "PROCESSOR_SEGMENT_MS": "1000",
        "PROCESSOR_BUFFER_BYTES": str(buffer_bytes),
        "PROCESSOR_LOG_LEVEL": "warn",
        "PROCESSOR_FOLLOWER_ENABLED": "false",
    }
    # extra_env wins over the defaults above (a caller may name its own metadata topic or prefix).
    env = info.worker_env(workdir / tag, topic.name, **{**overrides, **EXTRA_WORKER_ENV, **(extra_env or {})})
    for name in unset:  # a section's baseline without a harness-wide setting (--key-filters)
        env.pop(name, None)
    port = int(env["PROCESSOR_WEB_PORT"])
    log = (workdir / f"worker-{tag}.log").open("wb")
    servers = cpu.stack_pids(info)
    cpu_before = {**cpu.snapshot(servers), "worker": 0.0}
    t_wall = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "processor", "worker"], env=env, stdout=log, stderr=subprocess.STDOUT
    )
    t_first: float | None = None
    t10: float | None = None
    t90: float | None = None
    watch: FinishedWatch | None = None
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"worker exited with {proc.returncode}; see {log.name}")
            if watch is None:
                # Until the first record is taken (the worker's start, outside the figures) its
                # metrics say when; from then on the copies are read off its metadata topic, since a
                # scrape costs the worker ~4 ms of CPU (10 a second would add ~2 CPU-s per GB of a
                # 0.25 GiB run to the worker's figure) and the bench must not load what it measures.
                try:
                    m = scrape(port)
                except OSError:
                    time.sleep(0.2)
                    continue
                if m.get("processor_records_taken", 0) <= 0:
                    time.sleep(0.1)
                    continue
                t_first = time.perf_counter()
                # CPU from the first record taken, as the throughput: the worker's start is left out
                cpu_before = {**cpu.snapshot(servers), "worker": cpu.cpu_seconds(proc.pid)}
                watch = FinishedWatch(info, env["PROCESSOR_METADATA_TOPIC"], topic.name)
            done = watch.poll(0.1)
            now = time.perf_counter()
            if t10 is None and done >= 0.1 * topic.records:
                t10 = now
            if t90 is None and done >= 0.9 * topic.records:
                t90 = now
            if done >= topic.records:
                rss = peak_rss_bytes(proc.pid)
                spent = cpu.used(cpu_before, {**cpu.snapshot(servers), "worker": cpu.cpu_seconds(proc.pid)})
                spent.pop(cpu.CONSUMER, None)  # this process only watched the metadata topic
                steady = (t90 or now) - (t10 or t_first or t_wall)
                stored = stored_bytes(info, env.get("PROCESSOR_S3_PREFIX", f"bench-{tag}"))
                # Tiny smoke runs can finish within one 0.1 s poll: that is the resolution.
                seconds = max(now - (t_first or t_wall), 0.1)
                return OffloadRun(seconds, now - t_wall, rss, max(steady / 0.8, 0.1), stored, spent)
            if now - t_wall > 1800:
                raise TimeoutError("offload did not finish in 30 minutes")
    finally:
        if watch is not None:
            watch.close()
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def bench_offload(
    report: Report,
    info: stack.StackInfo,
    workdir: Path,
    value_bytes: int,
    total_bytes: int,
    compression: str = "none",
    archive: str = "keep",
) -> LoadedTopic:
    """Offload of one topic next to the slower of its baselines. ``compression``: the producer's
    codec; ``archive``: PROCESSOR_ARCHIVE_COMPRESSION."""
    label = f"{value_bytes}B"
    if compression != "none":
        label += f" {compression} topic"
    if archive != "keep":
        label += f", archive {archive}"
    print(f"[offload {label}] loading {total_bytes / MiB:.0f} MiB into 8 partitions ...", flush=True)
    name = f"bench-{value_bytes}B-{compression}-{uuid.uuid4().hex[:6]}"
    topic = load_topic(info, name, value_bytes, total_bytes, compression)
    mb = topic.payload_bytes / 1e6
    consume_s, consume_cpu = baseline_consumer(info, topic)
    upload_s = baseline_upload(info, topic.payload_bytes, 64 * MiB)
    run = run_worker_offload(
        info, topic, workdir, 256 * MiB, 64 * MiB, extra_env={"PROCESSOR_ARCHIVE_COMPRESSION": archive}
    )
    offload_rate = mb / run.seconds
    consume_rate, upload_rate = mb / consume_s, mb / upload_s
    slower_name, slower = min(("consumer", consume_rate), ("boto3 upload", upload_rate), key=lambda x: x[1])
    ratio = offload_rate / slower
    report.add(
        Figure(
            "offload",
            f"{label} values: throughput",
            offload_rate,
            "MB/s",
            f"slower baseline ({slower_name})",
            slower,
            ratio,
            ">= 0.8",
            ratio >= 0.8,
        )
    )
    report.add(
        Figure(
            "offload",
            f"{label} values: steady-state throughput",
            mb / run.steady_seconds,
            "MB/s",
            f"slower baseline ({slower_name})",
            slower,
            mb / run.steady_seconds / slower,
            note="10% -> 90% of records offloaded",
        )
    )
    report.add(
        Figure(
            "offload",
            f"{label} values: records/s",
            topic.records / run.seconds,
            "rec/s",
            "bare consumer",
            topic.records / consume_s,
            (topic.records / run.seconds) / (topic.records / consume_s),
        )
    )
    report.add(
        Figure(
            "offload",
            f"{label}: bytes in S3 per byte of record data",
            run.stored_bytes / topic.payload_bytes,
            "B/B",
            note=f"{run.stored_bytes / MiB:.1f} MiB stored, {topic.payload_bytes / MiB:.1f} MiB keys+values",
        )
    )
    if run.cpu is not None:
        offload_cpu = cpu.per_gb(run.cpu, topic.payload_bytes)
        fetch_cpu = cpu.per_gb(consume_cpu, topic.payload_bytes)
        report.add(
            Figure(
                "offload", f"{label}: CPU-s per GB (worker, broker, S3 server)", sum(offload_cpu.values()),
                "CPU-s/GB", "bare consumer and broker", sum(fetch_cpu.values()),
                sum(offload_cpu.values()) / max(sum(fetch_cpu.values()), 1e-9),
                note=f"{cpu.breakdown(offload_cpu)} (from its first record); "
                f"bare read: {cpu.breakdown(fetch_cpu)}",
            )
        )  # fmt: skip
    report.add(Figure("offload", f"{label} baseline: bare consumer", consume_rate, "MB/s"))
    report.add(Figure("offload", f"{label} baseline: boto3 64 MiB objects", upload_rate, "MB/s"))
    report.add(
        Figure(
            "offload",
            f"{label} wall time incl. worker start",
            run.wall_seconds,
            "s",
            note=f"{topic.records} records, {mb:.0f} MB",
        )
    )
    return topic


def bench_memory(
    report: Report, info: stack.StackInfo, workdir: Path, topic: LoadedTopic, smoke: bool = False
) -> None:
    """Peak RSS under a 64 and a 256 MiB buffer bound and the growth between them (``smoke``: the
    64 MiB run only, so no growth figure)."""
    results = {}
    for bound in (64 * MiB,) if smoke else (64 * MiB, 256 * MiB):
        print(
            f"[memory] offloading {topic.payload_bytes / MiB:.0f} MiB with a {bound // MiB} MiB buffer ...",
            flush=True,
        )
        run = run_worker_offload(info, topic, workdir, bound, bound // 4)
        results[bound] = run.peak_rss
        report.add(
            Figure(
                "memory",
                f"peak RSS, buffer {bound // MiB} MiB",
                run.peak_rss / MiB,
                "MiB",
                "input size",
                topic.payload_bytes / MiB,
                run.peak_rss / topic.payload_bytes,
                "follows the bound",
                note=f"{topic.payload_bytes / run.seconds / 1e6:.0f} MB/s",
            )
        )
    if smoke:
        return
    growth = (results[256 * MiB] - results[64 * MiB]) / MiB
    report.add(
        Figure(
            "memory",
            "RSS growth 64 -> 256 MiB bound",
            growth,
            "MiB",
            "bound growth",
            192.0,
            growth / 192.0,
            "<= 1.5x bound growth",
            growth <= 1.5 * 192,
        )
    )
