"""Every partition a client's fetch asks for is in the gateway's answer. The gateway holds no fetch
session, so every fetch is a full one, and Java and kafka-python drop a full answer that leaves out a
partition they asked for, records and all, then fetch the same offsets again: with a broker that
leaves out partitions it has nothing for (Tansu does; scripted here), a kafka-python consumer reading
one partition from the archive and the other from the broker received nothing more, for minutes.
A partition left out is answered empty, without error, with the broker's offsets."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from processor.gateway.fetch_answers import answer_fetch
from processor.gateway.protocol import (
    Answer,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    request_head,
    request_schema,
    response_schema,
)
from processor.gateway.state import Archive, GatewayState, ReadMode
from processor.kafka.api_keys import API_FETCH, API_LIST_OFFSETS
from processor.kafka.partition import TopicPartition
from processor.reader.remote_reader import ArchivedBatches

TOPIC = "orders"
TOPIC_ID = uuid.UUID(int=9)
BROKER_RECORDS = bytes(70)  # opaque to the gateway
ARCHIVED_BATCH = bytes(61)
HIGH_WATERMARK = {0: 1250, 1: 1250}


def _build(cls: Any, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _module(schema: Any) -> Any:
    return __import__(schema.__module__, fromlist=["x"])


def _fetch_request(version: int, offsets: dict[int, int], session_epoch: int) -> bytes:
    schema = request_schema(API_FETCH, version)
    m = _module(schema)
    parts = tuple(
        _build(
            m.FetchPartition,
            partition=p,
            current_leader_epoch=-1,
            fetch_offset=offset,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=4096,
        )
        for p, offset in offsets.items()
    )
    body = _build(
        schema, max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=50 << 20,
        isolation_level=0, session_id=0, session_epoch=session_epoch, rack_id="", replica_id=-1,
        topics=(_build(m.FetchTopic, topic=TOPIC, topic_id=TOPIC_ID, partitions=parts),),
        forgotten_topics_data=(),
    )  # fmt: skip
    head = schema.__header_schema__(
        request_api_key=API_FETCH, request_api_version=version, correlation_id=77, client_id="kafka-python"
    )
    return encode_request(head, body)


class OmittingBroker:
    """A broker whose Fetch answers leave out the partitions it has nothing for (``quiet``), as Tansu's
    do; ListOffsets LATEST answers HIGH_WATERMARK, EARLIEST 0."""

    def __init__(self, quiet: set[int]) -> None:
        self.quiet = quiet
        self.answers: list[bytes] = []

    async def __call__(self, request: bytes) -> bytes:
        head = request_head(request)
        _header, asked = decode_request(request)
        schema = response_schema(head.api_key, head.api_version)
        m = _module(schema)
        if head.api_key == API_FETCH:
            topics = []
            for topic in asked.topics:
                parts = tuple(
                    _build(
                        m.PartitionData,
                        partition_index=p.partition,
                        error_code=ErrorCode.none,
                        high_watermark=HIGH_WATERMARK[int(p.partition)],
                        last_stable_offset=-1,
                        log_start_offset=0,
                        aborted_transactions=None,
                        preferred_read_replica=-1,
                        records=BROKER_RECORDS,
                    )
                    for p in topic.partitions
                    if int(p.partition) not in self.quiet
                )
                if parts:
                    topics.append(
                        _build(m.FetchableTopicResponse, topic=TOPIC, topic_id=TOPIC_ID, partitions=parts)
                    )
            body = _build(
                schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
                responses=tuple(topics), node_endpoints=(),
            )  # fmt: skip
            self.answers.append(encode_response(head.correlation_id, body))
            return self.answers[-1]
        assert head.api_key == API_LIST_OFFSETS
        answered = []
        for topic in asked.topics:
            parts = tuple(
                _build(
                    m.ListOffsetsPartitionResponse,
                    partition_index=p.partition_index,
                    error_code=ErrorCode.none,
                    timestamp=-1,
                    offset=HIGH_WATERMARK[int(p.partition_index)] if p.timestamp == -1 else 0,
                    leader_epoch=-1,
                )
                for p in topic.partitions
            )
            answered.append(m.ListOffsetsTopicResponse(name=topic.name, partitions=parts))
        body = _build(schema, throttle_time=datetime.timedelta(0), topics=tuple(answered))
        return encode_response(head.correlation_id, body)


def _state(mode: ReadMode) -> GatewayState:
    state = GatewayState(mode)
    state.topic_names[TOPIC_ID] = TOPIC
    state.topic_ids[TOPIC] = TOPIC_ID
    return state


def _archive_holding(partition: int | None) -> Archive:
    def read_batches(
        tp: TopicPartition, offset: int, limit: int, topic_id: str | None
    ) -> ArchivedBatches | None:
        if tp.partition != partition:
            return None  # not archived (yet): the broker's
        return ArchivedBatches([memoryview(ARCHIVED_BATCH)], offset + 1, len(ARCHIVED_BATCH))

    return Archive(read_batches, lambda tp: 0 if tp.partition == partition else None, lambda tp, ts: None)


def _partitions(version: int, answer: Answer) -> dict[int, Any]:
    joined = b"".join(answer) if isinstance(answer, list) else bytes(answer)
    corr, body = decode_response(API_FETCH, version, joined)
    assert corr == 77 and body.error_code == ErrorCode.none and body.session_id == 0
    return {int(p.partition_index): p for t in body.responses for p in t.partitions}


@pytest.mark.parametrize("version", [12, 15])
def test_a_partition_the_broker_leaves_out_beside_one_the_archive_answers_is_answered_empty(
    version: int,
) -> None:
    """Partition 0 from the archive, partition 1 asked of a broker that has nothing new for it and
    leaves it out: the answer names both, partition 1 empty, no error, the broker's offsets."""
    broker = OmittingBroker(quiet={1})
    answer = asyncio.run(
        answer_fetch(
            _fetch_request(version, {0: 1105, 1: 1250}, 0),
            _state(ReadMode.ARCHIVED),
            _archive_holding(0),
            broker,
        )
    )
    parts = _partitions(version, answer)
    assert sorted(parts) == [0, 1]
    assert (parts[0].error_code, parts[0].records) == (ErrorCode.none, ARCHIVED_BATCH)
    one = parts[1]
    assert (one.error_code, one.records, one.high_watermark, one.log_start_offset) == (
        ErrorCode.none,
        b"",
        1250,
        0,
    )


@pytest.mark.parametrize(
    "session_epoch", [-1, 0]
)  # sessionless (librdkafka), or asking for a session (kafka-python)
def test_a_brokers_answer_that_leaves_out_a_partition_is_completed(session_epoch: int) -> None:
    """Nothing for the archive: the broker's answer, with the partition it left out answered empty
    and its records for the other as they were."""
    broker = OmittingBroker(quiet={0})
    answer = asyncio.run(
        answer_fetch(
            _fetch_request(12, {0: 1250, 1: 700}, session_epoch),
            _state(ReadMode.ARCHIVED),
            _archive_holding(None),
            broker,
        )
    )
    parts = _partitions(12, answer)
    assert sorted(parts) == [0, 1]
    assert (parts[0].error_code, parts[0].records, parts[0].high_watermark) == (ErrorCode.none, b"", 1250)
    assert (parts[1].error_code, parts[1].records) == (ErrorCode.none, BROKER_RECORDS)


def test_a_brokers_answer_naming_every_partition_passes_as_it_is() -> None:
    broker = OmittingBroker(quiet=set())
    answer = asyncio.run(
        answer_fetch(
            _fetch_request(12, {0: 5, 1: 7}, -1),
            _state(ReadMode.BELOW_LOG_START),
            _archive_holding(None),
            broker,
        )
    )
    assert answer is broker.answers[-1]  # not decoded, not copied
