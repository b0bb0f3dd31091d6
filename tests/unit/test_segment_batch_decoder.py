"""The batched segment-record reader (compiled walk + records built in Python) reads exactly what the
one-record reader reads, and a batch decodes to the same records and the same errors as its messages
one at a time."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.metadata import codec, segment_batch_decoder, segment_metadata_decoder
from processor.metadata.codec import decode_message, decode_messages, encode_value, record_key
from processor.metadata.model import (
    MetadataRecord,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from tests.unit.metadata_samples import (
    claims,
    log_start_offsets,
    partition_deletes,
    segment_metadata,
    updates,
)

FRAME = 2


def one_by_one(value: bytes) -> RemoteLogSegmentMetadata | None:
    return segment_metadata_decoder.read_segment_metadata(value, FRAME)


def corrupt(value: bytes, data: st.DataObject) -> bytes:
    raw = bytearray(value)
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.integers(FRAME, len(raw) - 1))
        raw[at] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(FRAME, len(raw)))]
    return bytes(raw)


def outcome(key: bytes | None, value: bytes | None) -> MetadataRecord | str | None:
    """decode_message's answer, an error as its type and text."""
    if value is None:
        return None
    try:
        return decode_message(key, value)
    except FormatError as exc:
        return f"{type(exc).__name__}: {exc}"


def as_compared(decoded: MetadataRecord | FormatError | None) -> MetadataRecord | str | None:
    return f"{type(decoded).__name__}: {decoded}" if isinstance(decoded, FormatError) else decoded


@settings(max_examples=30)
@given(st.lists(segment_metadata(), min_size=1, max_size=6))
def test_generated_records_read_the_same_as_one_by_one(metas: list[RemoteLogSegmentMetadata]) -> None:
    values = [encode_value(m) for m in metas]
    got = segment_batch_decoder.read_segments(values)
    for meta, value, record in zip(metas, values, got, strict=True):
        if meta.supersedes:
            assert record is None  # a rewrite's record: left to the one-record reader
        else:
            assert record == meta == one_by_one(value)


@settings(max_examples=60)
@given(st.lists(segment_metadata(), min_size=1, max_size=4), st.data())
def test_corrupted_records_read_the_same_or_are_left_to_the_one_record_reader(
    metas: list[RemoteLogSegmentMetadata], data: st.DataObject
) -> None:
    values = [corrupt(encode_value(m), data) if data.draw(st.booleans()) else encode_value(m) for m in metas]
    for value, record in zip(values, segment_batch_decoder.read_segments(values), strict=True):
        if record is not None:
            assert record == one_by_one(value)


@given(st.lists(st.binary(max_size=200), min_size=1, max_size=10))
def test_garbage_is_never_read_where_the_one_record_reader_refuses(bodies: list[bytes]) -> None:
    values = [b"\x01\x00" + body for body in bodies]
    for value, record in zip(values, segment_batch_decoder.read_segments(values), strict=True):
        assert record is None or record == one_by_one(value)


any_record = st.one_of(segment_metadata(), updates, partition_deletes, claims, log_start_offsets)


@settings(max_examples=60)
@given(
    st.lists(
        st.tuples(any_record, st.sampled_from(["as is", "corrupt", "tombstone", "wrong key"])), max_size=6
    ),
    st.data(),
)
def test_a_batch_decodes_to_the_records_and_errors_of_its_messages_one_at_a_time(
    items: list[tuple[MetadataRecord, str]], data: st.DataObject
) -> None:
    messages: list[tuple[bytes | None, bytes | None]] = []
    for record, how in items:
        key, value = record_key(record), encode_value(record)
        if how == "corrupt":
            value = corrupt(value, data)
        elif how == "tombstone":
            messages.append((key, None))
            continue
        elif how == "wrong key":
            key = key + b"x"
        messages.append((key, value))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(codec, "BATCH_DECODE_MIN", 1)  # every batch through the compiled walk
        batched = decode_messages(messages)
    assert [as_compared(d) for d in batched] == [outcome(k, v) for k, v in messages]


def test_a_large_batch_of_plain_records_is_read_by_the_compiled_walk() -> None:
    base = RemoteLogSegmentMetadata(
        RemoteLogSegmentId("orders", 3, uuid.UUID(int=1)),
        0,
        999,
        1_700_000_000_000,
        1,
        "worker-1",
        4,
        ((4, 0),),
        1 << 20,
        SegmentState.COPY_SEGMENT_STARTED,
        "",
        "",
        2,
        1000,
        7,
        100,
    )
    metas = []
    for i in range(codec.BATCH_DECODE_MIN):
        sid = dataclasses.replace(base.segment_id, id=uuid.UUID(int=i + 1))
        data = f"p/orders/3/{i * 1000:020d}-{sid.id}-e1.log"
        metas.append(
            dataclasses.replace(
                base,
                segment_id=sid,
                start_offset=i * 1000,
                end_offset=i * 1000 + 999,
                data_object_key=data,
                index_object_key=data + "-index",
            )
        )
    messages = [(record_key(m), encode_value(m)) for m in metas]
    messages[7] = (messages[7][0], messages[7][1][:-3])  # cut short: its error, the others decoded
    read = segment_batch_decoder.read_segments([v for _k, v in messages if v is not None])
    assert sum(r is not None for r in read) == len(metas) - 1
    decoded = decode_messages(messages)
    assert [as_compared(d) for d in decoded] == [outcome(k, v) for k, v in messages]
    assert isinstance(decoded[7], FormatError)
    assert decoded[:7] == metas[:7] and decoded[8:] == metas[8:]
