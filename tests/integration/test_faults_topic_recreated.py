"""A topic deleted and re-created under the same name is a new partition history (upstream: KIP-405's
TopicIdPartition, Aiven's ``topic-<uuid>`` keys; Kafka's "delete topic" harness case)."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from processor.config import load_settings
from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic, partition_counts, topic_ids
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.topic_io import load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from processor.wiring.follower import build_follower, build_reader
from processor.wiring.storage import build_storage
from tests.integration.invariants import running_worker
from tests.integration.lifecycle_support import run_cli, storage_for
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, worker_env
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "recreated"
META = "__remote_log_metadata_recreated"
TP = TopicPartition(TOPIC, 0)


def _recreate(bootstrap: str) -> None:
    admin = new_admin(bootstrap, "t")
    admin.delete_topics([TOPIC])[TOPIC].result(15)
    deadline = time.monotonic() + 30
    while TOPIC in partition_counts(admin, [TOPIC]):
        assert time.monotonic() < deadline, "topic deletion did not complete"
        time.sleep(0.2)
    ensure_topic(admin, TOPIC, 1, 1, {})


def test_recreated_topic_is_offloaded_from_zero_and_never_served_the_old_records(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    admin = new_admin(local_stack.bootstrap_servers, "t")
    ensure_topic(admin, TOPIC, 1, 1, {})
    old_id = topic_ids(admin, [TOPIC])[TOPIC]
    env = worker_env(
        local_stack,
        tmp_path / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_S3_PREFIX="recreated",
        PROCESSOR_SEGMENT_BYTES=str(32 * 1024),
        PROCESSOR_BLOCK_BYTES=str(4 * 1024),
        PROCESSOR_SEGMENT_MS="300",
        PROCESSOR_SESSION_TIMEOUT_MS=TEST_SESSION_TIMEOUT_MS,
    )
    produce_samples(local_stack.bootstrap_servers, TOPIC, 400, 1, big_every=0)
    with running_worker(env, tmp_path / "first.log") as worker:
        wait_offloaded(local_stack.bootstrap_servers, META, {TP: 399}, 90, worker.proc)

    _recreate(local_stack.bootstrap_servers)
    absent: set[str] = set()
    new_id = topic_ids(admin, [TOPIC, "recreated-never-created"], absent=absent)[TOPIC]
    assert new_id != old_id
    assert absent == {"recreated-never-created"}, "the broker's 'no such topic' is told from a failure"
    fresh = produce_samples(local_stack.bootstrap_servers, TOPIC, 700, 1, start=100_000, big_every=0)
    with running_worker(env, tmp_path / "second.log") as worker:
        wait_offloaded(local_stack.bootstrap_servers, META, {TP: 699}, 90, worker.proc)
        assert "resuming at the earliest offset" in worker.log()
        assert "resuming at 400" not in worker.log()

    state, _skipped = load_remote_state(local_stack.bootstrap_servers, META)
    part = state.partition(TP)
    part.current_topic_id = new_id
    served = part.finished()
    assert served[0].start_offset == 0 and served[-1].end_offset == 699
    assert all(s.segment_id.topic_id == new_id for s in served)
    assert all(f"recreated/{TOPIC}-{new_id}/0/" in s.data_object_key for s in served)
    old = [s for s in part.segments.values() if s.segment_id.topic_id == old_id]
    assert old and all(f"recreated/{TOPIC}-{old_id}/0/" in s.data_object_key for s in old)

    settings = load_settings(
        {
            **{k: v for k, v in env.items() if k.startswith("PROCESSOR_")},
            "PROCESSOR_FOLLOW_TOPICS": TOPIC,
            "PROCESSOR_S3_REGION": "us-east-1",
        }
    )
    meta_parts = partition_counts(admin, [META])[META]
    follower = build_follower(settings, meta_parts, cache_dir=tmp_path / "read-cache")
    storage = build_storage(settings)
    try:
        follower.materializer.catch_up()
        reader = build_reader(settings, storage, follower.rlmm)
        got = reader.read_from_offset(TP, 0, max_records=2000, max_bytes=1 << 40)
        assert [r.offset for r in got] == list(range(700))
        assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in fresh]
        assert follower.rlmm.earliest_log_offset(TP) == 0 and follower.rlmm.highest_log_offset(TP) == 699
    finally:
        follower.close()
        storage.close()

    # a folder of a third id that no metadata record names (only the bucket listing shows it)
    stray_id = str(uuid.uuid4())
    stray = ObjectKeyFactory("recreated").segment(TOPIC, 0, 0, uuid.uuid4(), 1, stray_id).data
    storage = storage_for(local_stack)
    try:
        storage.create(stray, [b"not this project's to judge"])
    finally:
        storage.close()

    # delete-topic, by default, deletes the earlier topic's archive only (the id the metadata knows);
    # the live one stays, and so does the folder found only in the bucket
    deleted = run_cli(env, "delete-topic", "--topic", TOPIC)
    assert deleted.returncode == 0, deleted.stderr + deleted.stdout
    assert f"live topic id {new_id}" in deleted.stdout and f"deleting topic id {old_id}" in deleted.stdout
    assert f"deleting topic id {old_id} in" in deleted.stdout, "only the known earlier id"
    assert (
        f"topic id {stray_id} not deleted: found only in the bucket; pass --topic-id {stray_id} to delete"
        in deleted.stdout
    )
    storage = storage_for(local_stack)
    try:
        keys = {o.key for o in storage.list(f"recreated/{TOPIC}")}
    finally:
        storage.close()
    assert not any(f"{TOPIC}-{old_id}/" in k for k in keys), "the earlier topic's objects are gone"
    assert stray in keys, "a folder no metadata names is never deleted by default"
    explicit = run_cli(env, "delete-topic", "--topic", TOPIC, "--topic-id", stray_id)
    assert explicit.returncode == 0, explicit.stderr + explicit.stdout
    storage = storage_for(local_stack)
    try:
        keys = {o.key for o in storage.list(f"recreated/{TOPIC}")}
    finally:
        storage.close()
    assert stray not in keys, "--topic-id deletes it explicitly"
    assert {k for s in served for k in (s.data_object_key, s.index_object_key)} <= keys
    after, _ = load_remote_state(local_stack.bootstrap_servers, META)
    now = after.partition(TP)
    now.current_topic_id = new_id
    assert [s.segment_id for s in now.finished()] == [s.segment_id for s in served]
    assert not [s for s in now.segments.values() if s.segment_id.topic_id == old_id]
