"""What the restore tests share: deterministic source records, an archive made by a real worker,
the restore CLI as a child process, and the target read back as read_committed sees it.

Tansu (the embedded broker) writes transaction markers but sends no aborted-transaction list, so
its read_committed consumers see aborted records too. The target is therefore read as raw batches
and resolved against their markers (processor/restore/transaction_view.py): exactly what a Kafka
broker's read_committed fetch returns, computed from the same markers.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka import TopicPartition as KafkaTP

from processor.config import load_settings
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import KafkaTarget, new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.restore.archive import ArchiveTopic
from processor.restore.log_reader import read_partition_log
from processor.restore.target import DEFAULT_PROGRESS_TOPIC, TargetCluster
from processor.restore.transaction_view import Outcome, resolve
from processor.segment.entries_v2 import batch_records
from processor.segment.records import KafkaRecord
from processor.wiring.read_side import open_read_side
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.cli import CliResult
from tests.support.cli import run_cli as run_in_process
from tests.support.metadata_watch import wait_offloaded

BASE_TS = 1_700_000_000_000
RUNNER = [sys.executable, "-m", "processor"]


def source_record(i: int) -> tuple[bytes | None, bytes | None, list[Any], int]:
    """Small records of every shape: null and empty keys and values, headers with duplicate names
    and null values, CreateTime timestamps (never 0: librdkafka reads 0 as "now")."""
    shape = i % 11
    key: bytes | None = b"k%d" % (i % 1013)
    value: bytes | None = (b"v%d-" % i) * (1 + i % 5)
    headers: list[Any] = []
    if shape == 1:
        key = None
    elif shape == 2:
        value = None
    elif shape == 3:
        key, value = b"", b""
    elif shape == 4:
        headers = [("trace", b"%d" % i), ("trace", b"again"), ("null", None), ("empty", b"")]
    elif shape == 5:
        headers = [("bin", bytes([i % 256, 0, 255]))]
    return key, value, headers, BASE_TS + i * 3 + (i % 7)


def _produce(producer: Producer, topic: str, i: int, partition: int) -> None:
    key, value, headers, ts = source_record(i)
    while True:
        try:
            producer.produce(topic, value, key, partition=partition, timestamp=ts, headers=headers or None)
            return
        except BufferError:
            producer.poll(0.1)


def produce_plain(bootstrap: str, topic: str, count: int, partitions: int, start: int = 0) -> None:
    ensure_topic(new_admin(bootstrap, "t"), topic, partitions, 1, {})
    producer = new_producer(bootstrap, "restore-test", **{"linger.ms": 5, "batch.size": 256 * 1024})
    for i in range(start, start + count):
        _produce(producer, topic, i, i % partitions)
    assert producer.flush(60) == 0


FOREIGN_KEY = b"foreign-"


def is_foreign(record: KafkaRecord) -> bool:
    """Records someone else wrote into the target (never restored ones: source keys differ)."""
    return (record.key or b"").startswith(FOREIGN_KEY)


def produce_foreign(bootstrap: str, topic: str, count: int, partitions: int) -> None:
    ensure_topic(new_admin(bootstrap, "t"), topic, partitions, 1, {})
    producer = new_producer(bootstrap, "restore-test-foreign", **{"linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"x" * (i % 50), FOREIGN_KEY + b"%d" % i, partition=i % partitions)
    assert producer.flush(60) == 0


class ForeignWriter:
    """Another producer writing into the target, a record at a time, while the restore runs."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, per_second: int = 3000) -> None:
        self._producer = new_producer(bootstrap, "restore-test-concurrent", **{"linger.ms": 0})
        self._topic, self._partitions, self._pause = topic, partitions, 1 / per_second
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.count = 0

    def _run(self) -> None:
        while not self._stop.is_set():
            i = self.count
            self._producer.produce(
                self._topic, b"y", FOREIGN_KEY + b"c%d" % i, partition=i % self._partitions
            )
            self._producer.poll(0)
            self.count += 1
            self._stop.wait(self._pause)  # pacing, not waiting for a condition

    def __enter__(self) -> ForeignWriter:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        assert self._producer.flush(60) == 0


def produce_transactional(bootstrap: str, topic: str, count: int, partitions: int, per_txn: int = 97) -> None:
    """Transactions of ``per_txn`` records over every partition; every fourth one aborted."""
    ensure_topic(new_admin(bootstrap, "t"), topic, partitions, 1, {})
    producer = new_producer(
        bootstrap, "restore-test-txn", **{"transactional.id": f"src-{topic}", "linger.ms": 5}
    )
    producer.init_transactions(30)
    for n, first in enumerate(range(0, count, per_txn)):
        producer.begin_transaction()
        for i in range(first, min(first + per_txn, count)):
            _produce(producer, topic, i, i % partitions)
        producer.flush(30)
        if n % 4 == 3:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)


def high_watermarks(
    bootstrap: str, topic: str, partitions: int, timeout_s: float = 60
) -> dict[TopicPartition, int]:
    """Each partition's high watermark, asked again while the broker answers with an error (a topic
    the restore just created: a client's first metadata can name no leader yet, NOT_LEADER)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "restore-test-hw"})
    deadline = time.monotonic() + timeout_s
    try:
        ends: dict[TopicPartition, int] = {}
        for p in range(partitions):
            while True:
                try:
                    ends[TopicPartition(topic, p)] = consumer.get_watermark_offsets(
                        KafkaTP(topic, p), timeout=10
                    )[1]
                    break
                except KafkaException:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        return ends
    finally:
        consumer.close()


def archive_topics(
    stack: StackInfo,
    tmp: Path,
    topics: dict[str, int],
    metadata_topic: str,
    prefix: str,
    timeout_s: float = 600,
) -> dict[str, str]:
    """Run a worker until every record of ``topics`` (name -> partitions) is in finished segments;
    returns the environment the CLI needs for this archive."""
    env = worker_env(
        stack,
        tmp / "worker-data",
        ",".join(topics),
        PROCESSOR_METADATA_TOPIC=metadata_topic,
        PROCESSOR_S3_PREFIX=prefix,
        PROCESSOR_SEGMENT_BYTES=str(512 * 1024),
        PROCESSOR_BLOCK_BYTES=str(64 * 1024),
        PROCESSOR_SEGMENT_MS="1000",
    )
    ends = {
        tp: hw - 1
        for topic, n in topics.items()
        for tp, hw in high_watermarks(stack.bootstrap_servers, topic, n).items()
    }
    worker = WorkerProcess(env, tmp / "worker.log")
    try:
        # a transactional partition's last offset is a marker: finished coverage reaches it
        wait_offloaded(stack.bootstrap_servers, metadata_topic, ends, timeout_s, worker.proc)
    finally:
        worker.stop()
    return cli_env(stack, metadata_topic, prefix)


def cli_env(stack: StackInfo, metadata_topic: str, prefix: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
    env.update(stack.env())
    env.update({"PROCESSOR_METADATA_TOPIC": metadata_topic, "PROCESSOR_S3_PREFIX": prefix})
    return env


def archived(env: dict[str, str], topic: str) -> dict[int, list[KafkaRecord]]:
    """Every archived record of ``topic`` by partition, through the restore's own archive reader."""
    settings = load_settings({**env, "PROCESSOR_S3_REGION": "us-east-1"})
    side = open_read_side(settings, topic, None)
    archive = ArchiveTopic(side.reader, side.follower.cache, topic)
    try:
        return {p: archive.decoded(p) for p in sorted(archive.partitions())}
    finally:
        side.close()


def committed_target(bootstrap: KafkaTarget, tp: TopicPartition) -> tuple[list[KafkaRecord], int]:
    """The records of ``tp`` a read_committed consumer gets, and how many batches were aborted."""
    view = resolve(read_partition_log(bootstrap, tp))
    records = [r for b in view.visible() for r in batch_records(b.batch)]
    return records, sum(1 for b in view.batches if b.outcome is Outcome.ABORTED)


def content(records: list[KafkaRecord]) -> list[tuple[Any, ...]]:
    """What a restore keeps of a record: everything but its offset."""
    return [(r.key, r.value, r.headers, r.timestamp) for r in records]


def run_cli(args: list[str], env: dict[str, str]) -> CliResult:
    """``processor ARGS`` in this process (tests/support/cli.py); the kill tests start children."""
    return run_in_process(env, *args)


def committed_transactions(bootstrap: str) -> int:
    """How far the restore progress topic has grown: each committed restore transaction adds
    records and a marker to it (0 before the topic exists)."""
    target = TargetCluster(bootstrap)
    partitions = target.partition_count(DEFAULT_PROGRESS_TOPIC)
    return sum(high_watermarks(bootstrap, DEFAULT_PROGRESS_TOPIC, partitions).values()) if partitions else 0


def kill_at_a_random_moment(
    args: list[str],
    env: dict[str, str],
    rng: random.Random,
    log: Path,
    size: Callable[[], int],
    window_s: float,
    may_be_early: bool = True,
) -> str:
    """Start the restore and SIGKILL it at a random moment: one time in four (if ``may_be_early``)
    anywhere in its first seconds (start-up, fencing, planning), otherwise within ``window_s``
    after its first transaction committed (``size()`` grew): while records flow, almost always
    inside an open transaction. Returns what the kill hit."""
    baseline = size()
    with log.open("ab") as out:
        proc = subprocess.Popen(RUNNER + args, env=env, stdout=out, stderr=subprocess.STDOUT)
    early = may_be_early and rng.random() < 0.25
    if not early:
        while proc.poll() is None and size() <= baseline:
            time.sleep(0.02)  # polling a condition (a commit), not a fixed wait
    delay = rng.uniform(0, 3.0 if early else window_s)
    try:
        proc.wait(timeout=delay)
        return f"finished before the kill (exit {proc.returncode})"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return f"killed {delay:.2f} s after {'start' if early else 'its first commit'}"
