"""``processor audit`` on a hand-made archive: clean means nothing; each planted problem is exactly one
finding; a restarted audit does not repeat them; the CLI's exit codes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from processor.config import load_settings
from processor.devstack.stack import StackInfo
from processor.kafka_clients import ensure_topic, new_admin, new_producer
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicPartition
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.audit import AuditOptions, run_audit
from processor.spark.options import Connection
from processor.wiring.storage import build_storage
from tests.spark.conftest import META
from tests.support.segment_v1_writer import SegmentBuilder

pytestmark = [pytest.mark.spark, pytest.mark.integration]

SRC = "audit-src"
AUDIT_META = "__remote_log_metadata_audit"
PREFIX = "audit"


def build(partition: int, first: int, last: int, start: int | None = None):
    b = SegmentBuilder(partition, first if start is None else start, 2048)
    for o in range(first, last + 1):
        b.append(o, 1, 1_700_000_000_000 + o, b"k%d" % o, bytes([o % 256]) * 300, [("h", b"v")])
    return b.seal()


@pytest.fixture(scope="module")
def planted(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory):
    """Partitions 0..2 of SRC: three contiguous segments each, copied by the real copier."""
    env = {
        **{k: v for k, v in local_stack.env().items() if k.startswith("PROCESSOR_")},
        "PROCESSOR_METADATA_TOPIC": AUDIT_META,
        "PROCESSOR_S3_PREFIX": PREFIX,
        "PROCESSOR_S3_REGION": "us-east-1",
    }
    settings = load_settings(env)
    parts = ensure_metadata_topic(local_stack.bootstrap_servers, AUDIT_META, 2, 1)
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), SRC, 6, 1, {})
    storage = build_storage(settings)
    publisher = MetadataPublisher(local_stack.bootstrap_servers, AUDIT_META, parts)
    copier = SegmentCopier(storage, publisher, ObjectKeyFactory(PREFIX), "audit-test")
    segments: dict[int, list[RemoteLogSegmentMetadata]] = {}
    for p in range(3):
        segments[p] = [copier.copy(TopicPartition(SRC, p), build(p, s, s + 49), 0) for s in (0, 50, 100)]
    conn = Connection(
        local_stack.kafka,
        AUDIT_META,
        local_stack.s3_endpoint_url,
        local_stack.bucket,
        PREFIX,
        "us-east-1",
    )
    tmp = tmp_path_factory.mktemp("audit")
    yield {
        "storage": storage,
        "publisher": publisher,
        "copier": copier,
        "segments": segments,
        "conn": conn,
        "tmp": tmp,
        "env": env,
    }
    publisher.close()
    storage.close()


def options(planted, **extra) -> AuditOptions:
    return AuditOptions(
        connection=planted["conn"],
        checkpoint=planted["tmp"] / "checkpoint",
        output=planted["tmp"] / "findings",
        once=True,
        verify_objects=True,
        stuck_after_ms=60_000,
        **extra,
    )


def test_audit_of_a_clean_archive_finds_nothing(spark, planted) -> None:
    run = run_audit(spark, options(planted, max_lag_records=10))
    assert run.findings == []


def test_audit_reports_each_planted_problem_once_and_never_again(spark, planted, local_stack) -> None:
    storage, publisher, copier, segs = (
        planted["storage"],
        planted["publisher"],
        planted["copier"],
        planted["segments"],
    )
    # deleted object: segment 1 of partition 0 loses its data object
    deleted = segs[0][1]
    storage.delete(deleted.data_object_key)
    # corrupted block: one payload byte of block 0 of segment 2 of partition 1 flipped
    corrupted = segs[1][2]
    data = bytearray(storage.read_all(corrupted.data_object_key))
    data[BLOCK_HEADER_LEN + 20] ^= 0xFF
    storage.delete(corrupted.data_object_key)
    storage.create(corrupted.data_object_key, [bytes(data)])
    # illegal transition: a finished segment of partition 2 announced as started again
    illegal = segs[2][0]
    publisher.publish(illegal.with_state(SegmentState.COPY_SEGMENT_STARTED, int(time.time() * 1000)))
    # gap on partition 3: 0..49, then 100..149
    gap_a = copier.copy(TopicPartition(SRC, 3), build(3, 0, 49), 0)
    gap_b = copier.copy(TopicPartition(SRC, 3), build(3, 100, 149), 0)
    # overlap on partition 4: 0..49, then 40..89
    copier.copy(TopicPartition(SRC, 4), build(4, 0, 49), 0)
    overlap_b = copier.copy(TopicPartition(SRC, 4), build(4, 40, 89), 0)
    # stuck copy on partition 5: STARTED an hour ago, never finished
    stuck, _index = copier.build_metadata(TopicPartition(SRC, 5), build(5, 0, 9), 0)
    stuck = stuck.with_state(SegmentState.COPY_SEGMENT_STARTED, int(time.time() * 1000) - 3_600_000)
    publisher.publish(stuck)
    # garbage on the metadata topic
    producer = new_producer(local_stack.bootstrap_servers, "audit-test")
    producer.produce(AUDIT_META, value=b"\x01\x07not avro", key=b"audit-src/0/garbage", partition=0)
    assert producer.flush(10) == 0
    # an object no segment references
    orphan_key = f"{PREFIX}/{SRC}/0/00000000000000099999-stray.log"
    storage.create(orphan_key, [b"stray"])
    # offload lag: partition 2's topic holds 200 records, the archive ends at 149
    producer = new_producer(local_stack.bootstrap_servers, "audit-test")
    for i in range(200):
        producer.produce(SRC, value=b"x", partition=2)
        if i >= 198:  # Tansu's high watermark is right only after a request that follows a batch
            assert producer.flush(10) == 0
    time.sleep(0.5)

    run = run_audit(spark, options(planted, max_lag_records=10))
    by_kind = {r[0]: r for r in run.findings}
    assert run.kinds == sorted(
        [
            "crc_mismatch",
            "illegal_transition",
            "missing_object",
            "offload_lag",
            "offset_gap",
            "offset_overlap",
            "orphan_object",
            "stuck_copy",
            "undecodable_record",
        ]
    ), run.findings
    assert by_kind["missing_object"][5] == str(deleted.segment_id.id)
    assert by_kind["crc_mismatch"][5] == str(corrupted.segment_id.id)
    assert by_kind["illegal_transition"][5] == str(illegal.segment_id.id)
    assert by_kind["offset_gap"][1:6] == (SRC, 3, 50, 99, str(gap_b.segment_id.id))
    assert by_kind["offset_overlap"][1:6] == (SRC, 4, 40, 49, str(overlap_b.segment_id.id))
    assert by_kind["stuck_copy"][5] == str(stuck.segment_id.id)
    assert by_kind["orphan_object"][6].endswith("stray.log")
    assert by_kind["offload_lag"][1:5] == (SRC, 2, 150, 199)
    assert gap_a.end_offset == 49

    import pyarrow.parquet as pq

    written = pq.read_table(str(planted["tmp"] / "findings"))
    assert sorted(written.column("kind").to_pylist()) == run.kinds
    assert written.schema.names == [
        "kind",
        "topic",
        "partition",
        "start_offset",
        "end_offset",
        "segment_id",
        "detail",
        "detected_at",
    ]

    again = run_audit(spark, options(planted, max_lag_records=10))
    assert again.findings == []


def test_remote_log_metadata_batch_has_a_row_per_message_and_garbage_as_rows(spark, planted) -> None:
    conn = planted["conn"]
    df = (
        spark.read.format("remote_log_metadata")
        .option("kafka.bootstrap.servers", conn.bootstrap_servers)
        .option("metadata.topic", AUDIT_META)
        .load()
    )
    rows = df.collect()
    positions = [(r["meta_partition"], r["meta_offset"]) for r in rows]
    assert len(positions) == len(set(positions))
    garbage = [r for r in rows if r["decode_error"] is not None]
    assert len(garbage) == 1 and garbage[0]["key"] == "audit-src/0/garbage" and garbage[0]["topic"] == SRC
    finished = [r for r in rows if r["state"] == "COPY_SEGMENT_FINISHED"]
    first = planted["segments"][0][0]
    mine = next(r for r in finished if r["segment_id"] == str(first.segment_id.id))
    assert (mine["topic"], mine["partition"], mine["start_offset"], mine["end_offset"]) == (SRC, 0, 0, 49)
    assert mine["data_object_key"] == first.data_object_key and mine["record_count"] == 50
    epochs = [(e["epoch"], e["start_offset"]) for e in mine["leader_epochs"]]
    assert epochs == list(first.segment_leader_epochs) and mine["record_type"] == "segment"


def _cli(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "processor", "audit", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_audit_cli_exit_codes(local_stack, archive, tmp_path: Path) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
    env = {
        **base,
        **local_stack.env(),
        "PROCESSOR_METADATA_TOPIC": META,
        "PROCESSOR_S3_PREFIX": "spark",
        "PROCESSOR_DATA_DIR": str(tmp_path),
    }
    assert _cli(env, "--once", "--stuck-after-ms", "-5").returncode == 2
    down = _cli({**env, "PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:1"}, "--once")
    assert down.returncode == 3, down.stderr[-2000:]
    clean = _cli(env, "--once", "--format", "json", "--verify-objects")
    assert clean.returncode == 0, clean.stdout[-2000:] + clean.stderr[-3000:]
    assert (tmp_path / "audit" / "checkpoint").is_dir()
