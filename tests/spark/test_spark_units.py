"""The pure parts of the Spark side, without a Spark session: options, offsets, planning, the audit
rules, and the Arrow conversion."""

from __future__ import annotations

import uuid

import pytest

from processor.errors import ConfigError
from processor.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
    TopicPartition,
)
from processor.segment.block_header import BlockInfo
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord, TimestampType
from processor.spark.arrow_records import ARROW_SCHEMA, records_to_batch
from processor.spark.audit_rules import PartitionAudit, audit_partition
from processor.spark.options import record_options
from processor.spark.planning import DataLossError, plan_partition, resolve_offsets
from processor.spark.tiered_records import cap_offsets, decode_offsets, encode_offsets

pytestmark = pytest.mark.spark

ENV = {
    "PROCESSOR_BOOTSTRAP_SERVERS": "kafka:9092",
    "PROCESSOR_S3_BUCKET": "bucket-a",
    "PROCESSOR_METADATA_TOPIC": "meta",
}


def test_options_fall_back_to_the_worker_environment_and_reject_bad_input() -> None:
    opts = record_options({"subscribe": "a,b", "s3.prefix": "x/y"}, ENV)
    assert opts.topics == ("a", "b") and opts.connection.bootstrap_servers == "kafka:9092"
    assert (opts.connection.s3_bucket, opts.connection.s3_prefix, opts.connection.metadata_topic) == (
        "bucket-a",
        "x/y",
        "meta",
    )
    opts = record_options(
        {"ASSIGN": '{"t":[1,0]}', "startingOffsets": '{"t":{"0":5,"1":-2}}', "maxOffsetsPerTrigger": "7"}, ENV
    )
    assert opts.assign == {"t": (0, 1)} and opts.starting == {"t": {0: 5, 1: -2}}
    assert opts.max_offsets_per_trigger == 7 and opts.wants("t", 1) and not opts.wants("t", 2)
    for bad in (
        {},
        {"subscribe": "a", "assign": '{"a":[0]}'},
        {"subscribe": "bad/topic"},
        {"subscribe": "a", "startingOffsets": "{nope"},
        {"subscribe": "a", "endingOffsets": "earliest"},
        {"subscribe": "a", "maxOffsetsPerTrigger": "0"},
        {"subscribe": "a", "tail": "dead"},
        {"subscribe": "a", "failOnDataLoss": "maybe"},
    ):
        with pytest.raises((ConfigError, ValueError)):
            record_options(bad, ENV)


def test_offsets_are_json_with_sorted_keys_and_caps_spread_over_partitions() -> None:
    tp = TopicPartition
    offsets = {tp("b", 10): 3, tp("a", 2): 1, tp("b", 2): 9}
    doc = encode_offsets(offsets)
    assert list(doc) == ["a", "b"] and list(doc["b"]) == ["10", "2"]
    assert decode_offsets(doc) == offsets
    start = {tp("t", 0): 0, tp("t", 1): 100}
    latest = {tp("t", 0): 1000, tp("t", 1): 110}
    capped = cap_offsets(start, latest, 101)
    assert sum(capped[k] - start[k] for k in start) <= 101 and capped[tp("t", 1)] > 100
    assert cap_offsets(start, latest, 10_000) == latest


def seg(start: int, end: int, blocks: int) -> tuple[RemoteLogSegmentMetadata, SegmentIndex]:
    sid = uuid.uuid4()
    keys = ObjectKeyFactory("p").segment("t", 0, start, sid, 0)
    meta = RemoteLogSegmentMetadata(
        RemoteLogSegmentId("t", 0, sid),
        start,
        end,
        10 * end,
        0,
        "w",
        0,
        ((0, start),),
        100 * blocks,
        SegmentState.COPY_SEGMENT_FINISHED,
        keys.data,
        keys.index,
        1,
        end - start + 1,
        0,
        10,
    )
    per = (end - start + 1) // blocks
    infos = tuple(
        BlockInfo(
            i * 100,
            100,
            start + i * per,
            start + (i + 1) * per - 1,
            10 * (start + i * per),
            10 * (start + (i + 1) * per - 1),
        )
        for i in range(blocks)
    )
    return meta, SegmentIndex("t", 0, sid, start, end, end - start + 1, 0, 100 * blocks, infos)


def test_planning_reads_only_the_blocks_of_the_range_and_splits_big_segments() -> None:
    a, ia = seg(0, 99, 10)
    b, ib = seg(100, 199, 10)
    indexes = {str(a.segment_id.id): ia, str(b.segment_id.id): ib}
    tp = TopicPartition("t", 0)
    slices = plan_partition(tp, [a, b], indexes, 95, 125, partition_bytes=1 << 20)
    assert [(s.first_block, len(s.blocks)) for s in slices] == [(9, 1), (0, 3)]
    assert {(s.from_offset, s.until_offset) for s in slices} == {(95, 100), (100, 125)}
    split = plan_partition(tp, [a], indexes, 0, 100, partition_bytes=300)
    assert [len(s.blocks) for s in split] == [3, 3, 3, 1]
    timed = plan_partition(tp, [a, b], indexes, 0, 200, min_ts=1500, partition_bytes=1 << 20)
    assert sum(len(s.blocks) for s in timed) == 5  # the blocks holding timestamps >= 1500 only
    with pytest.raises(DataLossError):
        plan_partition(tp, [a, seg(150, 199, 5)[0]], indexes, 0, 200, partition_bytes=1 << 20)
    assert resolve_offsets("earliest", {tp: [a, b]}, "latest") == {tp: 0}
    assert resolve_offsets({"t": {0: -1}}, {tp: [a, b]}, "earliest") == {tp: 200}


def row(
    sid: str, state: str, start: int, end: int, off: int, ts: int = 0, kind: str = "segment"
) -> dict[str, object]:
    return {
        "record_type": kind,
        "segment_id": sid,
        "state": state,
        "start_offset": start,
        "end_offset": end,
        "event_timestamp_ms": ts,
        "meta_partition": 0,
        "meta_offset": off,
        "decode_error": None,
    }


def test_audit_rules_find_each_problem_once() -> None:
    audit = PartitionAudit("t", 0)
    f, s = "COPY_SEGMENT_FINISHED", "COPY_SEGMENT_STARTED"
    rows = [row("a", s, 0, 9, 0), row("a", f, 0, 9, 1), row("b", f, 20, 29, 2), row("c", f, 25, 39, 3)]
    found = audit_partition(audit, rows, now_ms=10, stuck_after_ms=100)
    assert sorted((x.kind, x.start_offset, x.end_offset) for x in found) == [
        ("offset_gap", 10, 19),
        ("offset_overlap", 25, 29),
    ]
    assert audit_partition(audit, [], now_ms=10, stuck_after_ms=100) == []  # never twice
    restored = PartitionAudit.from_json("t", 0, audit.to_json())
    more = [
        row("a", s, 0, 9, 4),
        row("d", s, 40, 49, 5, ts=0),
        {"decode_error": "bad", "meta_partition": 0, "meta_offset": 6},
    ]
    kinds = sorted(x.kind for x in audit_partition(restored, more, now_ms=1000, stuck_after_ms=100))
    assert kinds == ["illegal_transition", "stuck_copy", "undecodable_record"]
    deleting = PartitionAudit("t", 2)
    rows = [row("e", f, 0, 9, 0), row("e", "DELETE_SEGMENT_STARTED", 0, 9, 1, ts=0)]
    assert [x.kind for x in audit_partition(deleting, rows, now_ms=1000, stuck_after_ms=100)] == [
        "stuck_delete"
    ]
    # a gap a copy in progress fills is not a gap
    filling = PartitionAudit("t", 1)
    rows = [row("x", f, 0, 9, 0), row("y", s, 10, 19, 1, ts=5), row("z", f, 20, 29, 2)]
    assert audit_partition(filling, rows, now_ms=10, stuck_after_ms=100) == []


def test_arrow_batches_keep_null_distinct_from_empty() -> None:
    records = [
        KafkaRecord(5, 1000, TimestampType.CREATE_TIME, None, b"", (("h", None), ("h", b""))),
        KafkaRecord(6, 2000, TimestampType.LOG_APPEND_TIME, b"", None, ()),
    ]
    batch = records_to_batch("t", 3, records)
    assert batch.schema == ARROW_SCHEMA
    d = batch.to_pydict()
    assert d["key"] == [None, b""] and d["value"] == [b"", None]
    assert d["headers"] == [[{"key": "h", "value": None}, {"key": "h", "value": b""}], []]
    assert d["timestampType"] == [0, 1] and d["partition"] == [3, 3] and d["offset"] == [5, 6]


def test_metadata_rows_decode_records_and_keep_garbage_and_tombstones_as_rows() -> None:
    from processor.metadata.codec import encode_value
    from processor.spark.metadata_source import COLUMNS, record_row

    meta, _ = seg(0, 9, 1)
    good = dict(
        zip(
            COLUMNS,
            record_row(1, 7, 1000, f"t/0/{meta.segment_id.id}".encode(), encode_value(meta)),
            strict=True,
        )
    )
    assert (good["record_type"], good["segment_id"], good["start_offset"], good["end_offset"]) == (
        "segment",
        str(meta.segment_id.id),
        0,
        9,
    )
    assert good["decode_error"] is None and (good["meta_partition"], good["meta_offset"]) == (1, 7)
    bad = dict(zip(COLUMNS, record_row(0, 3, 0, b"t/4/abc", b"\x01\x09junk"), strict=True))
    assert bad["decode_error"] and (bad["topic"], bad["partition"], bad["segment_id"]) == ("t", 4, "abc")
    gone = dict(zip(COLUMNS, record_row(0, 4, 0, b"t/4/abc", None), strict=True))
    assert gone["record_type"] == "tombstone" and gone["decode_error"] is None


def test_audit_checks_each_topic_id_as_its_own_history() -> None:
    """A topic deleted and re-created under the same name starts again at offset 0 with a new topic
    id: its segments overlap the old id's offsets without being an overlap."""
    audit = PartitionAudit("t", 0)
    f = "COPY_SEGMENT_FINISHED"
    old = [{**row("a", f, 0, 399, 0), "topic_id": "old-id"}]
    new = [
        {**row("b", f, 0, 299, 1), "topic_id": "new-id"},
        {**row("c", f, 250, 699, 2), "topic_id": "new-id"},
    ]
    found = audit_partition(audit, old + new, now_ms=10, stuck_after_ms=100)
    assert [(x.kind, x.start_offset, x.end_offset) for x in found] == [("offset_overlap", 250, 299)]
    restored = PartitionAudit.from_json("t", 0, audit.to_json())
    assert {s.topic_id for s in restored.segments.values()} == {"old-id", "new-id"}
