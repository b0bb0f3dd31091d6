"""``processor erase`` on the real stack (Apache Kafka, SeaweedFS), an encrypted archive with key
filters: three keys among 100,000 records in about 50 segments are erased; afterwards no object in
the bucket holds a record of those keys (every data object decrypted and decoded), every other
record reads back byte-exact at its offset through ``fetch`` and, once the broker deleted them,
through the gateway to an unmodified consumer in order and through a restore; the key filters
spared most segments a read; the audit trail names the keys by keyed hashes only; the same erasure
again changes nothing."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from processor.crypto.keyring import new_key
from processor.crypto.providers import key_providers
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from processor.reader.segment_blocks import fetch_index, read_block_range
from processor.reader.segment_keys import SegmentDecryption
from processor.segment.object_keys import KEY_FILTER_SUFFIX, ObjectKeyFactory
from tests.integration.lifecycle_support import run_cli, storage_for, view
from tests.integration.test_deletion_commands import META, PREFIX, env_for, offload
from tests.support.gateway_thread import consume_archive

pytestmark = pytest.mark.integration

RECORDS = 100_000
ERASED = [b"user-17", b"user-101", b"user-180"]


def key_of(i: int) -> bytes | None:
    return None if i % 1000 == 999 else b"user-%d" % (i // 500)  # a key per 500 records


def value_of(i: int) -> bytes:
    return b"v%07d-" % i + bytes([i % 251]) * 24


def test_three_keys_erased_from_an_encrypted_archive_leave_every_other_record_byte_exact(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    tp = TopicPartition("erase-me", 0)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), tp.topic, 1, 1, {})
    stamp = int(time.time() * 1000)
    producer = new_producer(
        local_stack.bootstrap_servers, "erase-test", **{"linger.ms": 20, "batch.num.messages": 500}
    )
    for i in range(RECORDS):
        while True:
            try:
                producer.produce(tp.topic, value_of(i), key_of(i), partition=0, timestamp=stamp + i)
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(60) == 0
    keyring = tmp_path / "keyring"
    keyring.mkdir()
    new_key(keyring)
    env = env_for(
        local_stack,
        tmp_path,
        tp.topic,
        PROCESSOR_WORKER_ID="erase-1",
        PROCESSOR_SEGMENT_BYTES=str(96 * 1024),
        PROCESSOR_BLOCK_BYTES=str(16 * 1024),
        PROCESSOR_SEGMENT_MS="60000",
        PROCESSOR_ENCRYPTION="keyring",
        PROCESSOR_ENCRYPTION_KEYRING=str(keyring),
        PROCESSOR_ERASURE_SECRET="an erasure secret for the test",
    )
    offload(local_stack, env, {tp: RECORDS - 1}, tmp_path / "worker.log")
    before = view(local_stack, META, tp, PREFIX)
    assert 30 <= len(before.finished) <= 80
    storage = storage_for(local_stack)
    erased_count = sum(1 for i in range(RECORDS) if key_of(i) in ERASED)

    keys = [k.decode() for k in ERASED]
    dry = run_cli(env, "erase", "--topic", tp.topic, "--key", *keys, "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["records_removed"] == erased_count
    assert view(local_stack, META, tp, PREFIX).finished == before.finished

    done = run_cli(env, "erase", "--topic", tp.topic, "--key", *keys, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["records_removed"] == erased_count
    part = report["partitions"][0]
    assert 3 <= part["rewritten"] <= 6 and part["skipped_by_filter"] >= len(before.finished) - 10
    after = view(local_stack, META, tp, PREFIX)
    assert coverage_gaps_and_overlaps(after.finished) == []
    assert [(s.start_offset, s.end_offset) for s in after.finished] == [
        (s.start_offset, s.end_offset) for s in before.finished
    ]

    # the bucket: every data object is a served segment's; decrypted, none holds an erased key
    decryption = SegmentDecryption(key_providers(keyring, None))
    served = {s.data_object_key: s for s in after.finished}
    object_keys = ObjectKeyFactory(PREFIX)  # the prefix is shared with other tests' topics
    listed = [
        o.key
        for o in storage.list(object_keys.topic_listing_prefix(tp.topic))
        if o.key.endswith(".log") and object_keys.partition_of(tp.topic, o.key) == tp.partition
    ]
    assert sorted(listed) == sorted(served)
    read: list[tuple[int, bytes | None, bytes | None]] = []
    for s in after.finished:
        cipher = decryption.cipher(s)
        assert cipher is not None  # encrypted, each rewrite under a new data key
        index = fetch_index(storage, object_keys, s, cipher=cipher)
        for block in read_block_range(storage, s.data_object_key, str(s.segment_id), index.blocks, 0, cipher):
            read += [(r.offset, r.key, r.value) for r in block]
        assert ERASED[0] not in storage.read_all(s.data_object_key + KEY_FILTER_SUFFIX)
    expected = [(i, key_of(i), value_of(i)) for i in range(RECORDS) if key_of(i) not in ERASED]
    assert read == expected
    rewrites = [s for s in after.finished if s.supersedes]
    assert len({s.custom_metadata for s in rewrites}) == len(rewrites)  # a data key each

    # through fetch: every other record at its offset
    fetched = run_cli(env, "fetch", "--topic", tp.topic, "--partition", "0", "--offset", "0",
                      "--max-records", str(RECORDS), "--json")  # fmt: skip
    assert fetched.returncode == 0, fetched.stderr
    assert [json.loads(line)["offset"] for line in fetched.stdout.splitlines()] == [e[0] for e in expected]

    verified = run_cli(env, "verify", "--topic", tp.topic, "--json")
    assert verified.returncode == 0, verified.stdout + verified.stderr  # filters referenced, all decode

    # the audit trail: started and finished, the keys by keyed hash only
    trail = [o.key for o in storage.list(f"{PREFIX}/erasures=audit/{tp.topic}/")]
    assert [k.rsplit("-", 1)[1] for k in sorted(trail)] == ["finished.json", "started.json"]
    for key in trail:
        body = storage.read_all(key)
        assert all(k not in body for k in ERASED)
    finished = json.loads(storage.read_all(next(k for k in trail if k.endswith("finished.json"))))
    assert finished["records_removed"] == erased_count and finished["complete"] is True

    # the same erasure again changes nothing
    again = run_cli(env, "erase", "--topic", tp.topic, "--key", *keys, "--json")
    assert again.returncode == 0, again.stderr
    assert (json.loads(again.stdout)["segments_rewritten"], json.loads(again.stdout)["records_removed"]) == (
        0,
        0,
    )
    assert view(local_stack, META, tp, PREFIX).finished == after.finished

    # the broker drops its copy; an unmodified consumer reads the rest through the gateway, in order
    admin = new_admin(local_stack.bootstrap_servers, "t")
    for future in admin.delete_records([KafkaTP(tp.topic, 0, RECORDS)]).values():
        future.result(timeout=30)
    archive_env = {
        **local_stack.env(),
        "PROCESSOR_METADATA_TOPIC": META,
        "PROCESSOR_S3_PREFIX": PREFIX,
        "PROCESSOR_ENCRYPTION_KEYRING": str(keyring),
    }
    got = consume_archive(archive_env, tmp_path / "gateway", tp.topic, len(expected), "erased")
    assert got == expected

    # a restore replays the rest, in order, none of the erased keys
    target = f"{tp.topic}-restored"
    restored = run_cli(env, "restore", "--topic", tp.topic, "--to-topic", target, "--json")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    reader = Consumer(
        {"bootstrap.servers": local_stack.bootstrap_servers, "group.id": "erased-restored",
         "isolation.level": "read_committed", "enable.auto.commit": False}
    )  # fmt: skip
    replayed: list[tuple[bytes | None, bytes | None]] = []
    try:
        reader.assign([KafkaTP(target, 0, 0)])
        deadline = time.monotonic() + 120
        while len(replayed) < len(expected) and time.monotonic() < deadline:
            for msg in reader.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                replayed.append((msg.key(), msg.value()))
    finally:
        reader.close()
    assert replayed == [(k, v) for _o, k, v in expected]
