"""The walk over a broker's Fetch answer reads what kio reads (topic, partition, error code, records)
from any answer kio writes, at every Fetch version the gateway serves; a damaged answer is a
ProtocolError and nothing else."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import uuid
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from processor.gateway.fetch_walk import fetch_node_endpoints, fetch_partitions
from processor.gateway.protocol import ProtocolError, decode_response, encode_response, response_schema
from processor.kafka.api_keys import API_FETCH

VERSIONS = range(4, 18)
Case = tuple[int, bytes, list[Any]]  # a version, an answer of it, its partitions
ERRORS = [ErrorCode.none, ErrorCode.offset_out_of_range, ErrorCode.not_leader_or_follower]


def _build(cls: Any, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


@st.composite
def fetch_answers(draw: st.DrawFn, version: int) -> tuple[bytes, list[tuple[Any, int, int, bytes | None]]]:
    """A Fetch answer of ``version`` written by kio, and what it holds, partition by partition (from
    version 16 with node endpoints or without)."""
    schema = response_schema(API_FETCH, version)
    m = __import__(schema.__module__, fromlist=["x"])
    expected: list[tuple[Any, int, int, bytes | None]] = []
    topics = []
    for _ in range(draw(st.integers(0, 3))):
        key: Any = draw(st.uuids()) if version >= 13 else draw(st.text(min_size=1, max_size=20))
        parts = []
        for _ in range(draw(st.integers(0, 3))):
            index = draw(st.integers(0, 2**31 - 1))
            error = draw(st.sampled_from(ERRORS))
            records = draw(st.none() | st.binary(max_size=300))
            aborted = draw(
                st.none() | st.lists(st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)), max_size=3)
            )
            values: dict[str, Any] = {}
            if version >= 12 and draw(st.booleans()):  # tagged fields written
                values["diverging_epoch"] = m.EpochEndOffset(epoch=3, end_offset=draw(st.integers(0, 99)))
            parts.append(
                _build(
                    m.PartitionData,
                    partition_index=index,
                    error_code=error,
                    high_watermark=draw(st.integers(-1, 2**62)),
                    last_stable_offset=7,
                    log_start_offset=0,
                    preferred_read_replica=-1,
                    records=records,
                    aborted_transactions=None
                    if aborted is None
                    else tuple(m.AbortedTransaction(producer_id=p, first_offset=f) for p, f in aborted),
                    **values,
                )
            )
            expected.append((key, index, int(error), records))
        topic_key = "topic_id" if version >= 13 else "topic"
        topics.append(_build(m.FetchableTopicResponse, **{topic_key: key}, partitions=tuple(parts)))
    endpoints: tuple[Any, ...] = ()
    if version >= 16 and draw(st.booleans()):
        endpoints = (
            m.NodeEndpoint(node_id=draw(st.integers(0, 99)), host="b.internal", port=9092, rack=None),
        )
    body = _build(
        schema, throttle_time=datetime.timedelta(milliseconds=draw(st.integers(0, 1000))),
        error_code=ErrorCode.none, session_id=draw(st.integers(0, 2**31 - 1)), responses=tuple(topics),
        node_endpoints=endpoints,
    )  # fmt: skip
    return encode_response(draw(st.integers(0, 2**31 - 1)), body), expected


@st.composite
def versioned_answers(draw: st.DrawFn) -> tuple[int, bytes, list[tuple[Any, int, int, bytes | None]]]:
    version = draw(st.sampled_from(VERSIONS))
    answer, expected = draw(fetch_answers(version))
    return version, answer, expected


def _walked(answer: bytes, version: int) -> list[tuple[Any, int, int, bytes | None]]:
    return [
        (p.topic, p.partition, p.error_code, None if p.records is None else bytes(p.records))
        for p in fetch_partitions(answer, version)
    ]


@settings(max_examples=200, deadline=None)
@given(versioned_answers())
def test_the_walk_reads_every_partition_kio_wrote(case: Case) -> None:
    version, answer, expected = case
    assert _walked(answer, version) == expected
    named = version >= 16 and bool(decoded_endpoints(answer, version))
    assert fetch_node_endpoints(answer, version) == named


def decoded_endpoints(answer: bytes, version: int) -> Any:
    return decode_response(API_FETCH, version, answer)[1].node_endpoints


@settings(max_examples=120, deadline=None)
@given(versioned_answers(), st.data())
def test_an_answer_cut_short_is_a_protocol_error(
    case: tuple[int, bytes, list[Any]], data: st.DataObject
) -> None:
    version, answer, _expected = case
    cut = data.draw(st.integers(0, len(answer) - 1))
    try:
        fetch_partitions(answer[:cut], version)
    except ProtocolError:
        return
    raise AssertionError(f"{len(answer) - cut} bytes cut off the end went unnoticed")


@settings(max_examples=200, deadline=None)
@given(versioned_answers(), st.data())
def test_damaged_answers_raise_only_protocol_errors(
    case: tuple[int, bytes, list[Any]], data: st.DataObject
) -> None:
    version, answer, _expected = case
    damaged = bytearray(answer)
    for _ in range(data.draw(st.integers(1, 4))):
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.integers(0, 255))
    with contextlib.suppress(ProtocolError):  # any other exception fails the test
        walked = fetch_partitions(bytes(damaged) + data.draw(st.binary(max_size=8)), version)
        assert all(p.records is None or len(p.records) <= len(damaged) for p in walked)


def test_bytes_left_over_are_a_protocol_error() -> None:
    schema = response_schema(API_FETCH, 12)
    body = _build(
        schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0, responses=()
    )
    answer = encode_response(1, body)
    assert fetch_partitions(answer, 12) == []
    with contextlib.suppress(ProtocolError):
        fetch_partitions(answer + b"\x00", 12)
        raise AssertionError("a byte left over went unnoticed")


def test_a_null_topic_id_is_named_none() -> None:
    schema = response_schema(API_FETCH, 13)
    m = __import__(schema.__module__, fromlist=["x"])
    part = _build(m.PartitionData, partition_index=1, error_code=ErrorCode.none, high_watermark=1,
                  last_stable_offset=1, log_start_offset=0, preferred_read_replica=-1, records=b"x",
                  aborted_transactions=None)  # fmt: skip
    topic = m.FetchableTopicResponse(topic_id=uuid.UUID(int=0), partitions=(part,))
    body = _build(schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
                  responses=(topic,))  # fmt: skip
    walked = fetch_partitions(encode_response(1, body), 13)
    assert [(p.topic, p.partition, bytes(p.records or b"")) for p in walked] == [(None, 1, b"x")]


def test_node_endpoints_sent_empty_name_no_broker() -> None:
    """A broker may send the node endpoints field with no entry in every answer (Tansu does)."""
    schema = response_schema(API_FETCH, 16)
    body = _build(
        schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0, responses=()
    )
    answer = encode_response(1, body)
    assert answer[-1:] == b"\x00"  # no tagged field
    empty = answer[:-1] + bytes([1, 0, 1, 1])  # one tagged field: tag 0, 1 byte, an empty compact array
    assert decoded_endpoints(empty, 16) == ()
    assert fetch_partitions(empty, 16) == [] and not fetch_node_endpoints(empty, 16)
