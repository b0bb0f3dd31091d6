"""The segment listing read from the cache's bytes (processor/follower/listing_rows.py) lists exactly
what the model-based listing lists (``listed_segments`` and ``segment_to_json``): the same rows, the
same JSON and text lines byte for byte, and for a damaged cache the same error, on generated caches
with corrupted values among them."""

from __future__ import annotations

import dataclasses
import io
import json
import uuid
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.commands.segments import _TEXT_FIELDS, _TEXT_LINE
from processor.follower.cache_keys import I64, U64, tp_key
from processor.follower.cache_queries import _segment_of
from processor.follower.listing_rows import model_row, rows_of_values
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.partition import TopicPartition
from processor.metadata import codec
from processor.metadata.codec import encode_value
from processor.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    SegmentState,
)
from processor.reader.record_json import SEGMENT_JSON_FIELDS, segment_rows_json, segment_to_json
from processor.segment.object_keys import ObjectKeyFactory
from tests.unit.metadata_samples import segment_metadata

TOPIC = "orders"


@st.composite
def topic_segments(draw: st.DrawFn) -> list[RemoteLogSegmentMetadata]:
    """Segments of a few partitions of TOPIC (runs of one partition, as a listing reads them), some
    of them any valid record (another topic's, a rewrite's, many leader epochs...)."""
    topic_id = draw(st.one_of(st.none(), st.uuids().map(str)))
    prefix = draw(st.sampled_from(["", "archive", "a/b-1", "x=1/y.z"]))
    writers = draw(st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3))
    out = []
    for partition in draw(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=3, unique=True)):
        start = draw(st.integers(0, 2**40))
        for _ in range(draw(st.integers(0, 5))):
            if draw(st.integers(0, 4)) == 0:
                out.append(draw(segment_metadata()))
                continue
            sid = RemoteLogSegmentId(TOPIC, partition, draw(st.uuids()), topic_id)
            end = start + draw(st.integers(0, 2**20))
            epoch = draw(st.integers(-1, 2**62))
            keys = ObjectKeyFactory(prefix).segment(TOPIC, partition, start, sid.id, max(epoch, 0), topic_id)
            state = draw(st.sampled_from(list(SegmentState)))
            replaces = None
            if state is SegmentState.DELETE_SEGMENT_STARTED:
                replaces = draw(st.sampled_from([None, SegmentState.COPY_SEGMENT_FINISHED]))
            out.append(
                RemoteLogSegmentMetadata(
                    sid, start, end, draw(st.integers(-1, 2**62)), draw(st.integers(0, 2**62)),
                    draw(st.sampled_from(writers)), epoch,
                    tuple(draw(st.lists(st.tuples(st.integers(-1, 9), st.integers(0, 2**62)), min_size=1,
                                        max_size=3))),
                    draw(st.integers(0, 2**62)), state, keys.data, keys.index, draw(st.sampled_from([1, 2])),
                    draw(st.integers(0, end - start + 1)), draw(st.integers(0, 2**32 - 1)),
                    draw(st.integers(0, 2**62)), draw(st.one_of(st.none(), st.binary(max_size=8))),
                    draw(st.booleans()), replaces,
                )
            )  # fmt: skip
            start = end + 1
    return out


def corrupt(value: bytes, data: st.DataObject) -> bytes:
    """Bytes changed anywhere (the framing included), cut short, lengthened, or another record."""
    how = data.draw(st.sampled_from(["bytes", "cut", "append", "garbage", "update"]))
    raw = bytearray(value)
    if how == "bytes":
        for _ in range(data.draw(st.integers(1, 3))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    elif how == "cut":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif how == "append":
        raw += data.draw(st.binary(min_size=1, max_size=3))
    elif how == "garbage":
        raw = bytearray(data.draw(st.binary(max_size=80)))
    else:  # a record of another type under the segment's key
        segment = _segment_of(value)
        update = RemoteLogSegmentMetadataUpdate(
            segment.segment_id, 1, "w", 1, SegmentState.COPY_SEGMENT_FINISHED
        )
        raw = bytearray(encode_value(update))
    return bytes(raw)


def out_of_bounds(segment: RemoteLogSegmentMetadata, data: st.DataObject) -> bytes:
    """``segment`` with one field changed, mostly outside validation's bounds (the stored bytes decode
    but the record is invalid), sometimes still valid but of a shape the walk leaves to the model."""
    sid = segment.segment_id
    start, end = segment.start_offset, segment.end_offset
    other = uuid.UUID(int=sid.id.int ^ 1)
    changes: list[dict[str, Any]] = [
        {
            "start_offset": start + 1,
            "end_offset": max(end, start + 1),
            "record_count": 0,
        },  # the key names another start
        {"segment_id": dataclasses.replace(sid, id=other)},  # the key names another segment
        {"segment_id": dataclasses.replace(sid, partition=sid.partition ^ 1)},
        {"segment_id": dataclasses.replace(sid, topic_id=None if sid.topic_id else str(other))},
        {"segment_id": dataclasses.replace(sid, topic_id=str(other).upper())},
        {"segment_id": dataclasses.replace(sid, topic="no such/topic")},
        {"segment_id": dataclasses.replace(sid, partition=-1)},
        {"data_object_key": segment.data_object_key.replace(".log", "0.log")},
        {
            "data_object_key": "../" + segment.data_object_key,
            "index_object_key": "../" + segment.index_object_key,
        },
        {"index_object_key": segment.data_object_key + "-other"},
        {"record_count": end - start + 2},
        {"segment_format_version": 3},
        {"writer_epoch": -2},
        {"writer_epoch": 2**62 + 1},
        {"index_crc32": 2**32},
        {"segment_size_in_bytes": -1},
        {"index_size_in_bytes": 2**62 + 1},
        {"writer_id": "w" * 256},
        {"writer_id": "\u00e9" * 200},  # 400 bytes but 200 characters: valid, read by the model
        {"writer_id": 'a\nb\u2028"c'},
        {"custom_metadata": bytes(1025)},
        {"segment_leader_epochs": tuple((e, e) for e in range(70))},  # valid: read by the model
        {"state": SegmentState.COPY_SEGMENT_FINISHED, "replaces_state": SegmentState.COPY_SEGMENT_STARTED},
        {"state": SegmentState.DELETE_SEGMENT_STARTED, "replaces_state": SegmentState.DELETE_SEGMENT_STARTED},
        {"supersedes": (other,)},  # valid: read by the model
        {"supersedes": (sid.id,)},
    ]
    changed = dataclasses.replace(segment, **data.draw(st.sampled_from(changes)))
    return encode_value(changed)


def write_cache(
    path: Path, stored: list[tuple[TopicPartition, RemoteLogSegmentMetadata, bytes | None]]
) -> MetadataCache:
    """A cache holding an ``L`` key per segment (under ``tp``) and its ``S`` value (None: none)."""
    cache = MetadataCache(path)
    for tp, segment, value in stored:
        key = tp_key(tp) + U64.pack(segment.start_offset) + segment.segment_id.id.bytes
        cache._db[b"L" + key] = I64.pack(segment.end_offset)
        if value is not None:
            cache._db[b"S" + segment.segment_id.id.bytes] = value
    return cache


def outcome(listing: Any) -> Any:
    try:
        return listing()
    except Exception as exc:  # compared: the same error, type and message
        return (type(exc).__name__, str(exc))


def model_listing(cache: MetadataCache, tps: list[TopicPartition]) -> list[Any]:
    """The listing as the command made it before: a model a segment, then its row."""
    return [model_row(s) for tp in tps for s in cache.listed_segments(tp)]


def listing_tps(cache: MetadataCache) -> list[TopicPartition]:
    return [tp for tp in cache.topic_partitions() if tp.topic == TOPIC]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topic_segments(), st.data())
def test_the_listing_from_bytes_is_the_model_listing_corrupted_values_included(
    tmp_path_factory: pytest.TempPathFactory, segments: list[RemoteLogSegmentMetadata], data: st.DataObject
) -> None:
    stored: list[tuple[TopicPartition, RemoteLogSegmentMetadata, bytes | None]] = []
    seen: set[uuid.UUID] = set()
    for segment in segments:
        if segment.segment_id.id in seen:
            continue
        seen.add(segment.segment_id.id)
        tp = TopicPartition(TOPIC, segment.segment_id.partition)
        value: bytes | None = encode_value(segment)
        damage = data.draw(
            st.sampled_from(["none"] * 4 + ["corrupt", "out of bounds", "out of bounds", "missing"])
        )
        if damage == "corrupt":
            value = corrupt(encode_value(segment), data)
        elif damage == "out of bounds":
            value = out_of_bounds(segment, data)
        elif damage == "missing":
            value = None  # an L key whose S key is gone
        stored.append((tp, segment, value))
    cache = write_cache(tmp_path_factory.mktemp("cache"), stored)
    try:
        if stored and data.draw(st.integers(0, 9)) == 0:  # a damaged L value: short or negative
            tp, segment, _ = data.draw(st.sampled_from(stored))
            key = b"L" + tp_key(tp) + U64.pack(segment.start_offset) + segment.segment_id.id.bytes
            cache._db[key] = data.draw(st.sampled_from([b"", b"\x00" * 7, I64.pack(-1), I64.pack(5) + b"x"]))
        tps = listing_tps(cache)
        expected = outcome(lambda: model_listing(cache, tps))
        assert outcome(lambda: cache.listed_rows(tps)) == expected
        # and value by value (a listing stops at its first error: the others are compared here)
        for _, _, value in stored:
            if value is not None:
                alone = outcome(lambda v=value: rows_of_values([v], _segment_of))
                assert alone == outcome(lambda v=value: [model_row(_segment_of(v))])
    finally:
        cache.close()


@settings(max_examples=100, deadline=None)
@given(st.lists(segment_metadata(), min_size=1, max_size=8))
def test_json_and_text_lines_are_those_of_segment_to_json(segments: list[RemoteLogSegmentMetadata]) -> None:
    rows = [model_row(s) for s in segments]
    dicts = [segment_to_json(s) for s in segments]
    assert [dict(zip(SEGMENT_JSON_FIELDS, row, strict=True)) for row in rows] == dicts
    encode = json.JSONEncoder().encode
    assert segment_rows_json(rows) == "".join(encode(d) + "\n" for d in dicts)
    before = "".join(
        f"{r['id']:36}  {r['partition']:>9}  {r['start_offset']:>12}  {r['end_offset']:>12}  "
        f"{r['state']:22}  {r['size_bytes']:>12}  {r['object_key']}\n"
        for r in dicts
    )
    assert "".join(map(_TEXT_LINE.__mod__, map(_TEXT_FIELDS, rows))) == before


def counting_decode() -> tuple[list[bytes], Any]:
    decoded: list[bytes] = []

    def decode(value: bytes) -> RemoteLogSegmentMetadata:
        decoded.append(value)
        return _segment_of(value)

    return decoded, decode


@settings(max_examples=40, deadline=None)
@given(topic_segments())
def test_plain_records_are_read_from_the_bytes_without_a_model(
    segments: list[RemoteLogSegmentMetadata],
) -> None:
    plain = [s for s in segments if s.segment_id.topic == TOPIC]  # the generator's own records
    values = [encode_value(s) for s in plain]
    decoded, decode = counting_decode()
    assert rows_of_values(values, decode) == [model_row(s) for s in plain]
    assert decoded == []


def _older_schema_value(segment: RemoteLogSegmentMetadata, schema_name: str) -> bytes:
    """``segment`` as a writer of an earlier schema (schemas/history/) wrote it."""
    schema = codec._history_schema(schema_name)
    _, body = codec._to_avro(segment)
    names = {f["name"] for f in schema["fields"]}
    out = io.BytesIO()
    out.write(bytes((codec.FRAMING_VERSION, codec.TYPE_SEGMENT)))
    fastavro.schemaless_writer(out, schema, {k: v for k, v in body.items() if k in names})
    return out.getvalue()


@settings(max_examples=40, deadline=None)
@given(topic_segments(), st.sampled_from(codec._SCHEMA_HISTORY[codec.TYPE_SEGMENT]))
def test_records_of_earlier_schemas_are_read_from_the_bytes_too(
    segments: list[RemoteLogSegmentMetadata], schema_name: str
) -> None:
    plain = [
        dataclasses.replace(s, replaces_state=None, supersedes=())
        for s in segments
        if s.segment_id.topic == TOPIC
    ]
    values = [_older_schema_value(s, schema_name) for s in plain]
    decoded, decode = counting_decode()
    assert rows_of_values(values, decode) == [model_row(_segment_of(v)) for v in values]
    assert decoded == []


def test_a_value_the_walk_does_not_accept_goes_to_the_model_path_which_names_the_error(
    tmp_path: Path,
) -> None:
    keys = ObjectKeyFactory("").segment(TOPIC, 0, 0, uuid.UUID(int=7), 1, None)
    good = RemoteLogSegmentMetadata(
        RemoteLogSegmentId(TOPIC, 0, uuid.UUID(int=7)), 0, 9, 1, 1, "w", 1, ((0, 0),), 10,
        SegmentState.COPY_SEGMENT_FINISHED, keys.data, keys.index, 2, 10, 0, 1,
    )  # fmt: skip
    bad_key = dataclasses.replace(good, segment_id=RemoteLogSegmentId(TOPIC, 0, uuid.UUID(int=8)))
    cache = write_cache(tmp_path / "c", [(TopicPartition(TOPIC, 0), bad_key, encode_value(bad_key))])
    try:
        with pytest.raises(Exception, match="is not the data object of segment") as raised:
            cache.listed_rows(listing_tps(cache))
        assert outcome(lambda: model_listing(cache, listing_tps(cache))) == (
            type(raised.value).__name__,
            str(raised.value),
        )
    finally:
        cache.close()
