"""The metadata rebuilt from the bucket alone, on a running stack.

A topic is archived across two owner changes and a zombie (an owner paused past its session timeout
that goes on writing when it wakes). Then the metadata topic is deleted and every follower cache with
it, and ``processor rebuild-metadata`` publishes it again from the segment manifests: readers serve
the same segments as before, byte for byte, every offset reads back as the broker has it, nothing
the zombie left is served, and a worker goes on archiving on the rebuilt topic. A read replica
(``processor follower --from-bucket``) serves the same reads with no Kafka at all.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.kafka.security import KafkaConnection
from processor.metadata.manifest import manifest_key
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.topic_io import load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.connection import Connection
from processor.spark.live_tail import consume_range
from tests.integration.invariants import running_worker, wait_for_log
from tests.integration.lifecycle_support import storage_for
from tests.integration.test_ownership import PARTITIONS, Produced, _env, assert_reads_byte_exact
from tests.support.cli import CliResult, run_cli
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration


def served(bootstrap: str, meta: str, topic: str) -> dict[TopicPartition, list[RemoteLogSegmentMetadata]]:
    state, _rejected = load_remote_state(bootstrap, meta)
    return {
        TopicPartition(topic, p): state.partition(TopicPartition(topic, p)).finished()
        for p in range(PARTITIONS)
    }


def fingerprint(segments: list[RemoteLogSegmentMetadata]) -> list[tuple[Any, ...]]:
    """Everything that says which bytes a segment serves (the writer's epoch and id change: the
    rebuild publishes under its own claim)."""
    return [
        (
            s.segment_id,
            s.start_offset,
            s.end_offset,
            s.max_timestamp_ms,
            s.segment_size_in_bytes,
            s.data_object_key,
            s.index_object_key,
            s.index_crc32,
            s.index_size_in_bytes,
            s.record_count,
            s.segment_format_version,
        )
        for s in segments
    ]


def cli(args: list[str], env: dict[str, str]) -> CliResult:
    return run_cli(env, *args)  # in this process (tests/support/cli.py)


@pytest.mark.parametrize(
    "per_round", [60, pytest.param(5_000, marks=pytest.mark.slow)], ids=["small", "full"]
)
def test_rebuild_after_losing_the_metadata_topic(
    local_stack: StackInfo, tmp_path: Path, per_round: int
) -> None:
    """``make test`` archives 60 records a partition per round; the ``slow`` run 5,000 (hundreds of
    segments to rebuild)."""
    topic, meta = f"rb-owners-{per_round}", f"__remote_log_metadata_rb_{per_round}"
    wait_s = 1 if per_round <= 60 else 4  # the timeouts below grow with the records archived
    bootstrap = local_stack.bootstrap_servers
    ensure_topic(new_admin(bootstrap, "t"), topic, PARTITIONS, 1, {})
    envs = {w: _env(local_stack, tmp_path / w, topic, meta, f"rb-{w}") for w in ("a", "b")}
    now = int(time.time() * 1000)
    produced = Produced(local_stack, topic)
    with running_worker(envs["a"], tmp_path / "a.log") as a:
        wait_for_log(a, "resuming at", 60)
        produced.each(per_round, now)
        wait_offloaded(bootstrap, meta, produced.ends(), 90 * wait_s, a.proc)
        produced.each(per_round, now)
        a.proc.send_signal(signal.SIGSTOP)  # a zombie to be: paused with records still to copy
        time.sleep(8)  # past its 3 s session timeout
        with running_worker(envs["b"], tmp_path / "b.log") as b:  # first owner change: all to b
            wait_for_log(b, "resuming at", 60)
            seen = len(a.log())
            a.proc.send_signal(signal.SIGCONT)  # the zombie goes on with what it believed ...
            produced.each(per_round, now)
            wait_for_log(a, "resuming at", 60, after=seen)  # ... then rejoins: the second change
            produced.each(per_round, now)
            ends = produced.ends()
            wait_offloaded(bootstrap, meta, ends, 120 * wait_s, b.proc)
    before = served(bootstrap, meta, topic)
    assert all(before.values())
    _state, rejected = load_remote_state(bootstrap, meta)
    # The zombie acted after it woke: records the fold rejected, or its copier saw the newer claim in
    # its own view first and stopped before writing (both are fencing; which one comes is a race).
    fenced_itself = "not this worker's" in a.log()[seen:]
    assert rejected > 0 or fenced_itself, "the zombie did nothing after it woke: the test did not test it"
    storage = storage_for(local_stack)
    keys = [i.key for i in storage.list(f"{topic}/")]
    served_keys = {
        k for segs in before.values() for s in segs for k in (s.data_object_key, s.index_object_key)
    }
    leftovers = [k for k in keys if k not in served_keys and not k.endswith("-manifest")]
    print(f"{rejected} records rejected by the fold; {len(leftovers)} objects no served segment names")
    assert all(manifest_key(s.data_object_key) in keys for segs in before.values() for s in segs)

    # what a zombie that crashed right after its uploads leaves: a copy of a range, without a manifest
    victim = before[TopicPartition(topic, 0)][-1]
    ghost = ObjectKeyFactory(topic).segment(
        topic, 0, victim.start_offset, uuid.uuid4(), victim.writer_epoch, victim.segment_id.topic_id
    )
    storage.create(ghost.data, [storage.read_all(victim.data_object_key)])
    storage.create(ghost.index, [storage.read_all(victim.index_object_key)])
    leftovers.append(ghost.data)

    # lose the metadata topic and every follower cache
    admin = new_admin(bootstrap, "t")
    admin.delete_topics([meta])[meta].result(timeout=30)
    for w in envs:
        shutil.rmtree(tmp_path / w, ignore_errors=True)
    env = envs["a"]
    dry = cli(["rebuild-metadata", "--dry-run", "--json"], env)
    assert dry.returncode in (0, 1), dry.stderr  # 1: leftovers without manifests are reported
    planned = json.loads(dry.stdout)
    assert planned["segments"] == sum(map(len, before.values()))
    assert ghost.data in planned["objects_without_manifest"]
    assert set(planned["objects_without_manifest"]) <= set(leftovers)
    done = cli(["rebuild-metadata", "--json"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["mismatches"] == [] and report["segments"] == planned["segments"]

    after = served(bootstrap, meta, topic)
    for tp in before:
        assert fingerprint(after[tp]) == fingerprint(before[tp]), (
            f"{tp}: the rebuilt topic serves other segments"
        )
    admitted = {k for segs in after.values() for s in segs for k in (s.data_object_key, s.index_object_key)}
    assert not admitted & set(leftovers), "the rebuild admitted what the zombie (or a failed copy) left"
    assert_reads_byte_exact(local_stack, env, topic, {tp: 0 for tp in ends}, ends)

    # a worker goes on archiving on the rebuilt topic
    with running_worker(envs["a"], tmp_path / "a2.log") as again:
        wait_for_log(again, "resuming at", 60)
        produced.each(per_round // 2, now)
        ends = produced.ends()
        wait_offloaded(bootstrap, meta, ends, 120 * wait_s, again.proc)
    assert_reads_byte_exact(local_stack, env, topic, {tp: 0 for tp in ends}, ends)


def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_a_read_replica_from_the_bucket_alone(local_stack: StackInfo, tmp_path: Path) -> None:
    topic, meta = "rb-replica", "__remote_log_metadata_rb_replica"
    bootstrap = local_stack.bootstrap_servers
    ensure_topic(new_admin(bootstrap, "t"), topic, PARTITIONS, 1, {})
    env = _env(local_stack, tmp_path / "w", topic, meta, "rb-replica-w")
    produced = Produced(local_stack, topic)
    now = int(time.time() * 1000)
    port = free_port()
    replica_env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")},
        **local_stack.env(),
        "PROCESSOR_BOOTSTRAP_SERVERS": f"127.0.0.1:{free_port()}",  # no Kafka where the replica runs
        "PROCESSOR_S3_PREFIX": topic,
        "PROCESSOR_DATA_DIR": str(tmp_path / "replica"),
        "PROCESSOR_WEB_PORT": str(port),
        "PROCESSOR_WEB_HOST": "127.0.0.1",
    }
    with running_worker(env, tmp_path / "w.log") as worker:
        wait_for_log(worker, "resuming at", 60)
        produced.each(50, now)
        wait_offloaded(bootstrap, meta, produced.ends(), 90, worker.proc)
        with (tmp_path / "replica.log").open("wb") as out:
            replica = subprocess.Popen(
                [sys.executable, "-m", "processor", "follower", "--from-bucket", "--refresh-ms", "1000"],
                env=replica_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if _get(f"{base}/readyz").get("ready"):
                        break
                except OSError:
                    pass
                assert replica.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "replica.log"
                ).read_text()
                time.sleep(0.2)  # polling a condition (readiness)
            check_replica(base, bootstrap, topic, produced)
            produced.each(50, now)  # archived since: the replica's next look picks it up
            wait_offloaded(bootstrap, meta, produced.ends(), 90, worker.proc)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    check_replica(base, bootstrap, topic, produced)
                    break
                except AssertionError:
                    time.sleep(0.5)  # polling a condition (the next look at the bucket)
            check_replica(base, bootstrap, topic, produced)
        finally:
            replica.send_signal(signal.SIGTERM)
            replica.wait(30)


def _bytes(value: str | None) -> bytes | None:
    return None if value is None else base64.b64decode(value)


def _broker(bootstrap: str) -> Connection:
    """The live tail's connection, for its Kafka reads only (no metadata topic, no bucket)."""
    return Connection(KafkaConnection(bootstrap), "", None, "", "", None)


def check_replica(base: str, bootstrap: str, topic: str, produced: Produced) -> None:
    for p, count in produced.counts.items():
        broker = [
            (m.offset(), m.key(), m.value()) for m in consume_range(_broker(bootstrap), topic, p, 0, count)
        ]
        got: list[tuple[int, bytes | None, bytes | None]] = []
        offset = 0
        while len(got) < count:
            try:
                body = _get(f"{base}/fetch?topic={topic}&partition={p}&offset={offset}&max_records=500")
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"partition {p} at {offset}: HTTP {exc.code}") from None
            records = body["records"]
            if not records:
                break
            for r in records:
                got.append((r["offset"], _bytes(r["key"]), _bytes(r["value"])))
            offset = records[-1]["offset"] + 1
        assert got == broker, (
            f"partition {p}: the replica serves {len(got)} records, the broker has {len(broker)}"
        )
