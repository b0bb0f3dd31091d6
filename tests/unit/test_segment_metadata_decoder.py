"""The fast segment-record reader decodes exactly what fastavro decodes, or leaves the bytes to it."""

from __future__ import annotations

import dataclasses
import io
import json
import uuid
from pathlib import Path

import fastavro
import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.metadata import model_builders, segment_metadata_decoder
from processor.metadata.codec import (
    TYPE_SEGMENT,
    decode_body_with_fastavro,
    decode_value,
    encode_value,
    parsed_schema,
    schema_dir,
)
from processor.metadata.model import (
    MetadataRecord,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from processor.metadata.validation import check_record
from tests.unit.metadata_samples import segment_metadata

FRAME = 2


def fast(value: bytes) -> RemoteLogSegmentMetadata | None:
    return segment_metadata_decoder.read_segment_metadata(value, FRAME)


def reference(value: bytes) -> MetadataRecord | FormatError:
    try:
        return decode_body_with_fastavro(value, TYPE_SEGMENT)
    except FormatError as exc:
        return exc


def test_the_shipped_schema_has_the_layout_the_reader_is_written_for() -> None:
    assert segment_metadata_decoder.enabled(schema_dir())


def test_a_changed_schema_disables_the_reader(tmp_path: Path) -> None:
    schema = json.loads((schema_dir() / segment_metadata_decoder.SCHEMA_FILE).read_text())
    schema["fields"].append({"name": "new_field", "type": "long", "default": 0})
    (tmp_path / segment_metadata_decoder.SCHEMA_FILE).write_text(json.dumps(schema))
    assert not segment_metadata_decoder.enabled(tmp_path)


@given(segment_metadata())
def test_records_read_the_same_as_with_fastavro(meta: RemoteLogSegmentMetadata) -> None:
    raw = encode_value(meta)
    got = fast(raw)
    assert got == meta == reference(raw)
    assert got is not None and got.segment_id.id == meta.segment_id.id
    assert decode_value(raw) == meta


@given(segment_metadata(), st.data())
def test_corrupted_records_are_read_the_same_or_left_to_fastavro(
    meta: RemoteLogSegmentMetadata, data: st.DataObject
) -> None:
    raw = bytearray(encode_value(meta))
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(FRAME, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(FRAME, len(raw)))]
    value = bytes(raw)
    got, want = fast(value), reference(value)
    if got is not None:
        assert got == want
    if isinstance(want, FormatError):
        assert got is None
        with pytest.raises(FormatError):
            decode_value(value)
    else:
        # decodes the same either way; the bounds check (validation.py) then decides
        try:
            check_record(want)
        except FormatError:
            with pytest.raises(FormatError, match="invalid metadata record"):
                decode_value(value)
        else:
            assert decode_value(value) == want


@given(st.binary(max_size=200))
def test_garbage_is_never_accepted_where_fastavro_rejects_it(body: bytes) -> None:
    value = b"\x01\x00" + body
    got, want = fast(value), reference(value)
    assert got is None if isinstance(want, FormatError) else got in (None, want)


def _encoded_with_two_epoch_blocks(meta: RemoteLogSegmentMetadata) -> bytes:
    """The same record with its leader epochs written as two array blocks, the second with a byte
    size (a negative count): valid Avro that fastavro's writer never produces."""
    assert len(meta.segment_leader_epochs) == 2
    raw = encode_value(meta)
    schema = parsed_schema(TYPE_SEGMENT)
    body = fastavro.schemaless_reader(io.BytesIO(raw[FRAME:]), schema, None)
    assert isinstance(body, dict)

    def avro_long(n: int) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, {"type": "long"}, n)
        return out.getvalue()

    one = avro_long(1)
    (e1, o1), (e2, o2) = meta.segment_leader_epochs
    canonical = avro_long(2) + avro_long(e1) + avro_long(o1) + avro_long(e2) + avro_long(o2) + b"\x00"
    second = avro_long(e2) + avro_long(o2)
    blocks = one + avro_long(e1) + avro_long(o1) + avro_long(-1) + avro_long(len(second)) + second + b"\x00"
    assert raw.count(canonical) == 1
    return raw.replace(canonical, blocks)


def test_valid_encodings_the_reader_does_not_handle_go_to_fastavro() -> None:
    meta = dataclasses.replace(_sample(), segment_leader_epochs=((3, 10), (4, 20)))
    odd = _encoded_with_two_epoch_blocks(meta)
    assert odd != encode_value(meta)
    assert fast(odd) is None
    assert decode_value(odd) == meta


TOPIC_ID = "5a1b0c6e-0000-4000-8000-00000000000a"
DATA_KEY = f"bucket-prefix/{'p' * 200}/orders-{TOPIC_ID}/7/00000000000000000010-{uuid.UUID(int=5)}-e3.log"


def _sample() -> RemoteLogSegmentMetadata:
    return RemoteLogSegmentMetadata(
        RemoteLogSegmentId("orders", 7, uuid.UUID(int=5), TOPIC_ID),
        10,
        99,
        1_700_000_000_000,
        1_700_000_000_123,
        "worker-1",
        3,
        ((3, 10),),
        64 << 20,
        SegmentState.COPY_SEGMENT_FINISHED,
        DATA_KEY,
        DATA_KEY + "-index",
        2,
        90,
        2**32 - 1,
        4096,
        b"\x00custom",
        False,
    )


def test_a_sample_with_long_strings_and_large_numbers_reads_the_same() -> None:
    meta = _sample()
    raw = encode_value(meta)
    assert fast(raw) == meta == reference(raw)


def test_values_the_model_rejects_are_left_to_fastavro_which_raises() -> None:
    meta = _sample()
    raw = encode_value(meta)
    # end_offset 99 (zig-zag 198 = c6 01) -> 5 (0a): end < start, which the model refuses
    bad = raw.replace(b"\xc6\x01", b"\x0a", 1)
    assert fast(bad) is None
    with pytest.raises(FormatError, match="invalid offsets"):
        decode_value(bad)


def test_segment_ids_are_reused_only_for_the_same_encoded_id() -> None:
    meta = _sample()
    again = dataclasses.replace(meta, state=SegmentState.DELETE_SEGMENT_STARTED)
    other_topic_id = dataclasses.replace(
        meta, segment_id=dataclasses.replace(meta.segment_id, topic_id="another")
    )
    first, second, third = (fast(encode_value(m)) for m in (meta, again, other_topic_id))
    assert first == meta and second == again and third == other_topic_id
    assert first is not None and second is not None and third is not None
    assert second.segment_id is first.segment_id
    assert third.segment_id.topic_id == "another"


def test_the_slot_constructor_builds_what_the_dataclass_builds_and_checks_the_same() -> None:
    meta = _sample()
    values = [getattr(meta, f.name) for f in dataclasses.fields(RemoteLogSegmentMetadata)]
    built = model_builders._segment_metadata(*values)
    assert built == meta and hash(built) == hash(meta) and repr(built) == repr(meta)
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.start_offset = 5  # type: ignore[misc]
    values[2] = meta.start_offset - 1  # end_offset < start_offset
    with pytest.raises(ValueError, match="invalid offsets"):
        model_builders._segment_metadata(*values)
    with pytest.raises(ValueError):
        model_builders._segment_metadata(*values[:-1])  # every field, or nothing
