"""The pure parts of the Spark side, without a Spark session: the Arrow conversion, the metadata
rows."""

from __future__ import annotations

import pytest

from processor.segment.records import KafkaRecord, TimestampType
from processor.spark.arrow_records import ARROW_SCHEMA, ARROW_SCHEMA_NO_HEADERS, records_to_batch
from tests.spark.test_planning import seg

pytestmark = pytest.mark.spark


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
    assert good["value"] == encode_value(meta)  # the bytes as they are on the topic
    bad = dict(zip(COLUMNS, record_row(0, 3, 0, b"t/4/abc", b"\x01\x09junk"), strict=True))
    assert bad["decode_error"] and (bad["topic"], bad["partition"], bad["segment_id"]) == ("t", 4, "abc")
    gone = dict(zip(COLUMNS, record_row(0, 4, 0, b"t/4/abc", None), strict=True))
    assert gone["record_type"] == "tombstone" and gone["decode_error"] is None
    assert (gone["topic"], gone["partition"], gone["raw_key"]) == ("t", 4, b"t/4/abc")


def test_claim_rows_name_their_kind_claim_id_and_the_epoch_a_release_ends() -> None:
    import uuid

    from processor.kafka.partition import TopicPartition
    from processor.metadata.codec import encode_value, record_key
    from processor.metadata.model import ClaimKind, PartitionClaim
    from processor.spark.metadata_source import COLUMNS, record_row

    tp = TopicPartition("t", 2)
    topic_id = str(uuid.uuid4())
    lead = PartitionClaim(tp, uuid.uuid4(), ClaimKind.LEAD, "worker-1", 1000, topic_id)
    row = dict(zip(COLUMNS, record_row(0, 42, 1000, record_key(lead), encode_value(lead)), strict=True))
    assert (row["record_type"], row["topic"], row["partition"], row["state"], row["writer_id"]) == (
        "claim",
        "t",
        2,
        "LEAD",
        "worker-1",
    )
    assert row["segment_id"] == str(lead.claim_id) and row["topic_id"] == topic_id
    assert row["meta_offset"] == 42 and row["writer_epoch"] is None  # the claim's epoch is its offset
    assert row["raw_key"] == record_key(lead) == f"t/2/claim/{lead.claim_id}".encode()
    release = PartitionClaim(tp, uuid.uuid4(), ClaimKind.RELEASE, "cli", 2000, released_epoch=42)
    row = dict(zip(COLUMNS, record_row(0, 50, 2000, record_key(release), encode_value(release)), strict=True))
    assert (row["state"], row["writer_epoch"]) == ("RELEASE", 42)
    # a claim's tombstone or a garbage value under a claim key still names its partition and claim id
    gone = dict(zip(COLUMNS, record_row(0, 51, 0, record_key(lead), None), strict=True))
    assert (gone["record_type"], gone["topic"], gone["partition"], gone["segment_id"]) == (
        "tombstone",
        "t",
        2,
        str(lead.claim_id),
    )
