"""delete-before (DeleteRecords for remote storage), delete-topic with a crash half way, the
multipart abort sweep, and bad input for each command, on the real stack."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic, partition_counts
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.model import PartitionDeleteState
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from processor.metadata.topic_io import load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from tests.integration.lifecycle_support import produce, run_cli, storage_for, view, wait_for
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.fault_proxy import FaultProxy, FaultRule
from tests.support.metadata_watch import metadata_watch

pytestmark = pytest.mark.integration

META = "__remote_log_metadata_deletion"
DELETIONS = "__remote_segments_to_be_deleted_deletion"
PREFIX = "del"


def env_for(info: StackInfo, tmp: Path, topics: str, **extra: str) -> dict[str, str]:
    """A worker's (and the commands') settings on this module's archive; ``extra`` wins."""
    defaults = {
        "PROCESSOR_METADATA_TOPIC": META,
        "PROCESSOR_METADATA_PARTITIONS": "2",
        "PROCESSOR_DELETION_TOPIC": DELETIONS,
        "PROCESSOR_SEGMENT_BYTES": str(8 * 1024),
        "PROCESSOR_BLOCK_BYTES": "4096",
        "PROCESSOR_SEGMENT_MS": "800",
        "PROCESSOR_BUFFER_BYTES": str(4 * 1024 * 1024),
        "PROCESSOR_S3_PREFIX": PREFIX,
    }
    return worker_env(info, tmp / "data", topics, **{**defaults, **extra})


def offload(
    info: StackInfo, env: dict[str, str], ends: dict[TopicPartition, int], log: Path, timeout_s: float = 120
) -> None:
    worker = WorkerProcess(env, log)
    try:
        with metadata_watch(info.bootstrap_servers, META) as watch:
            watch.wait_offloaded(ends, timeout_s, worker.proc)
    finally:
        assert worker.stop() == 0


def test_delete_before_moves_the_start_and_deletes_exactly_the_segments_below(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    tp = TopicPartition("del-before", 0)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), tp.topic, 1, 1, {})
    produce(local_stack.bootstrap_servers, tp.topic, 0, 100, int(time.time() * 1000))
    env = env_for(local_stack, tmp_path, tp.topic, PROCESSOR_WORKER_ID="before-1")
    offload(local_stack, env, {tp: 99}, tmp_path / "w1.log")
    before = view(local_stack, META, tp, PREFIX).finished
    assert len(before) >= 5
    offset = before[3].start_offset + 2  # inside the fourth segment

    beyond = run_cli(env, "delete-before", "--topic", tp.topic, "--partition", "0", "--offset", "100000")
    assert beyond.returncode == 2 and "beyond" in beyond.stderr
    done = run_cli(env, "delete-before", "--topic", tp.topic, "--partition", "0", "--offset", str(offset))
    assert done.returncode == 0, done.stderr
    assert f"remote log start offset {offset}; 3 segments deleted" in done.stdout

    v = view(local_stack, META, tp, PREFIX)
    assert [s.segment_id for s in v.deleted] == [s.segment_id for s in before[:3]]
    assert v.finished == before[3:] and v.part.log_start_offset == offset
    assert v.objects == v.referenced, "the deleted segments' objects are gone, the others stay"

    below = run_cli(env, "fetch", "--topic", tp.topic, "--partition", "0", "--offset", str(offset - 1))
    # "not in remote storage": exit 4 here, 2 (bad input) under issue-10's single exit-code scheme
    assert below.returncode in (2, 4) and "not in remote storage" in below.stderr
    at = run_cli(env, "fetch", "--topic", tp.topic, "--partition", "0", "--offset", str(offset), "--json")
    assert at.returncode == 0 and json.loads(at.stdout.splitlines()[0])["offset"] == offset
    # by timestamp: the segment straddling the start offset is served from the start offset only
    by_time = run_cli(env, "fetch", "--topic", tp.topic, "--partition", "0", "--timestamp", "0", "--json")
    assert by_time.returncode == 0 and json.loads(by_time.stdout.splitlines()[0])["offset"] == offset

    # a new leader resumes above the remote end and never copies the deleted range again
    produce(local_stack.bootstrap_servers, tp.topic, 0, 20, int(time.time() * 1000))
    offload(local_stack, {**env, "PROCESSOR_WORKER_ID": "before-2"}, {tp: 119}, tmp_path / "w2.log")
    after = view(local_stack, META, tp, PREFIX)
    assert coverage_gaps_and_overlaps(after.finished) == []
    assert after.finished[0].start_offset == before[3].start_offset and after.finished[-1].end_offset == 119


def test_delete_topic_resumes_after_a_crash_half_way_and_ends_empty(
    local_stack: StackInfo, fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    topic = "del-topic"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, 2, 1, {})
    for p in (0, 1):
        produce(local_stack.bootstrap_servers, topic, p, 120, int(time.time() * 1000))
    env = env_for(local_stack, tmp_path, topic, PROCESSOR_WORKER_ID="deltopic-1")
    offload(
        local_stack, env, {TopicPartition(topic, 0): 119, TopicPartition(topic, 1): 119}, tmp_path / "w.log"
    )
    storage = storage_for(local_stack)
    topic_prefix = ObjectKeyFactory(PREFIX).topic_listing_prefix(topic)  # every topic id's folder
    initial = len(list(storage.list(topic_prefix)))
    assert initial >= 40

    # Slow deletes (a real S3 behind a proxy that delays each DELETE), then kill -9 half way.
    fault_proxy.add_rule(FaultRule("delay", frozenset({"delete", "delete_objects"}), delay_s=0.1))
    slow_env = {**env, "PROCESSOR_S3_ENDPOINT_URL": fault_proxy.endpoint_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "processor", "delete-topic", "--topic", topic, "--include-live"],
        env=slow_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(
            "a part of the objects deleted",
            lambda: len(list(storage.list(topic_prefix))) <= initial - 8,
            60,
            proc,
        )
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    left = len(list(storage.list(topic_prefix)))
    assert 0 < left < initial
    state, _ = load_remote_state(local_stack.bootstrap_servers, META)
    states = {state.partition(TopicPartition(topic, p)).delete_state for p in (0, 1)}
    assert PartitionDeleteState.DELETE_PARTITION_FINISHED not in states or len(states) > 1
    assert PartitionDeleteState.DELETE_PARTITION_STARTED in states

    rerun = run_cli(env, "delete-topic", "--topic", topic, "--include-live")
    assert rerun.returncode == 0, rerun.stderr + rerun.stdout
    assert "deleting everything" in rerun.stdout
    assert list(storage.list(topic_prefix)) == [], "the topic's prefix ends empty"
    state, skipped = load_remote_state(local_stack.bootstrap_servers, META)
    assert skipped == 0
    for p in (0, 1):
        part = state.partition(TopicPartition(topic, p))
        assert part.delete_state is PartitionDeleteState.DELETE_PARTITION_FINISHED
        assert part.finished() == [] and part.dangling() == []
    storage.close()


def test_delete_topic_of_a_topic_the_broker_no_longer_has_deletes_every_history(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """KIP-405's topic deletion: once the broker says the topic does not exist, the default mode
    deletes every history of the name the metadata knows; a folder found only in the bucket (another
    deployment's, in a shared bucket) goes only when named with --topic-id."""
    topic = "del-gone"
    tp = TopicPartition(topic, 0)
    admin = new_admin(local_stack.bootstrap_servers, "t")
    ensure_topic(admin, topic, 1, 1, {})
    produce(local_stack.bootstrap_servers, topic, 0, 60, int(time.time() * 1000))
    env = env_for(local_stack, tmp_path, topic, PROCESSOR_WORKER_ID="delgone-1")
    offload(local_stack, env, {tp: 59}, tmp_path / "w.log")
    keys = ObjectKeyFactory(PREFIX)
    storage = storage_for(local_stack)
    stray = keys.segment(topic, 0, 0, uuid.uuid4(), 1, str(uuid.uuid4())).data
    storage.create(stray, [b"x"])
    admin.delete_topics([topic])[topic].result(15)
    wait_for("the topic gone", lambda: topic not in partition_counts(admin, [topic]), 30)

    gone = run_cli(env, "delete-topic", "--topic", topic)
    assert gone.returncode == 0, gone.stderr + gone.stdout
    assert "live topic id (none: the topic does not exist)" in gone.stdout
    assert "deleting everything" in gone.stdout
    left = [i.key for i in storage.list(keys.topic_listing_prefix(topic))]
    assert left == [stray], "every history the metadata knows goes; a folder only listed stays"
    assert (
        f"not deleted: found only in the bucket; pass --topic-id {stray.split('/')[1][len(topic) + 1 :]}"
        in gone.stdout
    )
    explicit = run_cli(
        env, "delete-topic", "--topic", topic, "--topic-id", stray.split("/")[1][len(topic) + 1 :]
    )
    assert explicit.returncode == 0, explicit.stderr + explicit.stdout
    assert list(storage.list(keys.topic_listing_prefix(topic))) == []
    storage.close()
    state, _ = load_remote_state(local_stack.bootstrap_servers, META)
    part = state.partition(tp)
    assert part.delete_state is PartitionDeleteState.DELETE_PARTITION_FINISHED
    assert part.finished() == []


def test_multipart_sweep_aborts_only_old_uploads_of_the_projects_objects(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    storage = storage_for(local_stack)
    client = storage.client
    key = ObjectKeyFactory(PREFIX).segment("mp", 0, 0, uuid.uuid4(), 1).data
    mine = client.create_multipart_upload(Bucket=local_stack.bucket, Key=key)
    client.upload_part(
        Bucket=local_stack.bucket, Key=key, UploadId=mine["UploadId"], PartNumber=1, Body=b"x" * 1024
    )
    foreign_key = f"{PREFIX}/mp/0/backup-of-something.tar"  # under the prefix, not this project's layout
    foreign = client.create_multipart_upload(Bucket=local_stack.bucket, Key=foreign_key)
    other = client.create_multipart_upload(Bucket=local_stack.bucket, Key="elsewhere/mp/x.log")
    env = env_for(local_stack, tmp_path, "unused")
    try:
        young = run_cli(env, "abort-multipart")  # default threshold (1 h): an upload in flight stays
        assert young.returncode == 0 and "aborted 0" in young.stdout
        old = run_cli(env, "abort-multipart", "--older-than-ms", "0")
        assert old.returncode == 0 and "aborted 1" in old.stdout, old.stderr
        assert [u.upload_id for u in storage.list_multipart_uploads(f"{PREFIX}/mp")] == [foreign["UploadId"]]
        assert [u.upload_id for u in storage.list_multipart_uploads("elsewhere/")] == [other["UploadId"]]
    finally:
        storage.abort_multipart_upload("elsewhere/mp/x.log", other["UploadId"])
        storage.abort_multipart_upload(foreign_key, foreign["UploadId"])
        storage.close()


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["delete-before", "--topic", "a/b", "--partition", "0", "--offset", "1"], 2, "invalid topic name"),
        (["delete-before", "--topic", "t", "--partition", "0", "--offset", "-1"], 2, "must be >= 0"),
        (["delete-topic", "--topic", ".."], 2, "invalid topic name"),
        (["abort-multipart", "--older-than-ms", "-5"], 2, "must be >= 0"),
    ],
)
def test_bad_input_exits_2_naming_the_problem(
    local_stack: StackInfo, tmp_path: Path, args: list[str], code: int, message: str
) -> None:
    result = run_cli(env_for(local_stack, tmp_path, "unused"), *args)
    assert result.returncode == code and message in result.stderr


@pytest.mark.usefixtures("unreachable_fails_fast")
def test_unreachable_kafka_exits_3(local_stack: StackInfo, tmp_path: Path) -> None:
    env = {**env_for(local_stack, tmp_path, "unused"), "PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    result = run_cli(env, "delete-topic", "--topic", "x")
    assert result.returncode == 3 and "unreachable" in result.stderr


def test_sweep_deletes_only_unreferenced_objects_it_can_prove_garbage(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """`processor sweep`: objects no record names in the live topic id's folder go (a writer that
    lost its claim and uploaded anyway); an object whose segment has a manifest (acknowledged data
    the metadata does not name), another topic id's folder and every served segment stay; --dry-run
    deletes nothing; objects younger than --older-than-ms stay."""
    topic = "del-sweep"
    tp = TopicPartition(topic, 0)
    admin = new_admin(local_stack.bootstrap_servers, "t")
    ensure_topic(admin, topic, 1, 1, {})
    produce(local_stack.bootstrap_servers, topic, 0, 40, int(time.time() * 1000))
    env = env_for(local_stack, tmp_path, topic, PROCESSOR_WORKER_ID="sweep-1")
    offload(local_stack, env, {tp: 39}, tmp_path / "w.log")
    served = view(local_stack, META, tp, PREFIX).finished
    live_id = served[0].segment_id.topic_id
    assert live_id is not None
    keys = ObjectKeyFactory(PREFIX)
    zombie = keys.segment(topic, 0, 1000, uuid.uuid4(), 999, live_id)
    acked = keys.segment(topic, 0, 2000, uuid.uuid4(), 999, live_id)
    other = keys.segment(topic, 0, 0, uuid.uuid4(), 1, str(uuid.uuid4()))
    storage = storage_for(local_stack)
    try:
        for key in (zombie.data, zombie.index, acked.data, acked.data + "-manifest", other.data):
            storage.create(key, [b"x"])
        before = {i.key for i in storage.list(PREFIX + "/")}
        young = run_cli(env, "sweep", "--topic", topic, "--older-than-ms", str(3_600_000), "--json")
        assert young.returncode == 0, young.stderr
        assert json.loads(young.stdout)["partitions"][str(tp)] == {"deleted": [], "kept": []}
        dry = run_cli(env, "sweep", "--topic", topic, "--older-than-ms", "0", "--dry-run", "--json")
        assert dry.returncode == 0, dry.stderr
        found = json.loads(dry.stdout)["partitions"][str(tp)]
        assert sorted(found["would_delete"]) == sorted([zombie.data, zombie.index])
        assert sorted(found["kept"]) == sorted([acked.data, acked.data + "-manifest"])
        assert {i.key for i in storage.list(PREFIX + "/")} == before, "a dry run deletes nothing"
        done = run_cli(env, "sweep", "--topic", topic, "--older-than-ms", "0")
        assert done.returncode == 0, done.stderr
        assert "deleted 2 unreferenced objects in 1 partitions; 2 kept" in done.stdout
        assert {i.key for i in storage.list(PREFIX + "/")} == before - {zombie.data, zombie.index}
        assert {k for s in served for k in (s.data_object_key, s.index_object_key)} <= before
    finally:
        storage.close()
    bad = run_cli(env, "sweep", "--topic", topic, "--older-than-ms", "-1")
    assert bad.returncode == 2 and "--older-than-ms" in bad.stderr
