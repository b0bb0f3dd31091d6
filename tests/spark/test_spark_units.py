"""The pure parts of the Spark side, without a Spark session: the audit rules, the Arrow conversion,
the metadata rows."""

from __future__ import annotations

import pytest

from processor.segment.records import KafkaRecord, TimestampType
from processor.spark.arrow_records import ARROW_SCHEMA, ARROW_SCHEMA_NO_HEADERS, records_to_batch
from processor.spark.audit_rules import PartitionAudit, audit_partition
from tests.spark.test_planning import seg

pytestmark = pytest.mark.spark


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
    # a record without headers has null headers, as in Spark's Kafka source
    assert d["headers"] == [[{"key": "h", "value": None}, {"key": "h", "value": b""}], None]
    plain = records_to_batch("t", 3, records, include_headers=False)
    assert plain.schema == ARROW_SCHEMA_NO_HEADERS and plain.num_columns == 7
    assert d["timestampType"] == [0, 1] and d["partition"] == [3, 3] and d["offset"] == [5, 6]


def test_metadata_rows_decode_records_and_keep_garbage_and_tombstones_as_rows() -> None:
    from processor.metadata.codec import encode_value
    from processor.spark.metadata_source import COLUMNS, record_row

    meta, _ = seg(0, 9, 1)
    good = dict(zip(COLUMNS, record_row(1, 7, 1000, b"t/0/x", encode_value(meta)), strict=True))
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
