"""Ownership by claims on a running stack: retention never fences its own workers across rebalances,
hostile records on the metadata and deletion topics are contained, and two owners whose group
generations collide cannot lose or hide an offset.

Each test ends by reading what was archived back through the remote reader and comparing it, byte
for byte, with what a plain consumer reads from the broker.
"""

from __future__ import annotations

import dataclasses
import signal
import time
import uuid
from pathlib import Path

import pytest

from processor.config import load_settings
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_topic import DELETION_TOPIC_CONFIG
from processor.metadata.codec import encode_value, metadata_partition_for, record_key
from processor.metadata.model import RemoteLogSegmentId, SegmentState
from processor.metadata.topic_io import load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.live_tail import consume_range
from processor.spark_sources.entry import connection_from
from processor.wiring.read_side import open_read_side
from tests.integration.invariants import check_invariants, running_worker, wait_for_log
from tests.integration.lifecycle_support import produce, storage_for
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, worker_env
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

PARTITIONS = 4
DAY = 24 * 3600 * 1000


def _env(info: StackInfo, data_dir: Path, topic: str, meta: str, worker: str, **extra: str) -> dict[str, str]:
    settings = {
        "PROCESSOR_METADATA_TOPIC": meta,
        "PROCESSOR_METADATA_PARTITIONS": "2",
        "PROCESSOR_DELETION_TOPIC": f"{meta}-deletions",
        "PROCESSOR_S3_PREFIX": topic,
        "PROCESSOR_SESSION_TIMEOUT_MS": TEST_SESSION_TIMEOUT_MS,
        "PROCESSOR_WORKER_ID": worker,
        "PROCESSOR_APP_ID": f"app-{topic}",
        "PROCESSOR_SEGMENT_BYTES": str(12 * 1024),
        "PROCESSOR_BLOCK_BYTES": "4096",
        "PROCESSOR_SEGMENT_MS": "300",
        "PROCESSOR_RETENTION_CHECK_MS": "1000",
    }
    return worker_env(info, data_dir, topic, **{**settings, **extra})


class Produced:
    """Records produced to each partition of a topic (the broker's high watermark is no good for this:
    Tansu reports the last batch's base offset + 1)."""

    def __init__(self, info: StackInfo, topic: str) -> None:
        self.info, self.topic = info, topic
        self.counts = dict.fromkeys(range(PARTITIONS), 0)

    def each(self, n: int, timestamp_ms: int) -> None:
        for p in range(PARTITIONS):
            produce(self.info.bootstrap_servers, self.topic, p, n, timestamp_ms)
            self.counts[p] += n

    def ends(self) -> dict[TopicPartition, int]:
        return {TopicPartition(self.topic, p): n - 1 for p, n in self.counts.items()}


def assert_reads_byte_exact(
    info: StackInfo,
    env: dict[str, str],
    topic: str,
    first: dict[TopicPartition, int],
    ends: dict[TopicPartition, int],
) -> None:
    """Remote reads of ``first[tp]..ends[tp]`` equal what the broker returns, field for field."""
    import os

    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        side = open_read_side(load_settings(), topic, None)
        broker_side = connection_from({})  # the same settings, as the Spark sources read them
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    try:
        for tp, end in ends.items():
            if end < first[tp]:
                continue
            broker = {
                int(m.offset() or 0): (m.key(), m.value(), m.timestamp()[1], list(m.headers() or []))
                for m in consume_range(broker_side, topic, tp.partition, first[tp], end + 1)
            }
            remote: dict[int, tuple[object, ...]] = {}
            offset = first[tp]
            while offset <= end:
                records = side.reader.read_from_offset(tp, offset, 10_000)
                for r in records:
                    if r.offset <= end:
                        remote[r.offset] = (
                            r.key,
                            r.value,
                            r.timestamp,
                            list(r.headers),
                        )
                offset = records[-1].offset + 1
            assert remote == broker, f"{tp}: remote reads differ from the broker"
    finally:
        side.close()


def test_retention_never_fences_its_workers_when_a_third_joins(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """Two workers with one day of time retention; a third joins (a rebalance: the generation moves on,
    the partitions the two keep keep their claims) while three-day-old records keep arriving and being
    deleted; then recent records: every partition keeps offloading (no worker fenced itself on a
    partition it keeps), and what is archived reads back byte-exact."""
    topic, meta = "own-retention", "__remote_log_metadata_own_retention"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, PARTITIONS, 1, {})
    envs = {
        w: _env(local_stack, tmp_path / w, topic, meta, w, PROCESSOR_REMOTE_RETENTION_MS="1d") for w in "abc"
    }
    old = int(time.time() * 1000) - 3 * DAY
    produced = Produced(local_stack, topic)
    with (
        running_worker(envs["a"], tmp_path / "a.log") as a,
        running_worker(envs["b"], tmp_path / "b.log") as b,
    ):
        wait_for_log(a, "resuming at", 60)
        wait_for_log(b, "resuming at", 60)
        produced.each(30, old)
        wait_for_log(a, "segments deleted", 60)
        mark = len(a.log())
        with running_worker(envs["c"], tmp_path / "c.log") as c:
            wait_for_log(a, "assignment (generation", 60, after=mark)  # the third worker's rebalance
            for _ in range(3):  # old records keep arriving and going, on the kept partitions
                produced.each(20, old)
            first = produced.ends()
            produced.each(100, int(time.time() * 1000))
            ends = produced.ends()
            wait_offloaded(local_stack.bootstrap_servers, meta, ends, 150, c.proc)
            logs = {w: worker.log() for w, worker in zip("abc", (a, b, c), strict=True)}
    state, _ = load_remote_state(local_stack.bootstrap_servers, meta)
    holders = {str(tp): claim.writer_id for tp in ends if (claim := state.partition(tp).header.claim)}
    for name, text in logs.items():
        # A partition the rebalance moves may be claimed by its new worker before the old one has
        # its new assignment: the old one sees the claim and stops (the fence doing its job). A
        # partition a worker still holds at the end must never have been fenced on it.
        for line in text.splitlines():
            if "not this worker's" in line:
                fenced = next((tp for tp in holders if f"{tp}: " in line), None)
                assert fenced is not None, f"{name} fenced on a partition of no claim: {line}"
                assert holders[fenced] != name, f"{name} stopped writing {fenced}, which it holds: {line}"
    for tp in ends:
        part = state.partition(tp)
        assert part.log_start_offset > 0, f"{tp}: time retention deleted nothing"
        assert all(s.max_timestamp_ms > old for s in part.finished() if s.start_offset > first[tp])
    assert_reads_byte_exact(local_stack, envs["a"], topic, {tp: e + 1 for tp, e in first.items()}, ends)


def test_hostile_records_are_contained(local_stack: StackInfo, tmp_path: Path) -> None:
    """A negative partition, an enormous range at a huge epoch, values that do not decode, a NUL in a
    topic name, a record under another key, deletes of keys outside the prefix, a deletion-topic entry
    naming a served segment: the worker stays up and keeps offloading, reads stay byte-exact, and
    nothing outside the prefix (nor any served object) is touched."""
    topic, meta = "own-hostile", "__remote_log_metadata_own_hostile"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, PARTITIONS, 1, {})
    env = _env(local_stack, tmp_path / "w", topic, meta, "hostile-w")
    storage = storage_for(local_stack)
    outside = "other-app/keep-me.bin"
    storage.create(outside, [b"not ours"])
    produced = Produced(local_stack, topic)
    with running_worker(env, tmp_path / "w.log") as w:
        wait_for_log(w, "resuming at", 60)
        produced.each(40, int(time.time() * 1000))
        ends = produced.ends()
        wait_offloaded(local_stack.bootstrap_servers, meta, ends, 90, w.proc)
        state, _ = load_remote_state(local_stack.bootstrap_servers, meta)
        tp0 = TopicPartition(topic, 0)
        victim = state.partition(tp0).finished()[0]
        epoch = state.partition(tp0).current_epoch
        assert epoch is not None
        producer = new_producer(local_stack.bootstrap_servers, "hostile")
        part0 = metadata_partition_for(tp0, 2)

        def send(key: bytes, value: bytes | None, where: str = meta, partition: int = part0) -> None:
            producer.produce(where, key=key, value=value, partition=partition)

        sid = RemoteLogSegmentId(topic, 0, uuid.uuid4(), victim.segment_id.topic_id)
        keys = ObjectKeyFactory(topic).segment(topic, 0, 0, sid.id, 2**31 - 1, sid.topic_id)
        huge = dataclasses.replace(
            victim, segment_id=sid, end_offset=2**62 - 1, writer_epoch=2**31 - 1, record_count=1,
            data_object_key=keys.data, index_object_key=keys.index, writer_id="mallory",
        )  # fmt: skip
        send(record_key(huge), encode_value(huge))
        negative = dataclasses.replace(
            huge, segment_id=dataclasses.replace(sid, partition=-1, id=uuid.uuid4())
        )
        send(f"{topic}/-1/{negative.segment_id.id}".encode(), encode_value(negative))
        nul = dataclasses.replace(
            huge, segment_id=dataclasses.replace(sid, topic="own\x00hostile", id=uuid.uuid4())
        )
        send(record_key(nul), encode_value(nul))
        send(record_key(victim), b"\x01\x00\xff\xff garbage")
        send(record_key(victim) + b"-other", encode_value(victim))
        foreign = dataclasses.replace(
            victim, state=SegmentState.DELETE_SEGMENT_STARTED, writer_epoch=epoch,
            data_object_key=outside, index_object_key=outside + "-index",
        )  # fmt: skip
        send(record_key(foreign), encode_value(foreign))
        ensure_topic(
            new_admin(local_stack.bootstrap_servers, "t"), f"{meta}-deletions", 2, 1, DELETION_TOPIC_CONFIG
        )
        send(
            record_key(victim),
            encode_value(victim.with_state(SegmentState.DELETE_SEGMENT_STARTED, 1)),
            where=f"{meta}-deletions",
        )
        assert producer.flush(30) == 0
        produced.each(40, int(time.time() * 1000))
        ends = produced.ends()
        wait_offloaded(local_stack.bootstrap_servers, meta, ends, 90, w.proc)
        wait_for_log(w, "deletion topic entry", 30)  # the retention pass saw the entry and left it
        assert w.proc.poll() is None
        assert "crashed" not in w.log()
    state, rejected = load_remote_state(local_stack.bootstrap_servers, meta)
    assert rejected >= 6
    assert victim.segment_id.id in {s.segment_id.id for s in state.partition(tp0).finished()}
    assert storage.exists(victim.data_object_key) and storage.exists(victim.index_object_key)
    assert storage.exists(outside)
    storage.close()
    assert_reads_byte_exact(local_stack, env, topic, {tp: 0 for tp in ends}, ends)


def test_colliding_generations_and_a_paused_owner_lose_nothing(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """A group that emptied and restarted hands out generations again from the start: the worker of
    the new group and the old, paused one would have held the same epoch. With claims they cannot:
    the paused one's late records are rejected, and no offset is lost, doubled or deleted."""
    topic, meta = "own-collide", "__remote_log_metadata_own_collide"
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), topic, PARTITIONS, 1, {})
    env_a = _env(local_stack, tmp_path / "a", topic, meta, "collide-a")
    env_b = _env(local_stack, tmp_path / "b", topic, meta, "collide-b")
    now = int(time.time() * 1000)
    produced = Produced(local_stack, topic)
    with running_worker(env_a, tmp_path / "a.log") as a:
        wait_for_log(a, "resuming at", 60)
        produced.each(60, now)
        wait_offloaded(local_stack.bootstrap_servers, meta, produced.ends(), 90, a.proc)
        produced.each(60, now)
        a.proc.send_signal(signal.SIGSTOP)  # mid-copy, with records still to copy; the group empties
        time.sleep(8)  # past the 3 s session timeout: the group is empty; the new one starts over
        with running_worker(env_b, tmp_path / "b.log") as b:
            wait_for_log(b, "resuming at", 60)
            a.proc.send_signal(signal.SIGCONT)  # the old owner goes on with what it believed
            produced.each(60, now)
            ends = produced.ends()
            wait_offloaded(local_stack.bootstrap_servers, meta, ends, 120, b.proc)
    # The next owner comes from a group of its own: what it must do (claim, clean up what the paused
    # one left) does not depend on the group, and Tansu, after the group above emptied and started
    # its generations over, can keep a newcomer re-joining the same generation without an assignment.
    env_c = _env(local_stack, tmp_path / "c", topic, meta, "collide-c", PROCESSOR_APP_ID=f"app-{topic}-next")
    with running_worker(env_c, tmp_path / "c.log") as c:
        wait_for_log(c, "resuming at", 60)  # the next owner cleans what the paused one left
        deadline = time.monotonic() + 60
        found = check_invariants(local_stack, meta, topic, ends)
        while found.problems and time.monotonic() < deadline:
            time.sleep(1.0)
            found = check_invariants(local_stack, meta, topic, ends)
    assert not found.problems, "\n".join(found.problems[:20])
    assert_reads_byte_exact(local_stack, env_b, topic, {tp: 0 for tp in ends}, ends)
