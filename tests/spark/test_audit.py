"""``processor audit`` as a scrubber, on hand-made archives: every planted problem is found once and
stays open while it lasts; a fixed problem is resolved; a replayed micro-batch writes its findings
once; bounded passes go on where the last one stopped; a truncated object is a finding; the CLI's
exit codes (``--once`` exits 1 while a problem is open); the command opens an encrypted archive with
the key ring of its settings."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from processor.config import load_settings
from processor.crypto.keyring import KeyringProvider, new_key
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.codec import metadata_partition_for, segment_key
from processor.metadata.manifest import manifest_key
from processor.metadata.model import (
    ClaimKind,
    PartitionClaim,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
)
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.segment_assembler import SegmentAssembler, compress_segment
from processor.spark.audit.problems import AuditState
from processor.spark.audit.run import AuditOptions, run_audit
from processor.spark.audit.scrub import estimated_cost
from processor.spark.connection import Connection
from processor.wiring.storage import build_storage
from tests.batch_samples import make_batch
from tests.support.cli import run_cli
from tests.support.segment_v1_writer import SegmentBuilder

pytestmark = [pytest.mark.spark, pytest.mark.integration]
HOUR_MS = 3_600_000


def build(partition: int, first: int, last: int) -> Any:
    b = SegmentBuilder(partition, first, 2048)
    for o in range(first, last + 1):
        b.append(o, 1, 1_700_000_000_000 + o, b"k%d" % o, bytes([o % 256]) * 300, [("h", b"v")])
    return b.seal()


@dataclasses.dataclass
class World:
    """A source topic, a metadata topic and a prefix of its own, and the real copier."""

    stack: StackInfo
    src: str
    meta: str
    prefix: str
    tmp: Path
    storage: Any
    publisher: MetadataPublisher

    def copier(self, clock_ms: int | None = None) -> SegmentCopier:
        clock = (lambda: clock_ms) if clock_ms is not None else (lambda: int(time.time() * 1000))
        return SegmentCopier(
            self.storage, self.publisher, ObjectKeyFactory(self.prefix), "audit-test", clock_ms=clock
        )

    def copy(
        self, partition: int, first: int, last: int, epoch: int = 0, clock_ms: int | None = None
    ) -> RemoteLogSegmentMetadata:
        return self.copier(clock_ms).copy(
            TopicPartition(self.src, partition), build(partition, first, last), epoch
        )

    @property
    def conn(self) -> Connection:
        return Connection(
            self.stack.kafka,
            self.meta,
            self.stack.s3_endpoint_url,
            self.stack.bucket,
            self.prefix,
            "us-east-1",
        )

    def options(self, **extra: Any) -> AuditOptions:
        base: dict[str, Any] = {
            "connection": self.conn,
            "checkpoint": self.tmp / "checkpoint",
            "output": self.tmp / "out",
            "once": True,
            "verify_objects": True,
            "stuck_after_ms": 60_000,
        }
        return AuditOptions(**{**base, **extra})

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
        return {
            **base,
            **self.stack.env(),
            "PROCESSOR_METADATA_TOPIC": self.meta,
            "PROCESSOR_S3_PREFIX": self.prefix,
            "PROCESSOR_S3_REGION": "us-east-1",
            "PROCESSOR_DATA_DIR": str(self.tmp / "data"),
        }

    def meta_partition(self, tp: TopicPartition) -> int:
        return metadata_partition_for(tp, self.publisher.num_partitions)

    def metadata_options(self) -> dict[str, str]:
        return {"kafka.bootstrap.servers": self.stack.bootstrap_servers, "metadata.topic": self.meta}

    def rewrite(self, key: str, data: bytes) -> None:
        self.storage.delete(key)
        self.storage.create(key, [data])


@pytest.fixture
def world(local_stack: StackInfo, tmp_path: Path) -> Iterator[World]:
    tag = uuid.uuid4().hex[:6]
    src, meta, prefix = f"audit-{tag}", f"__meta_audit_{tag}", f"audit-{tag}"
    env = {
        **{k: v for k, v in local_stack.env().items() if k.startswith("PROCESSOR_")},
        "PROCESSOR_S3_REGION": "us-east-1",
    }
    parts = ensure_metadata_topic(local_stack.bootstrap_servers, meta, 2, 1)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), src, 9, 1, {})
    w = World(
        local_stack,
        src,
        meta,
        prefix,
        tmp_path,
        build_storage(load_settings(env)),
        MetadataPublisher(local_stack.bootstrap_servers, meta, parts),
    )
    yield w
    w.publisher.close()
    w.storage.close()


def written_findings(out: Path) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = pq.read_table(str(out / "findings")).to_pylist()
    return rows


def open_kinds(run: Any) -> list[str]:
    return sorted(p.kind for p in run.open_problems)


def test_a_clean_archive_has_no_problem(spark, world) -> None:
    for p in range(2):
        for s in (0, 50):
            world.copy(p, s, s + 49)
    run = run_audit(spark, world.options(max_lag_records=10))
    assert run.findings == [] and run.open_problems == [] and run.stats.segments == 4


def test_planted_problems_are_found_stay_open_and_resolve_when_fixed(spark, world) -> None:
    now = int(time.time() * 1000)
    segs = {p: [world.copy(p, s, s + 49) for s in (0, 50, 100)] for p in range(3)}
    # missing object: partition 0's middle segment loses its data object
    gone = segs[0][1]
    kept = world.storage.read_all(gone.data_object_key)
    world.storage.delete(gone.data_object_key)
    # corrupted block: one payload byte flipped
    bad = segs[1][2]
    data = bytearray(world.storage.read_all(bad.data_object_key))
    data[BLOCK_HEADER_LEN + 20] ^= 0xFF
    world.rewrite(bad.data_object_key, bytes(data))
    # truncated object: partition 2's first segment cut short (a finding, never the end of the audit)
    cut = segs[2][0]
    world.rewrite(cut.data_object_key, world.storage.read_all(cut.data_object_key)[:-100])
    # illegal: a finished segment of partition 2 announced as started again
    world.publisher.publish(segs[2][1].with_state(SegmentState.COPY_SEGMENT_STARTED, now))
    # gap on partition 3: 0..49, then 100..149
    world.copy(3, 0, 49)
    world.copy(3, 100, 149)
    # a newer epoch takes over partition 4 over an older segment: superseded, never an overlap
    world.copy(4, 0, 49, epoch=0, clock_ms=now - HOUR_MS)
    world.copy(4, 40, 89, epoch=1)
    # then a zombie of epoch 0 writes again: the fold fences it out (stale_epoch)
    zombie, _index = world.copier().build_metadata(TopicPartition(world.src, 4), build(4, 90, 99), 0)
    world.publisher.publish(zombie)
    # stuck copy on partition 5: STARTED an hour ago, never finished
    stuck, _index = world.copier(now - HOUR_MS).build_metadata(
        TopicPartition(world.src, 5), build(5, 0, 9), 0
    )
    world.publisher.publish(stuck)
    # past retention on partition 6: the log start moved above a segment that is still there
    old = world.copy(6, 0, 49, clock_ms=now - HOUR_MS)
    world.copy(6, 50, 99, clock_ms=now - HOUR_MS)
    world.publisher.publish(RemoteLogStartOffset(TopicPartition(world.src, 6), 50, now, "audit-test", 0))
    # a metadata record that does not decode, and an object no segment references
    producer = new_producer(world.stack.bootstrap_servers, "audit-test")
    producer.produce(
        world.meta, value=b"\x01\x07not avro", key=f"{world.src}/0/garbage".encode(), partition=0
    )
    assert producer.flush(10) == 0
    world.storage.create(f"{world.prefix}/{world.src}/0/00000000000000099999-stray.log", [b"stray"])
    # count mismatch on partition 7: the metadata says 5 fewer records than the index (more than its
    # offsets hold would be out of bounds: the fold rejects that as invalid)
    started, index = world.copier().build_metadata(TopicPartition(world.src, 7), build(7, 0, 19), 0)
    world.storage.create(started.data_object_key, build(7, 0, 19).blocks)
    world.storage.create(started.index_object_key, [index])
    wrong = dataclasses.replace(started, record_count=started.record_count - 5)
    world.publisher.publish(wrong)
    world.publisher.publish(wrong.with_state(SegmentState.COPY_SEGMENT_FINISHED, now))
    # missing manifest on partition 8: finished an hour ago, the bucket alone could not rebuild it
    # (partition 7's segment just finished without one: within the grace, not a finding)
    unmanifested = world.copy(8, 0, 49, clock_ms=now - HOUR_MS)
    manifest = world.storage.read_all(manifest_key(unmanifested.data_object_key))
    world.storage.delete(manifest_key(unmanifested.data_object_key))

    run = run_audit(spark, world.options())
    by_kind = {f.kind: f for f in run.findings}
    assert sorted(by_kind) == sorted(
        [
            "count_mismatch",
            "crc_mismatch",
            "illegal",
            "missing_manifest",
            "missing_object",
            "offset_gap",
            "orphan_object",
            "past_retention",
            "stale_epoch",
            "stuck_copy",
            "superseded_segment",
            "truncated_object",
            "undecodable",
        ]
    ), run.findings
    assert len(run.findings) == len({f.key for f in run.findings})  # each problem once
    assert by_kind["missing_object"].segment_id == str(gone.segment_id.id)
    assert by_kind["missing_manifest"].segment_id == str(unmanifested.segment_id.id)
    assert by_kind["crc_mismatch"].segment_id == str(bad.segment_id.id)
    assert by_kind["truncated_object"].segment_id == str(cut.segment_id.id)
    assert (
        by_kind["offset_gap"].partition,
        by_kind["offset_gap"].start_offset,
        by_kind["offset_gap"].end_offset,
    ) == (3, 50, 99)
    assert by_kind["past_retention"].segment_id == str(old.segment_id.id)
    assert by_kind["stuck_copy"].segment_id == str(stuck.segment_id.id)
    assert "older than epoch 1" in by_kind["stale_epoch"].detail
    assert run.rejected == {"illegal": 1, "stale_epoch": 1, "undecodable": 1}
    assert "offset_overlap" not in by_kind  # the takeover by a newer epoch is the fold's to serve
    assert open_kinds(run) == sorted(by_kind)

    again = run_audit(spark, world.options())  # the problems last: still open, none new
    assert (
        open_kinds(again) == sorted(by_kind) and again.outcome.opened == [] and again.outcome.resolved == []
    )

    world.storage.create(gone.data_object_key, [kept])  # fixed: the object is back
    world.copy(3, 50, 99)  # fixed: the gap is filled
    world.storage.create(manifest_key(unmanifested.data_object_key), [manifest])  # fixed: rewritten
    fixed = run_audit(spark, world.options())
    resolved = sorted(k.split(":")[0] for k in fixed.outcome.resolved)
    assert resolved == ["missing_manifest", "missing_object", "offset_gap"]
    assert "missing_object" not in open_kinds(fixed) and "offset_gap" not in open_kinds(fixed)
    view = pq.read_table(str(world.tmp / "out" / "problems")).to_pylist()
    statuses = {(r["kind"], r["status"]) for r in view}
    assert ("missing_object", "resolved") in statuses and ("crc_mismatch", "open") in statuses
    assert all(r["first_seen_ms"] <= r["last_seen_ms"] for r in view)


def claim(world: World, partition: int) -> int:
    """A LEAD claim of the source partition; its epoch is the offset it got."""
    tp = TopicPartition(world.src, partition)
    return world.publisher.publish(PartitionClaim(tp, uuid.uuid4(), ClaimKind.LEAD, "audit-test", 0))


def test_a_takeover_by_claim_is_clean_and_rejected_records_are_named_by_the_folds_reason(
    spark, world
) -> None:
    # partition 0: owned, taken over by a newer claim, the new owner goes on: nothing to report
    first = claim(world, 0)
    world.copy(0, 0, 49, epoch=first)
    second = claim(world, 0)
    world.copy(0, 50, 99, epoch=second)
    # partition 1: after a takeover the old owner (a zombie) starts a copy; the owner finishes a
    # segment over one already served
    old = claim(world, 1)
    world.copy(1, 0, 49, epoch=old)
    owner = claim(world, 1)
    world.copy(1, 50, 99, epoch=owner)
    tp = TopicPartition(world.src, 1)
    zombie, _index = world.copier().build_metadata(tp, build(1, 100, 109), old)
    world.publisher.publish(zombie)
    world.copy(1, 90, 119, epoch=owner)
    run = run_audit(spark, world.options())
    found = {f.kind: f for f in run.findings}
    assert sorted(found) == ["overlap", "stale_epoch"], run.findings
    assert run.rejected == {"overlap": 1, "stale_epoch": 1}
    assert found["stale_epoch"].segment_id == str(zombie.segment_id.id)
    assert f"the current claim is {owner}" in found["stale_epoch"].detail
    assert (found["overlap"].partition, found["overlap"].start_offset, found["overlap"].end_offset) == (
        1,
        90,
        119,
    )
    assert "overlaps served segment" in found["overlap"].detail
    assert all(f.partition == 1 for f in run.findings)  # the takeover of partition 0 is no finding
    # the owner's cleanup tombstones the zombie's key: that problem is resolved, the overlap stays
    producer = new_producer(world.stack.bootstrap_servers, "audit-test")
    producer.produce(
        world.meta, key=segment_key(zombie.segment_id), value=None, partition=world.meta_partition(tp)
    )
    assert producer.flush(10) == 0
    after = run_audit(spark, world.options())
    assert [k.split(":")[0] for k in after.outcome.resolved] == ["stale_epoch"]
    assert open_kinds(after) == ["overlap"] and after.rejected == {}
    rows = spark.read.format("remote_log_metadata").options(**world.metadata_options()).load()
    claims = rows.where("record_type = 'claim' AND partition = 1").orderBy("meta_offset").collect()
    assert [(r["meta_offset"], r["state"]) for r in claims] == [(old, "LEAD"), (owner, "LEAD")]


def test_a_replayed_micro_batch_writes_its_findings_once(spark, world, monkeypatch) -> None:
    seg = world.copy(0, 0, 49)
    world.copy(0, 100, 149)  # a gap: one finding
    world.storage.delete(seg.data_object_key)  # and a missing object: another
    crashed: list[bool] = []
    real_save = AuditState.save

    def crash_once(self: AuditState, path: Path) -> None:
        if not crashed:
            crashed.append(True)
            raise RuntimeError("crash after the findings were written, before the state")
        real_save(self, path)

    monkeypatch.setattr(AuditState, "save", crash_once)
    with pytest.raises(Exception, match="crash after the findings were written"):
        run_audit(spark, world.options())
    first = written_findings(world.tmp / "out")
    assert sorted(r["kind"] for r in first) == ["missing_object", "offset_gap"]
    run = run_audit(spark, world.options())  # Spark replays the batch that failed
    assert run.passes == ["batch-0"]
    rows = written_findings(world.tmp / "out")
    assert sorted((r["pass_id"], r["kind"]) for r in rows) == [
        ("batch-0", "missing_object"),
        ("batch-0", "offset_gap"),
    ]
    assert open_kinds(run) == ["missing_object", "offset_gap"]


def test_bounded_passes_go_on_where_the_last_stopped_and_full_crc_reads_everything(spark, world) -> None:
    segs = [world.copy(p, s, s + 49) for p in range(3) for s in (0, 50)]
    per_segment = max(estimated_cost(s, False, 3)[0] for s in segs)
    small = world.options(max_requests_per_pass=1 + 2 * per_segment)  # the listing and two segments
    checked: list[int] = []
    for _ in range(3):
        run = run_audit(spark, small)
        checked.append(run.stats.segments)
    state = AuditState.load(world.tmp / "checkpoint" / "audit-state.json")
    assert checked == [2, 2, 2] and state.cursor.last_complete_ms is not None and state.cursor.cycle == 0
    run = run_audit(spark, small)  # a new cycle starts from the first segment again
    state = AuditState.load(world.tmp / "checkpoint" / "audit-state.json")
    assert run.stats.segments == 2 and state.cursor.cycle == 1 and state.cursor.checked == 2
    full = run_audit(spark, world.options(full_crc=True, checkpoint=world.tmp / "cp-full"))
    assert full.stats.segments == len(segs)
    assert full.stats.bytes_read == sum(s.segment_size_in_bytes + s.index_size_in_bytes for s in segs)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor", "audit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.usefixtures("unreachable_fails_fast")
def test_audit_cli_exits_2_on_bad_input_and_3_when_the_broker_is_down(world) -> None:
    env = world.env()
    # bad input and an unreachable broker end before any Spark session: in this process
    assert run_cli(env, "audit", "--once", "--stuck-after-ms", "-5").returncode == 2
    down = run_cli({**env, "PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:1"}, "audit", "--once")
    assert down.returncode == 3, down.stderr[-2000:]


# Four audits, each a Spark job over the archive. The first runs as a child process (the command's
# smoke test, with a session of its own); the others call the CLI in this process, where the command
# borrows the tests' session and leaves it running.
@pytest.mark.timeout(300)
def test_audit_cli_exits_1_while_a_problem_is_open(spark, world) -> None:
    env = world.env()
    seg = world.copy(0, 0, 49)
    clean = _cli(env, "--once", "--verify-objects")
    assert clean.returncode == 0, clean.stdout[-2000:] + clean.stderr[-3000:]
    kept = world.storage.read_all(seg.data_object_key)
    world.storage.delete(seg.data_object_key)
    missing = run_cli(env, "audit", "--once", "--verify-objects")
    assert missing.returncode == 1, missing.stdout[-2000:] + missing.stderr[-3000:]
    assert run_cli(env, "audit", "--once", "--verify-objects").returncode == 1  # still open on the next run
    world.storage.create(seg.data_object_key, [kept])
    fixed = run_cli(env, "audit", "--once", "--verify-objects")
    assert fixed.returncode == 0 and "1 resolved" in fixed.stdout, fixed.stdout
    assert spark.range(3).count() == 3  # the borrowed session still runs


# The command builds its connection through the wiring, as the Spark sources do: the key ring of its
# settings (PROCESSOR_ENCRYPTION_KEYRING) opens the segments a worker encrypted with it. Without one,
# each encrypted segment is a key_unavailable problem (not corrupt, not readable here).
@pytest.mark.timeout(300)
def test_audit_cli_opens_an_encrypted_archive_with_the_key_ring_of_its_settings(spark, world) -> None:
    keyring = world.tmp / "keyring"
    new_key(keyring)
    copier = SegmentCopier(
        world.storage,
        world.publisher,
        ObjectKeyFactory(world.prefix),
        "audit-test",
        encryption=KeyringProvider(keyring),
    )
    segs = []
    for p in range(2):  # format 2 segments (the one a worker encrypts): record batches in blocks
        asm = SegmentAssembler(p, 0, 2048)
        for base in range(0, 50, 10):
            batch = make_batch(
                base, [(1_700_000_000_000 + base + i, b"k%d" % i, b"v" * 300, []) for i in range(10)]
            )
            asm.append(parse_batch_header(batch), batch)
        segs.append(copier.copy(TopicPartition(world.src, p), compress_segment(asm.seal()), 0))
    assert all(seg.custom_metadata is not None for seg in segs)  # sealed under data keys of their own
    env = world.env()
    blind = run_cli(env, "audit", "--once", "--verify-objects")
    assert blind.returncode == 1, blind.stdout[-2000:] + blind.stderr[-3000:]
    found = written_findings(Path(env["PROCESSOR_DATA_DIR"]) / "audit")
    assert sorted((f["kind"], f["partition"]) for f in found) == [
        ("key_unavailable", 0),
        ("key_unavailable", 1),
    ]
    keyed = run_cli(
        {**env, "PROCESSOR_ENCRYPTION_KEYRING": str(keyring)}, "audit", "--once", "--verify-objects"
    )
    assert keyed.returncode == 0, keyed.stdout[-2000:] + keyed.stderr[-3000:]
    assert "0 open problem(s)" in keyed.stdout and "2 resolved" in keyed.stdout, keyed.stdout
