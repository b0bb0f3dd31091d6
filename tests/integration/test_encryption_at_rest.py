"""Encryption at rest on the real stack: a worker seals every segment under a fresh data key wrapped
by a key ring; every reader opens them; the bucket holds no plaintext; damage, a wrong key and a
missing key each give an error naming the segment; rotation re-wraps; shredding one topic makes its
archive unreadable as "shredded" while the other topic reads on; the metadata rebuilds from the
bucket alone."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from processor.config import Settings, load_settings
from processor.crypto.keyring import new_key
from processor.crypto.keys import WrappedKey
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.errors import CorruptObjectError, InvalidRangeError, SegmentKeyError, SegmentShreddedError
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata.manifest import decode_manifest, manifest_key
from processor.reader.remote_reader import RemoteReader
from processor.wiring.follower import build_follower, build_reader
from processor.wiring.gateway_server import GatewayServer
from processor.wiring.storage import build_storage
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.archive import objects_restored, s3_client
from tests.support.cli import run_cli
from tests.support.gateway_thread import gateway_running
from tests.support.kms_server import moto_kms
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

PARTITIONS = 2
COUNT = 1200
MARKER = b"plaintext-marker-7f3a"
BASE_TS = 1_700_000_000_000


@dataclass(frozen=True)
class Produced:
    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp: int


def _produce(bootstrap: str, topic: str) -> dict[int, list[Produced]]:
    """COUNT records, each value holding MARKER (what a grep of the bucket must not find)."""
    producer = new_producer(bootstrap, "enc-test", **{"enable.idempotence": True, "batch.size": 16 * 1024})
    out: dict[int, list[Produced]] = {p: [] for p in range(PARTITIONS)}
    for i in range(COUNT):
        p = i % PARTITIONS
        rec = Produced(
            f"k{i}".encode(), MARKER + b" record %d " % i + b"x" * (i % 300), (("h", b"%d" % i),), BASE_TS + i
        )
        producer.produce(
            topic, rec.value, rec.key, partition=p, headers=list(rec.headers), timestamp=rec.timestamp
        )
        out[p].append(rec)
        producer.poll(0)
    assert producer.flush(30) == 0
    return out


@dataclass
class Encrypted:
    info: StackInfo
    env: dict[str, str]
    keyring: Path
    topics: dict[str, dict[int, list[Produced]]]  # topic -> partition -> records in offset order
    tmp: Path

    @property
    def cli_env(self) -> dict[str, str]:
        keep = ("PROCESSOR_METADATA_TOPIC", "PROCESSOR_S3_PREFIX", "PROCESSOR_ENCRYPTION_KEYRING")
        return {**self.info.env(), **{k: self.env[k] for k in keep}, "PROCESSOR_S3_REGION": "us-east-1"}

    def settings(self, **overrides: str) -> Settings:
        return load_settings({**self.cli_env, **overrides})


@pytest.fixture(scope="module")
def encrypted(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Encrypted]:
    """Two topics offloaded by a worker with PROCESSOR_ENCRYPTION=keyring; the first topic has a key
    of its own in the ring, the second uses the ring's default key. The worker is stopped."""
    tmp = tmp_path_factory.mktemp("encrypted")
    tag = uuid.uuid4().hex[:6]
    names = [f"enc-own-{tag}", f"enc-shared-{tag}"]
    keyring = tmp / "keyring"
    keyring.mkdir()
    new_key(keyring)
    new_key(keyring, topic=names[0])
    topics: dict[str, dict[int, list[Produced]]] = {}
    for name in names:
        ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), name, PARTITIONS, 1, {})
        topics[name] = _produce(local_stack.bootstrap_servers, name)
    env = worker_env(
        local_stack,
        tmp / "data",
        ",".join(names),
        PROCESSOR_METADATA_TOPIC=f"__meta_enc_{tag}",
        PROCESSOR_S3_PREFIX=f"enc-{tag}",
        PROCESSOR_SEGMENT_BYTES=str(96 * 1024),
        PROCESSOR_BLOCK_BYTES=str(16 * 1024),
        PROCESSOR_SEGMENT_MS="1000",
        PROCESSOR_BUFFER_BYTES=str(16 * 1024 * 1024),
        PROCESSOR_ENCRYPTION="keyring",
        PROCESSOR_ENCRYPTION_KEYRING=str(keyring),
    )
    worker = WorkerProcess(env, tmp / "worker.log")
    ends = {TopicPartition(t, p): len(rs) - 1 for t, parts in topics.items() for p, rs in parts.items()}
    try:
        wait_offloaded(local_stack.bootstrap_servers, env["PROCESSOR_METADATA_TOPIC"], ends, 180, worker.proc)
    finally:
        worker.stop()
    yield Encrypted(local_stack, env, keyring, topics, tmp)


@pytest.fixture
def reader_for(encrypted: Encrypted, tmp_path: Path) -> Iterator[Any]:
    """Readers over the archive with the settings given (the key ring by default)."""
    opened: list[Any] = []

    def make(**overrides: str) -> RemoteReader:
        settings = encrypted.settings(**overrides)
        follower = build_follower(settings, 4, cache_dir=tmp_path / f"cache-{len(opened)}")
        follower.materializer.catch_up()
        storage = build_storage(settings)
        opened.append((follower, storage))
        return build_reader(settings, storage, follower.rlmm)

    yield make
    for follower, storage in opened:
        follower.close()
        storage.close()


def _same(got: Any, want: Produced) -> bool:
    return (got.key, got.value, tuple(got.headers), got.timestamp) == (
        want.key,
        want.value,
        want.headers,
        want.timestamp,
    )


def _read_all(reader: RemoteReader, tp: TopicPartition, count: int) -> list[Any]:
    return reader.read_from_offset(tp, 0, max_records=count, max_bytes=1 << 40)


def test_records_read_back_byte_exact_and_the_bucket_holds_no_plaintext(encrypted, reader_for) -> None:
    reader = reader_for()
    for topic, parts in encrypted.topics.items():
        for p, want in parts.items():
            got = _read_all(reader, TopicPartition(topic, p), len(want))
            assert [g.offset for g in got] == list(range(len(want)))
            assert all(_same(g, w) for g, w in zip(got, want, strict=True))
            assert all(
                s.custom_metadata for s in reader.lookup.finished_segments(TopicPartition(topic, p), 0)
            )
    s3 = s3_client(encrypted.info)
    listed = s3.list_objects_v2(Bucket=encrypted.info.bucket, Prefix=encrypted.env["PROCESSOR_S3_PREFIX"])
    keys = [o["Key"] for o in listed["Contents"]]
    assert any(k.endswith(".log") for k in keys)
    for key in keys:
        body = s3.get_object(Bucket=encrypted.info.bucket, Key=key)["Body"].read()
        assert MARKER not in body, f"{key} holds plaintext"


def test_a_reader_without_the_key_ring_or_with_another_ring_fails_naming_the_segment(
    encrypted, reader_for, tmp_path
) -> None:
    topic = next(iter(encrypted.topics))
    tp = TopicPartition(topic, 0)
    other = tmp_path / "other-ring"
    other.mkdir()
    new_key(other)
    for overrides in ({"PROCESSOR_ENCRYPTION_KEYRING": ""}, {"PROCESSOR_ENCRYPTION_KEYRING": str(other)}):
        reader = reader_for(**overrides)
        first = next(iter(reader.lookup.finished_segments(tp, 0)))
        with pytest.raises(SegmentKeyError, match=str(first.segment_id.id)) as failure:
            _read_all(reader, tp, 10)
        assert not isinstance(failure.value, SegmentShreddedError)


def test_a_flipped_byte_or_a_swapped_block_never_gives_a_wrong_record(encrypted, reader_for) -> None:
    topic = next(iter(encrypted.topics))
    tp = TopicPartition(topic, 1)
    reader = reader_for()
    segment = next(iter(reader.lookup.finished_segments(tp, 0)))
    index = reader.fetch.index(segment)
    assert len(index.blocks) >= 2
    first, second = index.blocks[0], index.blocks[1]
    key = segment.data_object_key
    with objects_restored(encrypted.info, key) as s3:
        data = bytearray(s3.get_object(Bucket=encrypted.info.bucket, Key=key)["Body"].read())
        data[first.position + first.length // 2] ^= 0x01
        s3.put_object(Bucket=encrypted.info.bucket, Key=key, Body=bytes(data))
        with pytest.raises(CorruptObjectError, match=str(segment.segment_id.id)):
            _read_all(reader_for(), tp, 10)
    with objects_restored(encrypted.info, key) as s3:
        data = bytearray(s3.get_object(Bucket=encrypted.info.bucket, Key=key)["Body"].read())
        a = bytes(data[first.position : first.position + first.length])
        b = bytes(data[second.position : second.position + second.length])
        swapped = data[: first.position] + b + a + data[second.position + second.length :]
        s3.put_object(Bucket=encrypted.info.bucket, Key=key, Body=bytes(swapped))
        with pytest.raises(CorruptObjectError):
            _read_all(reader_for(), tp, 10)
    with objects_restored(encrypted.info, key) as s3:
        data = s3.get_object(Bucket=encrypted.info.bucket, Key=key)["Body"].read()
        s3.put_object(Bucket=encrypted.info.bucket, Key=key, Body=data[: len(data) - 7])
        # a short read of the object (its key names the segment), as for an object in the clear
        with pytest.raises((CorruptObjectError, InvalidRangeError), match=str(segment.segment_id.id)):
            _read_all(reader_for(), tp, segment.end_offset + 1)


def test_fetch_and_verify_commands_read_the_encrypted_archive(encrypted) -> None:
    topic = next(iter(encrypted.topics))
    want = encrypted.topics[topic][0]
    got = run_cli(
        encrypted.cli_env, "fetch", "--topic", topic, "--partition", "0", "--offset", "5",
        "--max-records", "3", "--json",
    )  # fmt: skip
    assert got.returncode == 0, got.stderr
    rows = [json.loads(line) for line in got.stdout.splitlines() if line.strip()]
    assert [r["offset"] for r in rows] == [5, 6, 7]
    verify = run_cli(encrypted.cli_env, "verify", "--topic", topic, "--json")
    report = json.loads(verify.stdout)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert report["clean"] and report["encrypted_segments"] == report["segments_checked"] > 0
    assert report["plaintext_segments"] == 0
    assert [base64.b64decode(r["value"]) for r in rows] == [w.value for w in want[5:8]]


def test_a_kafka_client_reads_the_encrypted_archive_through_the_gateway(
    encrypted, tmp_path, local_stack
) -> None:
    topic = next(iter(encrypted.topics))
    port, web = free_port(), free_port()
    settings = encrypted.settings(
        PROCESSOR_DATA_DIR=str(tmp_path / "gateway-data"),
        PROCESSOR_GATEWAY_HOST="127.0.0.1",
        PROCESSOR_GATEWAY_PORT=str(port),
        PROCESSOR_GATEWAY_ARCHIVE_READS="archived",
        PROCESSOR_GATEWAY_NODE_IDS=local_stack.gateway_node_ids,
        PROCESSOR_WEB_HOST="127.0.0.1",
        PROCESSOR_WEB_PORT=str(web),
    )
    want = encrypted.topics[topic][1]
    with gateway_running(GatewayServer.build(settings)):
        consumer = Consumer(
            {"bootstrap.servers": f"127.0.0.1:{port}", "group.id": "enc-gw", "fetch.wait.max.ms": 10}
        )
        consumer.assign([KafkaTP(topic, 1, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 60
        while len(got) < len(want) and time.monotonic() < deadline:
            got += [m for m in consumer.consume(500, 1.0) if m.error() is None]
        consumer.close()
    assert [m.offset() for m in got] == list(range(len(want)))
    assert [(m.key(), m.value()) for m in got] == [(w.key, w.value) for w in want]


def test_the_spark_source_plans_and_reads_the_encrypted_archive(encrypted, tmp_path) -> None:
    """What a Spark task runs (the reader's plan and read_partition), in this process: the source's
    option ``encryption.keyring`` names the key ring."""
    from pyspark.sql.datasource import InputPartition

    from processor.spark.tiered_records import TieredRecordsReader
    from processor.spark_sources.entry import record_options

    topic = list(encrypted.topics)[1]
    options = {
        "kafka.bootstrap.servers": str(encrypted.info.bootstrap_servers),
        "metadata.topic": encrypted.env["PROCESSOR_METADATA_TOPIC"],
        "metadata.cacheDir": str(tmp_path / "spark-meta"),
        "s3.endpoint": encrypted.info.s3_endpoint_url,
        "s3.bucket": encrypted.info.bucket,
        "s3.prefix": encrypted.env["PROCESSOR_S3_PREFIX"],
        "s3.region": "us-east-1",
        "encryption.keyring": str(encrypted.keyring),
        "subscribe": topic,
        "includeHeaders": "true",
    }
    reader = TieredRecordsReader(record_options(options, environ={}))
    rows: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for piece in reader.plan():
        for batch in reader.read(InputPartition(piece)):
            for row in batch.to_pylist():
                rows[row["partition"]].append((row["offset"], row["key"], row["value"]))
    for p, want in encrypted.topics[topic].items():
        assert sorted(rows[p]) == [(i, w.key, w.value) for i, w in enumerate(want)]


def test_restore_replays_the_encrypted_archive_into_a_topic(encrypted) -> None:
    topic = list(encrypted.topics)[1]
    target = f"{topic}-restored"
    done = run_cli(encrypted.cli_env, "restore", "--topic", topic, "--to-topic", target, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    consumer = Consumer(
        {
            "bootstrap.servers": str(encrypted.info.bootstrap_servers),
            "group.id": "enc-restored",
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 10,
        }
    )
    want = {p: [(w.key, w.value) for w in rs] for p, rs in encrypted.topics[topic].items()}
    consumer.assign([KafkaTP(target, p, 0) for p in want])
    got: dict[int, list[tuple[Any, Any]]] = {p: [] for p in want}
    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < sum(map(len, want.values())) and time.monotonic() < deadline:
        for m in consumer.consume(500, 1.0):
            if m.error() is None:
                got[m.partition() or 0].append((m.key(), m.value()))
    consumer.close()
    assert got == want


def _wrapping_key_ids(reader: RemoteReader, topic: str) -> set[str]:
    return {
        WrappedKey.decode(s.custom_metadata or b"", where="test").key_id
        for p in range(PARTITIONS)
        for s in reader.lookup.finished_segments(TopicPartition(topic, p), 0)
    }


def test_rekey_rewraps_every_data_key_under_the_new_key_and_is_idempotent(encrypted, reader_for) -> None:
    topic = list(encrypted.topics)[1]  # under the ring's default key
    old = _wrapping_key_ids(reader_for(), topic)
    assert len(old) == 1
    new = new_key(encrypted.keyring)  # the ring's new default
    env = {**encrypted.cli_env, "PROCESSOR_ENCRYPTION": "keyring"}
    first = run_cli(env, "rekey", "--topic", topic, "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    report = json.loads(first.stdout)
    assert report["key_id"] == new and report["rewrapped"] == report["segments"] > 0
    again = json.loads(run_cli(env, "rekey", "--topic", topic, "--json").stdout)
    assert again["rewrapped"] == 0 and again["already_current"] == report["segments"]
    reader = reader_for()
    assert _wrapping_key_ids(reader, topic) == {new}
    # the old key can go: everything reads under the new one, manifests included
    (encrypted.keyring / f"{old.pop()}.key").rename(encrypted.tmp / "retired.key")
    for p, want in encrypted.topics[topic].items():
        got = _read_all(reader_for(), TopicPartition(topic, p), len(want))
        assert all(_same(g, w) for g, w in zip(got, want, strict=True))
        for seg in reader.lookup.finished_segments(TopicPartition(topic, p), 0):
            key = manifest_key(seg.data_object_key)
            manifest = decode_manifest(build_storage(encrypted.settings()).read_all(key), where=key)
            assert manifest.segment.custom_metadata == seg.custom_metadata


def test_the_metadata_rebuilds_from_the_bucket_of_an_encrypted_archive(encrypted, reader_for) -> None:
    rebuilt = f"__meta_enc_rebuilt_{uuid.uuid4().hex[:6]}"
    done = run_cli(encrypted.cli_env, "rebuild-metadata", "--to-topic", rebuilt, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    reader = reader_for(PROCESSOR_METADATA_TOPIC=rebuilt)
    for topic, parts in encrypted.topics.items():
        for p, want in parts.items():
            got = _read_all(reader, TopicPartition(topic, p), len(want))
            assert [g.offset for g in got] == list(range(len(want)))
            assert all(_same(g, w) for g, w in zip(got, want, strict=True))


def test_shred_makes_one_topic_unreadable_as_shredded_and_leaves_the_other(encrypted, reader_for) -> None:
    own, shared = list(encrypted.topics)
    env = {**encrypted.cli_env, "PROCESSOR_ENCRYPTION": "keyring"}
    refused = run_cli(env, "shred", "--topic", shared, "--yes")
    assert refused.returncode == 2 and "shared" in refused.stderr + refused.stdout, refused.stderr
    dry = run_cli(env, "shred", "--topic", own, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    plan = json.loads(dry.stdout)
    assert plan["under_key"] > 0 and not plan["shredded"] and plan["refusal"] is None
    no_tty = run_cli(env, "shred", "--topic", own)
    assert no_tty.returncode == 2, "without --yes and without a terminal nothing is destroyed"
    assert _read_all(reader_for(), TopicPartition(own, 0), 5)
    done = run_cli(env, "shred", "--topic", own, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["shredded"] is True
    reader = reader_for()
    for p in range(PARTITIONS):
        with pytest.raises(SegmentShreddedError, match="shredded"):
            _read_all(reader, TopicPartition(own, p), 10)
    for p, want in encrypted.topics[shared].items():
        got = _read_all(reader, TopicPartition(shared, p), len(want))
        assert all(_same(g, w) for g, w in zip(got, want, strict=True))
    verify = run_cli(encrypted.cli_env, "verify", "--topic", own, "--json")
    report = json.loads(verify.stdout)
    assert len(report["shredded"]) == report["segments_checked"] > 0
    assert not report["corrupt"] and not report["key_unavailable"]


def test_one_topic_id_gets_a_key_of_its_own_and_is_shredded_alone(encrypted, reader_for) -> None:
    """The shared-key topic's topic id gets a key of its own; rekey moves its data keys there (each
    segment's encryption context names its topic id); shredding that id makes it unreadable."""
    _own, topic = list(encrypted.topics)
    reader = reader_for()
    (topic_id,) = {
        str(s.segment_id.topic_id)
        for p in range(PARTITIONS)
        for s in reader.lookup.finished_segments(TopicPartition(topic, p), 0)
    }
    env = {**encrypted.cli_env, "PROCESSOR_ENCRYPTION": "keyring"}
    made = run_cli(env, "keyring", "new", "--topic", topic, "--topic-id", topic_id, "--json")
    assert made.returncode == 0, made.stderr
    key_id = json.loads(made.stdout)["key_id"]
    refused = run_cli(env, "shred", "--topic", topic, "--topic-id", topic_id, "--yes")
    assert refused.returncode == 2 and "rekey" in refused.stderr  # still under the ring's default key
    moved = json.loads(run_cli(env, "rekey", "--topic", topic, "--json").stdout)
    assert moved["rewrapped"] == moved["segments"] > 0
    assert _wrapping_key_ids(reader_for(), topic) == {key_id}
    done = run_cli(env, "shred", "--topic", topic, "--topic-id", topic_id, "--yes", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["topic"] == f"{topic}@{topic_id}"
    with pytest.raises(SegmentShreddedError):
        _read_all(reader_for(), TopicPartition(topic, 0), 5)


@pytest.fixture(scope="module")
def kms_endpoint() -> Iterator[str]:
    with moto_kms() as endpoint:
        yield endpoint


def test_a_kms_encrypted_archive_reads_back_byte_exact_with_only_decrypt(
    local_stack, kms_endpoint, tmp_path, monkeypatch
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_KMS", kms_endpoint)
    kms = boto3.client("kms", region_name="us-east-1", endpoint_url=kms_endpoint)
    key_id = kms.create_key()["KeyMetadata"]["KeyId"]
    tag = uuid.uuid4().hex[:6]
    topic = f"enc-kms-{tag}"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, PARTITIONS, 1, {})
    produced = _produce(local_stack.bootstrap_servers, topic)
    env = worker_env(
        local_stack,
        tmp_path / "data",
        topic,
        PROCESSOR_METADATA_TOPIC=f"__meta_kms_{tag}",
        PROCESSOR_S3_PREFIX=f"kms-{tag}",
        PROCESSOR_S3_REGION="us-east-1",
        PROCESSOR_SEGMENT_BYTES=str(96 * 1024),
        PROCESSOR_BLOCK_BYTES=str(16 * 1024),
        PROCESSOR_SEGMENT_MS="1000",
        PROCESSOR_BUFFER_BYTES=str(16 * 1024 * 1024),
        PROCESSOR_ENCRYPTION="kms",
        PROCESSOR_KMS_KEY_ID=key_id,
        AWS_ENDPOINT_URL_KMS=kms_endpoint,
    )
    worker = WorkerProcess(env, tmp_path / "worker.log")
    ends = {TopicPartition(topic, p): len(rs) - 1 for p, rs in produced.items()}
    try:
        wait_offloaded(local_stack.bootstrap_servers, env["PROCESSOR_METADATA_TOPIC"], ends, 180, worker.proc)
    finally:
        worker.stop()
    keep = ("PROCESSOR_METADATA_TOPIC", "PROCESSOR_S3_PREFIX", "PROCESSOR_S3_REGION")
    settings = load_settings({**local_stack.env(), **{k: env[k] for k in keep}})  # no key id: readers unwrap
    follower = build_follower(settings, 4, cache_dir=tmp_path / "cache")
    follower.materializer.catch_up()
    storage = build_storage(settings)
    try:
        reader = build_reader(settings, storage, follower.rlmm)
        for p, want in produced.items():
            tp = TopicPartition(topic, p)
            got = _read_all(reader, tp, len(want))
            assert [g.offset for g in got] == list(range(len(want)))
            assert all(_same(g, w) for g, w in zip(got, want, strict=True))
            assert {
                WrappedKey.decode(s.custom_metadata or b"", where="t").provider
                for s in reader.lookup.finished_segments(tp, 0)
            } == {"kms"}
        s3 = s3_client(local_stack)
        for o in s3.list_objects_v2(Bucket=local_stack.bucket, Prefix=f"kms-{tag}")["Contents"]:
            assert MARKER not in s3.get_object(Bucket=local_stack.bucket, Key=o["Key"])["Body"].read()
    finally:
        follower.close()
        storage.close()
