"""The claim record's wire format, old schema versions, and the bounds every record is checked
against on decode (processor/metadata/validation.py). Pure."""

from __future__ import annotations

import dataclasses
import io
import json
import uuid

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import (
    TYPE_PARTITION_DELETE,
    decode_message,
    decode_value,
    encode_value,
    record_key,
    schema_dir,
)
from processor.metadata.model import (
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    PartitionDeleteState,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
)
from tests.unit.metadata_samples import (
    claims,
    log_start_offsets,
    partition_deletes,
    segment_metadata,
    updates,
)

records = st.one_of(segment_metadata(), updates, partition_deletes, log_start_offsets, claims)


@given(claims)
def test_claims_round_trip_with_their_key(record: PartitionClaim) -> None:
    raw = encode_value(record)
    assert raw[:2] == b"\x01\x04"  # framing version 1, record type 4
    assert decode_message(record_key(record), raw) == record
    assert record_key(record).decode().split("/")[2:] == ["claim", str(record.claim_id)]


@given(records, st.data())
def test_a_corrupted_record_decodes_to_a_valid_record_or_is_rejected(
    record: MetadataRecord, data: st.DataObject
) -> None:
    raw = bytearray(encode_value(record))
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    try:
        decoded = decode_value(bytes(raw))
    except FormatError:
        return
    from processor.metadata.validation import check_record

    assert check_record(decoded) is decoded  # whatever decodes lies within the bounds


@given(records)
def test_a_record_under_another_key_is_rejected(record: MetadataRecord) -> None:
    with pytest.raises(FormatError, match="not the record's key"):
        decode_message(record_key(record) + b"x", encode_value(record))
    with pytest.raises(FormatError):
        decode_message(None, encode_value(record))


def test_partition_delete_records_of_the_first_schema_still_decode() -> None:
    old = json.loads((schema_dir() / "history" / "RemotePartitionDeleteMetadata.v1.avsc").read_text())
    body = io.BytesIO()
    fastavro.schemaless_writer(
        body,
        fastavro.parse_schema(old, named_schemas={}),
        {"topic": "orders", "topic_id": None, "partition": 3, "state": "DELETE_PARTITION_MARKED",
         "event_timestamp_ms": 5, "writer_id": "cli"},
    )  # fmt: skip
    raw = bytes([1, TYPE_PARTITION_DELETE]) + body.getvalue()
    assert decode_value(raw) == RemotePartitionDeleteMetadata(
        TopicPartition("orders", 3), PartitionDeleteState.DELETE_PARTITION_MARKED, 5, "cli", None, -1
    )


@given(segment_metadata())
def test_writer_epochs_written_as_int_read_the_same_as_long(record: RemoteLogSegmentMetadata) -> None:
    """writer_epoch was an Avro int before claims: int and long share the zig-zag varint encoding."""
    small = dataclasses.replace(record, writer_epoch=12345)
    assert decode_value(encode_value(small)) == small


BOUNDS = [
    (
        "partition -1",
        lambda s: dataclasses.replace(s, segment_id=dataclasses.replace(s.segment_id, partition=-1)),
    ),
    (
        "topic 'a\\x00b'",
        lambda s: dataclasses.replace(s, segment_id=dataclasses.replace(s.segment_id, topic="a\x00b")),
    ),
    (
        "topic id 'x'",
        lambda s: dataclasses.replace(s, segment_id=dataclasses.replace(s.segment_id, topic_id="x")),
    ),
    ("offsets", lambda s: dataclasses.replace(s, start_offset=0, end_offset=2**62, record_count=1)),
    ("record count", lambda s: dataclasses.replace(s, record_count=s.end_offset - s.start_offset + 2)),
    ("writer epoch", lambda s: dataclasses.replace(s, writer_epoch=2**62 + 1)),
    (
        "object key",
        lambda s: dataclasses.replace(s, data_object_key="../x.log", index_object_key="../x.log-index"),
    ),
    ("index must be", lambda s: dataclasses.replace(s, index_object_key=s.data_object_key + "-idx")),
    ("segment format version", lambda s: dataclasses.replace(s, segment_format_version=9)),
    ("custom metadata", lambda s: dataclasses.replace(s, custom_metadata=b"x" * 1025)),
    ("writer id", lambda s: dataclasses.replace(s, writer_id="w" * 256)),
    (
        "superseded segments",
        lambda s: dataclasses.replace(s, supersedes=tuple(uuid.UUID(int=100 + i) for i in range(4097))),
    ),
    ("superseded segments", lambda s: dataclasses.replace(s, supersedes=(uuid.UUID(int=5),) * 2)),
    ("superseded segments", lambda s: dataclasses.replace(s, supersedes=(s.segment_id.id,))),
]


@pytest.mark.parametrize(("named", "break_it"), BOUNDS, ids=[b[0] for b in BOUNDS])
def test_records_outside_the_bounds_are_rejected_naming_what_is_wrong(named: str, break_it) -> None:
    sid = RemoteLogSegmentId("orders", 3, uuid.UUID(int=9))
    from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
    from processor.segment.object_keys import ObjectKeyFactory

    keys = ObjectKeyFactory("p").segment("orders", 3, 10, sid.id, 1)
    good = RemoteLogSegmentMetadata(
        sid,
        10,
        19,
        0,
        0,
        "w",
        1,
        ((0, 10),),
        1,
        SegmentState.COPY_SEGMENT_FINISHED,
        keys.data,
        keys.index,
        2,
        10,
        0,
        1,
    )
    assert decode_value(encode_value(good)) == good
    with pytest.raises(FormatError, match="invalid metadata record") as exc:
        decode_value(encode_value(break_it(good)))
    assert named.split(" ")[0] in str(exc.value)


def test_a_release_must_name_the_claim_it_ends() -> None:
    tp = TopicPartition("orders", 3)
    with pytest.raises(FormatError, match="released_epoch"):
        decode_value(encode_value(PartitionClaim(tp, uuid.uuid4(), ClaimKind.RELEASE, "cli", 0)))
    with pytest.raises(FormatError, match="released_epoch"):
        decode_value(encode_value(PartitionClaim(tp, uuid.uuid4(), ClaimKind.LEAD, "w", 0, released_epoch=4)))
