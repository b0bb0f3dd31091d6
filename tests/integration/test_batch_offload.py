"""Record batches whole, on the real stack: every compression codec, a transactional topic with
aborted transactions, PROCESSOR_ARCHIVE_COMPRESSION=zstd, and a leader that moves. Each is read
back through the remote reader and compared with what a read_committed confluent-kafka consumer
returns from the broker: offsets, timestamps and their type, keys, values, headers (null vs empty).

Tansu (the local broker) stores transactional batches and their markers but returns no
aborted-transaction list in fetch responses, so its read_committed consumers see aborted records
too; the test therefore checks "what a read_committed consumer sees" against the broker itself, and
``tests/unit/test_read_committed.py`` checks the aborted-list filtering on hand-built batches.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import boto3
import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP

from processor.config import load_settings
from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from processor.metadata.topic_io import load_remote_state
from processor.reader.remote_reader import RemoteReader
from processor.segment.blocks import decode_block_header
from processor.segment.records import KafkaRecord, TimestampType
from processor.wiring.follower import build_follower, build_reader
from processor.wiring.storage import build_storage
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
TXN = "wire-txn"
PARTITIONS = 2
COUNT = 3000


def consumed(bootstrap: str, tp: TopicPartition) -> list[KafkaRecord]:
    """Everything a read_committed consumer gets from the broker for ``tp``."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "wire-check",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
        }
    )
    _low, high = consumer.get_watermark_offsets(KafkaTP(tp.topic, tp.partition), timeout=10)
    consumer.assign([KafkaTP(tp.topic, tp.partition, 0)])
    out: list[KafkaRecord] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is None:
            if consumer.position([KafkaTP(tp.topic, tp.partition)])[0].offset >= high:
                break
            continue
        if msg.error():
            continue
        ts_type, ts = msg.timestamp()
        headers = cast(list[tuple[str, bytes | None]], msg.headers() or [])
        offset = cast(int, msg.offset())
        out.append(KafkaRecord(offset, ts, TimestampType(ts_type), msg.key(), msg.value(), tuple(headers)))
    consumer.close()
    return out


def read_all(reader: RemoteReader, tp: TopicPartition) -> list[KafkaRecord]:
    out: list[KafkaRecord] = []
    offset = 0
    while True:
        try:
            got = reader.read_from_offset(tp, offset, max_records=1000)
        except Exception:
            return out
        if not got:
            return out
        out += got
        offset = got[-1].offset + 1


def produce_transactions(bootstrap: str) -> None:
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": "wire-txn-producer", "linger.ms": 2}
    )
    producer.init_transactions(30)
    for n in range(12):
        producer.begin_transaction()
        for i in range(50):
            key = None if i % 7 == 0 else b"k%d" % i
            producer.produce(TXN, value=b"txn-%d-%d" % (n, i), key=key, partition=i % PARTITIONS)
        producer.flush(30)  # the records reach the log, then the transaction ends
        if n % 3 == 1:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)


def reader_for(env: dict[str, str], cache: Path) -> RemoteReader:
    settings = load_settings({**env, "PROCESSOR_S3_REGION": "us-east-1"})
    follower = build_follower(settings, 4, cache_dir=cache)
    follower.materializer.catch_up()
    return build_reader(settings, build_storage(settings), follower.rlmm)


def wait_all(bootstrap: str, meta: str, tps: list[TopicPartition], worker: WorkerProcess) -> None:
    ends = {tp: max(r.offset for r in consumed(bootstrap, tp)) for tp in tps}
    wait_offloaded(bootstrap, meta, ends, 180, worker.proc)


@pytest.fixture(scope="module")
def keep_worker(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("wire")
    admin = new_admin(local_stack.bootstrap_servers, "t")
    topics = [f"wire-{c}" for c in CODECS] + [TXN]
    for topic in topics:
        ensure_topic(admin, topic, PARTITIONS, 1, {})
    for codec in CODECS:
        produce_samples(
            local_stack.bootstrap_servers,
            f"wire-{codec}",
            COUNT,
            PARTITIONS,
            big_every=1000,
            producer_config={"compression.type": codec, "batch.size": 32 * 1024},
        )
    produce_transactions(local_stack.bootstrap_servers)
    env = worker_env(
        local_stack,
        tmp / "data",
        ",".join(topics),
        PROCESSOR_METADATA_TOPIC="__remote_log_metadata_wire",
        PROCESSOR_SEGMENT_BYTES=str(256 * 1024),
        PROCESSOR_BLOCK_BYTES=str(32 * 1024),
        PROCESSOR_SEGMENT_MS="1000",
        PROCESSOR_S3_PREFIX="wire",
    )
    worker = WorkerProcess(env, tmp / "worker.log")
    try:
        tps = [TopicPartition(t, p) for t in topics for p in range(PARTITIONS)]
        wait_all(local_stack.bootstrap_servers, "__remote_log_metadata_wire", tps, worker)
        yield {"env": env, "reader": reader_for(env, tmp / "cache"), "tmp": tmp}
    finally:
        worker.stop()


@pytest.mark.parametrize("codec", CODECS)
def test_every_codec_offloads_whole_batches_and_reads_back_byte_exact(
    local_stack: StackInfo, keep_worker: dict[str, Any], codec: str
) -> None:
    reader: RemoteReader = keep_worker["reader"]
    for p in range(PARTITIONS):
        tp = TopicPartition(f"wire-{codec}", p)
        want = consumed(local_stack.bootstrap_servers, tp)
        assert len(want) == COUNT // PARTITIONS
        assert read_all(reader, tp) == want
        middle = want[len(want) // 2 + 3 :][:50]  # mid-batch: leading records of the batch skipped
        assert reader.read_from_offset(tp, middle[0].offset, max_records=50) == middle
        segments = list(reader.lookup.finished_segments(tp, 0))
        assert all(s.segment_format_version == 2 for s in segments)


def test_the_producers_compression_stays_in_s3(local_stack: StackInfo, keep_worker: dict[str, Any]) -> None:
    """A zstd topic's batches are stored as fetched: compressed, byte for byte (codec bits intact)."""
    s3 = boto3.client("s3", endpoint_url=local_stack.s3_endpoint_url, region_name="us-east-1")
    reader: RemoteReader = keep_worker["reader"]
    segment = next(iter(reader.lookup.finished_segments(TopicPartition("wire-zstd", 0), 0)))
    data = s3.get_object(Bucket=local_stack.bucket, Key=segment.data_object_key)["Body"].read()
    header = decode_block_header(data)
    assert header.format_version == 2 and header.payload_codec == 0
    attributes = int.from_bytes(data[128 + 12 + 21 : 128 + 12 + 23], "big")
    assert attributes & 0x07 == 4  # the first entry is a zstd record batch


def test_a_transactional_topic_reads_back_as_a_read_committed_consumer_sees_it(
    local_stack: StackInfo, keep_worker: dict[str, Any]
) -> None:
    reader: RemoteReader = keep_worker["reader"]
    state, _ = load_remote_state(local_stack.bootstrap_servers, "__remote_log_metadata_wire")
    for p in range(PARTITIONS):
        tp = TopicPartition(TXN, p)
        want = consumed(local_stack.bootstrap_servers, tp)
        assert want and read_all(reader, tp) == want
        finished = state.partition(tp).finished()
        assert coverage_gaps_and_overlaps(finished) == [] and finished[0].start_offset == 0
        # transaction markers are offsets no record has: they are covered, never returned
        offsets = {r.offset for r in want}
        assert max(offsets) <= finished[-1].end_offset
        assert len(offsets) < finished[-1].end_offset + 1


def test_archive_zstd_stores_an_uncompressed_topic_compressed(local_stack: StackInfo, tmp_path: Path) -> None:
    topic = "wire-archive-zstd"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, PARTITIONS, 1, {})
    produce_samples(
        local_stack.bootstrap_servers,
        topic,
        COUNT,
        PARTITIONS,
        big_every=0,
        producer_config={"batch.size": 64 * 1024},
    )
    meta = "__remote_log_metadata_wire_zstd"
    env = worker_env(
        local_stack,
        tmp_path / "data",
        topic,
        PROCESSOR_METADATA_TOPIC=meta,
        PROCESSOR_SEGMENT_BYTES=str(256 * 1024),
        PROCESSOR_SEGMENT_MS="1000",
        PROCESSOR_S3_PREFIX="wire-zstd",
        PROCESSOR_BLOCK_BYTES=str(64 * 1024),
        PROCESSOR_ARCHIVE_COMPRESSION="zstd",
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    try:
        wait_all(local_stack.bootstrap_servers, meta, tps, worker)
    finally:
        worker.stop()
    reader = reader_for(env, tmp_path / "cache")
    s3 = boto3.client("s3", endpoint_url=local_stack.s3_endpoint_url, region_name="us-east-1")
    stored = raw = 0
    for tp in tps:
        want = consumed(local_stack.bootstrap_servers, tp)
        assert read_all(reader, tp) == want
        raw += sum(len(r.value or b"") + len(r.key or b"") for r in want)
        for seg in reader.lookup.finished_segments(tp, 0):
            data = s3.get_object(Bucket=local_stack.bucket, Key=seg.data_object_key)["Body"].read()
            assert decode_block_header(data).payload_codec == 1
            stored += len(data)
    assert stored < raw  # the sample values are compressible: the bucket holds less than the records


def test_a_leader_that_moves_leaves_contiguous_byte_exact_coverage(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    topic = "wire-moves"
    meta = "__remote_log_metadata_wire_moves"
    parts = 4
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, parts, 1, {})
    produce_samples(
        local_stack.bootstrap_servers,
        topic,
        4000,
        parts,
        big_every=0,
        producer_config={"batch.size": 16 * 1024},
    )
    common = {
        "PROCESSOR_METADATA_TOPIC": meta,
        "PROCESSOR_SEGMENT_BYTES": str(64 * 1024),
        "PROCESSOR_BLOCK_BYTES": str(16 * 1024),
        "PROCESSOR_SEGMENT_MS": "500",
        "PROCESSOR_S3_PREFIX": "wire-moves",
    }
    a = WorkerProcess(
        worker_env(local_stack, tmp_path / "a", topic, PROCESSOR_WORKER_ID="a", **common), tmp_path / "a.log"
    )
    b = WorkerProcess(
        worker_env(local_stack, tmp_path / "b", topic, PROCESSOR_WORKER_ID="b", **common), tmp_path / "b.log"
    )
    tps = [TopicPartition(topic, p) for p in range(parts)]
    try:
        wait_all(local_stack.bootstrap_servers, meta, tps, a)
        assert b.proc.poll() is None
        assert a.stop() == 0  # one leader goes away; the other takes its partitions over
        produce_samples(
            local_stack.bootstrap_servers,
            topic,
            4000,
            parts,
            start=4000,
            big_every=0,
            producer_config={"batch.size": 16 * 1024},
        )
        wait_all(local_stack.bootstrap_servers, meta, tps, b)
    finally:
        a.stop()
        b.stop()
    state, _ = load_remote_state(local_stack.bootstrap_servers, meta)
    writers = set()
    reader = reader_for({**worker_env(local_stack, tmp_path / "r", topic), **common}, tmp_path / "cache")
    for tp in tps:
        finished = state.partition(tp).finished()
        assert coverage_gaps_and_overlaps(finished) == [] and finished[0].start_offset == 0
        writers |= {s.writer_id for s in finished}
        assert read_all(reader, tp) == consumed(local_stack.bootstrap_servers, tp)
    assert "b" in writers
