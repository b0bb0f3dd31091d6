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
