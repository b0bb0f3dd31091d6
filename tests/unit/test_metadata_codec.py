from __future__ import annotations

import contextlib
import dataclasses
import json

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import (
    decode_value,
    encode_value,
    metadata_partition_for,
    record_key,
    schema_dir,
)
from processor.metadata.model import SegmentState
from tests.unit.metadata_samples import partition_deletes, segment_metadata, updates


@given(st.one_of(segment_metadata(), updates, partition_deletes))
def test_records_round_trip(record) -> None:
    assert decode_value(encode_value(record)) == record


@given(segment_metadata())
def test_key_is_per_segment_and_partition_per_source_partition(meta) -> None:
    own = f"{meta.segment_id.topic}/{meta.segment_id.partition}/{meta.segment_id.id}"
    deleting = meta.state in (SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED)
    assert record_key(meta) == (own + "/delete" if deleting else own).encode()
    p = metadata_partition_for(meta.topic_partition, 7)
    assert 0 <= p < 7 and p == metadata_partition_for(
        TopicPartition(meta.segment_id.topic, meta.segment_id.partition), 7
    )


@given(st.binary(max_size=300))
def test_garbage_raises_format_error_only(raw: bytes) -> None:
    with contextlib.suppress(FormatError):
        decode_value(raw)


@given(segment_metadata(), st.data())
def test_truncated_or_extended_records_are_rejected(meta, data: st.DataObject) -> None:
    raw = encode_value(meta)
    cut = data.draw(st.integers(0, len(raw) - 1))
    # without its trailing supersedes (and replaces_state) the body is exactly what an earlier schema
    # wrote: it reads as that record (readers of the earlier schema get the same), every other cut
    # is refused
    v2 = len(encode_value(dataclasses.replace(meta, supersedes=()))) - 1  # the empty array: one byte
    v1 = v2 - (1 if meta.replaces_state is None else 2)
    if cut == v2:
        assert decode_value(raw[:cut]) == dataclasses.replace(meta, supersedes=())
        return
    if cut == v1:
        assert decode_value(raw[:cut]) == dataclasses.replace(meta, replaces_state=None, supersedes=())
        return
    with pytest.raises(FormatError):
        decode_value(raw[:cut])
    with pytest.raises(FormatError):
        decode_value(raw + b"\x00")


def test_unknown_version_and_type_are_rejected() -> None:
    with pytest.raises(FormatError, match="version"):
        decode_value(b"\x02\x00abc")
    with pytest.raises(FormatError, match="type"):
        decode_value(b"\x01\x09abc")
    with pytest.raises(FormatError):
        decode_value(None)


def test_schemas_are_valid_avro() -> None:
    files = sorted(schema_dir().glob("*.avsc"))
    assert {f.name for f in files} == {
        "RemoteLogSegmentMetadata.avsc",
        "RemoteLogSegmentMetadataUpdate.avsc",
        "RemotePartitionDeleteMetadata.avsc",
        "RemoteLogStartOffset.avsc",
        "PartitionClaim.avsc",
        "RestoreProgress.avsc",  # the restore progress topic (processor/restore/progress_record.py)
    }
    for f in files:
        fastavro.parse_schema(json.loads(f.read_text()), named_schemas={})


def test_the_segment_model_has_exactly_the_schemas_fields() -> None:
    """One list of a segment record's fields: the schema's. The model, the codec and the Spark columns
    follow it; a field added to one and not the other fails here."""
    import dataclasses

    from processor.metadata.codec import TYPE_SEGMENT, schema_fields
    from processor.metadata.model import RemoteLogSegmentMetadata

    assert set(schema_fields(TYPE_SEGMENT)) == {f.name for f in dataclasses.fields(RemoteLogSegmentMetadata)}
