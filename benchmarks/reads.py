"""Remote read latency against a consumer seeking on the broker; follower apply rate; scale."""

from __future__ import annotations

import random
import shutil
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka import TopicPartition as KafkaTP

from benchmarks.offload import PARTITIONS, LoadedTopic, read_archive
from benchmarks.report import Figure, Report, percentile
from processor.config import load_settings
from processor.crypto.keyring import new_key
from processor.devstack import stack
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_consumer
from processor.kafka.partition import TopicPartition
from processor.metadata import authentication
from processor.metadata.codec import encode_value, metadata_partition_for, record_key
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.segment.object_keys import ObjectKeyFactory
from processor.wiring.follower import build_follower, build_reader
from processor.wiring.storage import build_storage

MiB = 1024 * 1024
BENCH_KEYS = ObjectKeyFactory("bench")  # the object keys of the follower benchmark's made-up segments


def bench_read_latency(
    report: Report, info: stack.StackInfo, workdir: Path, topic: LoadedTopic, reads: int = 200
) -> None:
    env = read_archive(info, topic, workdir)
    settings = load_settings(env)
    meta_parts = 4
    cache_dir = workdir / f"read-cache-{env['PROCESSOR_S3_PREFIX']}"
    follower = build_follower(settings, meta_parts, cache_dir=cache_dir)
    follower.materializer.catch_up()
    storage = build_storage(settings)
    reader = build_reader(settings, storage, follower.rlmm)
    per_partition = topic.records // PARTITIONS
    rng = random.Random(7)
    span = min(1000, max(1, per_partition // 2))  # 1000 in real runs; smaller in the smoke run
    targets = [(rng.randrange(PARTITIONS), rng.randrange(0, per_partition - span)) for _ in range(reads)]

    # every GET each read makes is recorded, to be made again alone below (the floor: the S3 server's
    # and the client's part of a read, nothing of the reader's)
    requested: list[list[tuple[str, int, int]]] = []
    storage_read = storage.read

    def recorded_read(key: str, offset: int, length: int) -> bytes:
        requested[-1].append((key, offset, length))
        return storage_read(key, offset, length)

    storage.read = recorded_read  # type: ignore[method-assign]
    remote: list[float] = []
    remote_cpu = 0.0
    for p, offset in targets:
        requested.append([])
        t0, c0 = time.perf_counter(), time.process_time()
        got = reader.read_from_offset(
            TopicPartition(topic.name, p), offset, max_records=span, max_bytes=1 << 40
        )
        remote.append(time.perf_counter() - t0)
        remote_cpu += time.process_time() - c0
        assert len(got) == span and got[0].offset == offset
    storage.read = storage_read  # type: ignore[method-assign]
    bare: list[float] = []
    bare_cpu = 0.0
    for gets in requested:
        t0, c0 = time.perf_counter(), time.process_time()
        for key, start, length in gets:
            storage_read(key, start, length)
        bare.append(time.perf_counter() - t0)
        bare_cpu += time.process_time() - c0

    consumer = new_consumer(info.bootstrap_servers, "bench-seek")
    broker: list[float] = []
    for p, offset in targets:
        t0 = time.perf_counter()
        consumer.assign([KafkaTP(topic.name, p, offset)])
        n = 0
        while n < span:
            for m in consumer.consume(span - n, 1.0):
                if m.error() is None:
                    n += 1
        broker.append(time.perf_counter() - t0)
    consumer.close()
    follower.close()
    storage.close()
    for name, p in (("p50", 50), ("p99", 99)):
        r, b = percentile(remote, p) * 1000, percentile(broker, p) * 1000
        report.add(
            Figure(
                "reads",
                f"{span} records at random offset, {name}",
                r,
                "ms",
                "broker seek+consume",
                b,
                r / b,
                "p50 <= broker" if name == "p50" else "",
                (r / b <= 1.0) if name == "p50" else None,
            )
        )
        report.add(
            Figure(
                "reads",
                f"the same reads' GETs alone (boto3, one after another), {name}",
                percentile(bare, p) * 1000,
                "ms",
                "the remote read",
                r,
                percentile(bare, p) * 1000 / r,
                note="the floor: the S3 server and the client's request, no decode",
            )
        )
    report.add(
        Figure(
            "reads",
            "bytes requested per read (mean)",
            reader.stats.bytes_requested / reads / 1e6,
            "MB",
            note=f"{reader.stats.requests / reads:.2f} GETs per read",
        )
    )
    report.add(
        Figure(
            "reads",
            "CPU of this process per read (mean)",
            remote_cpu / reads * 1000,
            "ms",
            "its GETs alone",
            bare_cpu / reads * 1000,
            remote_cpu / max(bare_cpu, 1e-9),
        )
    )


def _segment(tp: TopicPartition, start: int, end: int, state: SegmentState) -> RemoteLogSegmentMetadata:
    """A segment's metadata within the fold's record bounds (its object keys name it), so every
    reader accepts it."""
    sid = RemoteLogSegmentId(tp.topic, tp.partition, uuid.uuid4())
    keys = BENCH_KEYS.segment(tp.topic, tp.partition, start, sid.id, 1)
    return RemoteLogSegmentMetadata(
        sid,
        start,
        end,
        1_700_000_000_000 + start,
        1,
        "bench",
        1,
        ((0, start),),
        64 * MiB,
        state,
        keys.data,
        keys.index,
        1,
        end - start + 1,
        0,
        100,
    )


def publish_metadata(
    info: stack.StackInfo, records: int, parts: int = 4, auth: authentication.MetadataAuth | None = None
) -> str:
    """A compacted metadata topic with ``records`` records: 100 source partitions, each a chain of
    segments published as STARTED then FINISHED (``auth``: each with its authenticator)."""
    topic = f"__bench_follower_{uuid.uuid4().hex[:8]}"
    ensure_topic(new_admin(info.bootstrap_servers, "bench"), topic, parts, 1, {"cleanup.policy": "compact"})
    producer = Producer(
        {
            "bootstrap.servers": info.bootstrap_servers,
            "linger.ms": 20,
            "batch.size": MiB,
            "queue.buffering.max.kbytes": 512 * 1024,
            # a batch retried under load must not land after the next one: a segment's FINISHED
            # before its STARTED is a record the fold rightly rejects, and the bench counts applies
            "enable.idempotence": True,
        }
    )
    tps = [TopicPartition("orders", p) for p in range(100)]
    next_start = dict.fromkeys(tps, 0)
    for i in range(records // 2):
        tp = tps[i % len(tps)]
        seg = _segment(tp, next_start[tp], next_start[tp] + 999, SegmentState.COPY_SEGMENT_STARTED)
        next_start[tp] += 1000
        where = metadata_partition_for(tp, parts)
        for state in (SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED):
            rec = seg.with_state(state, 2)
            value, key = encode_value(rec), record_key(rec)
            headers = None if auth is None else auth.headers(authentication.DOMAIN_METADATA, key, value)
            while True:
                try:
                    producer.produce(topic, value, key, partition=where, headers=headers)
                    break
                except BufferError:
                    producer.poll(0.01)
    producer.flush(120)
    return topic


def _restart_ms(settings_env: dict[str, str], cache_dir: Path, parts: int) -> float:
    settings = load_settings(settings_env)
    best = float("inf")
    for _ in range(3):
        again = build_follower(settings, parts, cache_dir=cache_dir)
        t0 = time.perf_counter()
        s = again.materializer.catch_up(quiet_s=0.0)
        best = min(best, time.perf_counter() - t0)
        again.close()
        assert s.consumed == 0, "a restarted follower re-read records"
    return best * 1000


def bench_follower(report: Report, info: stack.StackInfo, workdir: Path, records: int = 200_000) -> None:
    parts = 4
    print(f"[follower] publishing {records} metadata records ...", flush=True)
    topic = publish_metadata(info, records, parts)
    consumer = new_consumer(info.bootstrap_servers, "bench-meta-baseline")
    consumer.assign([KafkaTP(topic, p, 0) for p in range(parts)])
    # CPU time of this process (every thread: librdkafka's too) beside the wall clock: the broker and
    # the S3 server share the machine's cores, and how much of them they take moves from run to run
    seen, t0, cpu0 = 0, time.perf_counter(), time.process_time()
    while seen < records:
        # asks for what is left, no more: consume() waits out its timeout for a batch it cannot fill
        seen += sum(1 for m in consumer.consume(min(10_000, records - seen), 0.5) if m.error() is None)
    baseline_rate = records / (time.perf_counter() - t0)
    baseline_cpu_rate = records / max(time.process_time() - cpu0, 1e-9)
    consumer.close()

    env = {"PROCESSOR_BOOTSTRAP_SERVERS": info.bootstrap_servers, "PROCESSOR_METADATA_TOPIC": topic}
    cache_dir = workdir / f"follower-cache-{uuid.uuid4().hex[:6]}"
    follower = build_follower(load_settings(env), parts, cache_dir=cache_dir)
    t0, cpu0 = time.perf_counter(), time.process_time()
    stats = follower.materializer.catch_up(timeout_s=600, quiet_s=0.0)
    apply_s = time.perf_counter() - t0
    apply_cpu_s = time.process_time() - cpu0
    follower.close()
    assert stats.applied == records, stats
    rate = records / apply_s
    report.add(
        Figure(
            "follower",
            f"apply rate, {records:,} metadata records",
            rate,
            "rec/s",
            "bare consumer",
            baseline_rate,
            rate / baseline_rate,
            ">= 100,000 rec/s",
            rate >= 100_000,
        )
    )
    cpu_rate = records / max(apply_cpu_s, 1e-9)
    report.add(
        Figure(
            "follower",
            "apply rate per CPU-second of the follower's process",
            cpu_rate,
            "rec/CPU-s",
            "bare consumer",
            baseline_cpu_rate,
            cpu_rate / baseline_cpu_rate,
            ">= 100,000 rec/CPU-s (one core)",
            cpu_rate >= 100_000,
            note=f"{apply_cpu_s:.2f} CPU-s in {apply_s:.2f} s",
        )
    )
    _bench_authenticated(report, info, workdir, records, parts, cpu_rate)

    small = records // 10
    small_topic = publish_metadata(info, small, parts)
    small_env = {**env, "PROCESSOR_METADATA_TOPIC": small_topic}
    small_dir = workdir / f"follower-small-{uuid.uuid4().hex[:6]}"
    small_follower = build_follower(load_settings(small_env), parts, cache_dir=small_dir)
    small_follower.materializer.catch_up(quiet_s=0.0)
    small_follower.close()
    big_ms = _restart_ms(env, cache_dir, parts)
    small_ms = _restart_ms(small_env, small_dir, parts)
    report.add(
        Figure(
            "follower",
            f"restart catch-up, cache of {records:,}",
            big_ms,
            "ms",
            f"cache of {small:,}",
            small_ms,
            big_ms / small_ms,
            "does not grow with cache size",
            big_ms <= 3 * small_ms + 50,
            note="re-reads 0 records",
        )
    )


def _bench_authenticated(
    report: Report, info: stack.StackInfo, workdir: Path, records: int, parts: int, plain_cpu_rate: float
) -> None:
    """The same apply with every record authenticated and PROCESSOR_METADATA_AUTH=require (each
    record's MAC checked in the follower's intake), beside the apply without, in this run."""
    keys = workdir / f"metadata-keys-{uuid.uuid4().hex[:6]}"
    new_key(keys)
    env = {
        "PROCESSOR_METADATA_AUTH": "require",
        "PROCESSOR_METADATA_AUTH_KEYS": str(keys),
        "PROCESSOR_BOOTSTRAP_SERVERS": info.bootstrap_servers,
    }
    load_settings({**env, "PROCESSOR_METADATA_TOPIC": "unused"})  # installs the policy: writers sign
    try:
        print(f"[follower] publishing {records} authenticated metadata records ...", flush=True)
        topic = publish_metadata(info, records, parts, authentication.installed())
        settings = load_settings({**env, "PROCESSOR_METADATA_TOPIC": topic})
        cache_dir = workdir / f"follower-auth-{uuid.uuid4().hex[:6]}"
        follower = build_follower(settings, parts, cache_dir=cache_dir)
        t0, cpu0 = time.perf_counter(), time.process_time()
        stats = follower.materializer.catch_up(timeout_s=600, quiet_s=0.0)
        apply_s, apply_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
        follower.close()
    finally:
        authentication.install(authentication.OFF)
    assert stats.applied == records, stats
    cpu_rate = records / max(apply_cpu_s, 1e-9)
    report.add(
        Figure(
            "follower",
            "apply rate per CPU-second, every record authenticated (require)",
            cpu_rate,
            "rec/CPU-s",
            "without authentication",
            plain_cpu_rate,
            cpu_rate / plain_cpu_rate,
            ">= 0.9 of without",
            cpu_rate >= 0.9 * plain_cpu_rate,
            note=f"{apply_cpu_s:.2f} CPU-s in {apply_s:.2f} s",
        )
    )


def bench_scale(
    report: Report,
    workdir: Path,
    partitions: int = 1000,
    segments_per_partition: int = 1000,
    lookups: int = 20_000,
) -> None:
    total = partitions * segments_per_partition
    print(f"[scale] building a cache of {total:,} finished segments ...", flush=True)
    path = Path(tempfile.mkdtemp(prefix="scale-cache-", dir=workdir))
    cache = MetadataCache(path)
    batch: list[RawMessage] = []
    offset = 0
    t0 = time.perf_counter()
    for s in range(segments_per_partition):
        for p in range(partitions):
            seg = _segment(
                TopicPartition("t", p), s * 1000, s * 1000 + 999, SegmentState.COPY_SEGMENT_FINISHED
            )
            batch.append(RawMessage(0, offset, record_key(seg), encode_value(seg)))
            offset += 1
            if len(batch) >= 20_000:
                cache.apply_batch(batch)
                batch = []
    if batch:
        cache.apply_batch(batch)
    build_s = time.perf_counter() - t0
    cache.close()
    cache = MetadataCache(path)  # lookups against a reopened cache, as after a restart
    rng = random.Random(3)
    times = []
    max_offset = segments_per_partition * 1000 - 1
    for _ in range(lookups):
        tp = TopicPartition("t", rng.randrange(partitions))
        o = rng.randrange(max_offset)
        t = time.perf_counter()
        found = cache.finished_segment_for_offset(tp, o)
        times.append(time.perf_counter() - t)
        assert found is not None and found.start_offset <= o <= found.end_offset
    cache.close()
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    p99 = percentile(times, 99) * 1000
    report.add(
        Figure(
            "scale",
            f"segment-for-offset p99, {total:,} segments",
            p99,
            "ms",
            "p50",
            percentile(times, 50) * 1000,
            None,
            "< 1 ms",
            p99 < 1.0,
        )
    )
    report.add(Figure("scale", "cache size on disk", size / MiB, "MiB", note=f"{size / total:.0f} B/segment"))
    report.add(Figure("scale", "cache build rate", total / build_s, "rec/s"))
    shutil.rmtree(path, ignore_errors=True)
