"""Restore throughput next to a bare transactional producer writing the same records in the same run.

The archive is made by a worker from a loaded topic (100-byte values). The baseline produces the
very records the archive holds (decoded in advance, held in memory) with a librdkafka transactional
producer in transactions of the same size, calling ``produce`` per record the cheapest way, with no
delivery callbacks, progress records or archive reads: what a restore tool built on a Kafka client
library does at best. The restore does everything else on top: reading the archive from S3 (blocks
fetched ahead, CRCs checked), the progress records and offset maps, the maps in the bucket; it sends
the archived batches as they are. Each side runs twice, alternating; the best run of each counts
(the machine is shared).
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.offload import PARTITIONS, load_topic, run_worker_offload
from benchmarks.report import Figure, Report
from processor.config import Settings, load_settings
from processor.devstack import stack
from processor.kafka.clients import new_transactional_producer
from processor.restore.archive import ArchiveTopic
from processor.restore.plan import range_from, range_to
from processor.restore.run import PreparedRestore, RestoreRequest
from processor.restore.state import DEFAULT_TRANSACTION_RECORDS, RestoreOptions
from processor.restore.target import DEFAULT_PROGRESS_TOPIC, TargetCluster
from processor.segment.records import KafkaRecord
from processor.wiring.read_side import open_read_side

MiB = 1024 * 1024
TARGET_RATIO = 0.7
ROUNDS = 2


def bare_transactional_producer(
    target: TargetCluster, topic: str, records: dict[int, list[KafkaRecord]], per_txn: int
) -> float:
    """Seconds for one transactional producer to write ``records`` in transactions of ``per_txn``
    records (partitions interleaved in chunks, as the restore does), calling ``produce`` the
    cheapest way (arguments by position), as the restore does."""
    target.create_topic(topic, PARTITIONS)
    transactional_id = f"bench-bare-{uuid.uuid4().hex[:8]}"
    producer = new_transactional_producer(
        target.connection,
        transactional_id,
        transactional_id,
        **{"linger.ms": 5, "batch.size": 1024 * 1024, "queue.buffering.max.messages": 1_000_000},
    )
    producer.init_transactions(60)
    # the records as produce() takes them, prepared before the clock starts
    ready: dict[int, list[tuple[bytes | None, bytes | None, int, Any]]] = {
        p: [(r.value, r.key, r.timestamp, list(r.headers) or None) for r in rs] for p, rs in records.items()
    }
    chunks = [
        (p, rs[i : i + 2000])
        for i in range(0, max(map(len, ready.values())), 2000)
        for p, rs in sorted(ready.items())
    ]
    produce = producer.produce
    t0 = time.perf_counter()
    in_txn = 0
    producer.begin_transaction()
    for p, chunk in chunks:
        for value, key, timestamp, headers in chunk:
            while True:
                try:
                    produce(topic, value, key, p, None, None, timestamp, headers)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.poll(0)
        in_txn += len(chunk)
        if in_txn >= per_txn:
            producer.commit_transaction(60)
            producer.begin_transaction()
            in_txn = 0
    producer.commit_transaction(60)
    return time.perf_counter() - t0


def timed_restore(
    settings: Settings, archive: ArchiveTopic, target: TargetCluster, to_topic: str
) -> tuple[float, int]:
    request = RestoreRequest(
        archive.topic,
        None,
        to_topic,
        range_from(None, None),
        range_to(None, None),
        "same",
        f"bench.{to_topic}",
        DEFAULT_PROGRESS_TOPIC,
        target,
        RestoreOptions(),
    )
    prepared = PreparedRestore(request, archive, settings.s3_bucket, settings.s3_prefix)
    try:
        t0 = time.perf_counter()
        summary = prepared.execute()
        return time.perf_counter() - t0, summary.records
    finally:
        prepared.close()


def bench_restore(
    report: Report, info: stack.StackInfo, workdir: Path, records: int, rounds: int = ROUNDS
) -> None:
    """``rounds``: each measured ``rounds`` times, the best of each reported (the smoke test runs one)."""
    tag = uuid.uuid4().hex[:8]
    print(f"[restore] loading and archiving {records} records of 100 bytes ...", flush=True)
    topic = load_topic(info, f"bench-restore-{tag}", 100, records * 110)
    env = {
        **{k: v for k, v in info.env().items() if k.startswith("PROCESSOR_")},
        "PROCESSOR_METADATA_TOPIC": f"__bench_restore_meta_{tag}",
        "PROCESSOR_S3_PREFIX": f"bench-restore-{tag}",
        "PROCESSOR_S3_REGION": "us-east-1",
    }
    run_worker_offload(info, topic, workdir, 256 * MiB, 16 * MiB, extra_env=env)
    settings = load_settings(env)
    target = TargetCluster(info.bootstrap_servers)
    side = open_read_side(settings, topic.name, None)
    archive = ArchiveTopic(side.reader, side.follower.cache, topic.name)
    try:
        _compare(report, settings, archive, target, tag, rounds)
    finally:
        side.close()


def _compare(
    report: Report, settings: Settings, archive: ArchiveTopic, target: TargetCluster, tag: str, rounds: int
) -> None:
    in_memory = {p: archive.decoded(p) for p in archive.partitions()}
    count = sum(map(len, in_memory.values()))
    bare: list[float] = []
    restored: list[float] = []
    for n in range(rounds):
        print(f"[restore] round {n + 1}: bare transactional producer, then processor restore ...", flush=True)
        bare.append(
            count
            / bare_transactional_producer(
                target, f"bench-bare-{tag}-{n}", in_memory, DEFAULT_TRANSACTION_RECORDS
            )
        )
        seconds, done = timed_restore(settings, archive, target, f"bench-restored-{tag}-{n}")
        assert done == count, f"restored {done} of {count} records"
        restored.append(count / seconds)
    best_bare, best_restore = max(bare), max(restored)
    ratio = best_restore / best_bare
    report.add(
        Figure(
            "restore",
            "restore throughput",
            best_restore,
            "rec/s",
            "bare txn producer",
            best_bare,
            ratio,
            f">= {TARGET_RATIO} x baseline",
            ratio >= TARGET_RATIO,
            f"{count} records of 100 B, {PARTITIONS} partitions; runs: restore "
            f"{[round(r) for r in restored]}, bare {[round(b) for b in bare]}",
        )
    )
