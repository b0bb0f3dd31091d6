"""Fetch (v16+) and Produce (v10+) answers can name brokers (node endpoints, KIP-951: where a
partition's leader moved). Through the gateway, a client is only ever told the gateway's address: the
endpoints are rewritten as Metadata's brokers are, and an answer without any passes byte for byte."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from processor.gateway.address_rewrite import PortMap
from processor.gateway.client_connection import ClientConnection
from processor.gateway.protocol import (
    decode_response,
    encode_request,
    encode_response,
    framed,
    request_head,
    request_schema,
    response_schema,
)
from processor.gateway.state import Archive, GatewayState, ReadMode
from processor.gateway.upstream import Upstream, read_frame
from processor.kafka.api_keys import API_FETCH, API_METADATA, API_PRODUCE

TOPIC_ID = uuid.UUID(int=42)
PORTS = PortMap("gateway.example", 9000, 0, 9)


def _build(cls: Any, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _module(schema: Any) -> Any:
    return __import__(schema.__module__, fromlist=["x"])


def _fetch_answer(version: int, endpoints: bool) -> Any:
    schema = response_schema(API_FETCH, version)
    m = _module(schema)
    part = _build(
        m.PartitionData, partition_index=0, error_code=ErrorCode.not_leader_or_follower, high_watermark=-1,
        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
        records=None, current_leader=m.LeaderIdAndEpoch(leader_id=2, leader_epoch=5),
    )  # fmt: skip
    topic = m.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=(part,))
    nodes = (m.NodeEndpoint(node_id=2, host="b2.internal", port=9092, rack=None),) if endpoints else ()
    return _build(
        schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=(topic,), node_endpoints=nodes,
    )  # fmt: skip


def _produce_answer(version: int) -> Any:
    schema = response_schema(API_PRODUCE, version)
    m = _module(schema)
    part = _build(
        m.PartitionProduceResponse, index=0, error_code=ErrorCode.not_leader_or_follower, base_offset=-1,
        log_append_time=None, log_start_offset=-1, record_errors=(), error_message=None,
        current_leader=m.LeaderIdAndEpoch(leader_id=2, leader_epoch=5) if version >= 10 else None,
    )  # fmt: skip
    topic = _build(m.TopicProduceResponse, name="orders", partition_responses=(part,))
    endpoints = (
        (m.NodeEndpoint(node_id=2, host="b2.internal", port=9092, rack=None),) if version >= 10 else ()
    )
    return _build(schema, responses=(topic,), throttle_time=datetime.timedelta(0), node_endpoints=endpoints)


def _metadata_answer() -> Any:
    schema = response_schema(3, 12)
    m = _module(schema)
    topic = _build(
        m.MetadataResponseTopic, error_code=ErrorCode.none, name="orders", topic_id=TOPIC_ID,
        is_internal=False, partitions=(), topic_authorized_operations=-2147483648,
    )  # fmt: skip
    return _build(
        schema, throttle_time=datetime.timedelta(0), brokers=(), cluster_id="c", controller_id=1,
        topics=(topic,),
    )  # fmt: skip


def _request(api_key: int, version: int) -> bytes:
    schema = request_schema(api_key, version)
    m = _module(schema)
    if api_key == API_FETCH:
        part = _build(
            m.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=7, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20, replica_directory_id=uuid.UUID(int=0),
        )  # fmt: skip
        body = _build(
            schema, max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, rack_id="", replica_id=-1, cluster_id=None,
            replica_state=m.ReplicaState(replica_id=-1, replica_epoch=-1),
            topics=(m.FetchTopic(topic_id=TOPIC_ID, partitions=(part,)),), forgotten_topics_data=(),
        )  # fmt: skip
    else:
        partition = m.PartitionProduceData(index=0, records=b"x" * 70)
        body = _build(
            schema, transactional_id=None, acks=-1, timeout=datetime.timedelta(seconds=30),
            topic_data=(_build(m.TopicProduceData, name="orders", partition_data=(partition,)),),
        )  # fmt: skip
    head = schema.__header_schema__(
        request_api_key=api_key, request_api_version=version, correlation_id=5, client_id="c"
    )
    return encode_request(head, body)


def _through_gateway(request: bytes, broker_answer: Any) -> tuple[bytes, bytes, dict[int, tuple[str, int]]]:
    """(what the broker answered, what the client got, brokers the gateway learned)."""
    sent: list[bytes] = []
    learned: dict[int, tuple[str, int]] = {}

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (frame := await read_frame(reader)) is not None:
            head = request_head(frame)
            answer = _metadata_answer() if head.api_key == API_METADATA else broker_answer
            sent.append(encode_response(head.correlation_id, answer))
            writer.write(framed(sent[-1]))
            await writer.drain()
        writer.close()

    async def main() -> bytes:
        server = await asyncio.start_server(broker, "127.0.0.1", 0)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            upstream = await Upstream.open("127.0.0.1", server.sockets[0].getsockname()[1], None, 5)

            async def ready() -> None:
                return None

            await ClientConnection(
                (reader, writer),
                upstream,
                GatewayState(ReadMode.BELOW_LOG_START),
                Archive(lambda *a: None, lambda tp: None, lambda tp, ts: None),
                PORTS,
                lambda node, host, port: learned.__setitem__(node, (host, port)),
                ready,
            ).run()

        gateway = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.sockets[0].getsockname()[1])
        writer.write(framed(request))
        got = await asyncio.wait_for(read_frame(reader), 10)
        writer.close()
        gateway.close()
        server.close()
        assert got is not None
        return got

    got = asyncio.run(main())
    return sent[-1], got, learned


def test_a_fetch_answers_node_endpoints_are_the_gateways() -> None:
    broker, got, learned = _through_gateway(_request(API_FETCH, 16), _fetch_answer(16, endpoints=True))
    _corr, answer = decode_response(API_FETCH, 16, got)
    assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [(2, "gateway.example", 9003)]
    assert learned == {2: ("b2.internal", 9092)}
    _corr, theirs = decode_response(API_FETCH, 16, broker)
    assert answer.responses == theirs.responses  # nothing else changed


def test_a_fetch_answer_without_node_endpoints_passes_byte_for_byte() -> None:
    broker, got, learned = _through_gateway(_request(API_FETCH, 17), _fetch_answer(17, endpoints=False))
    assert got == broker and learned == {}


def test_a_produce_answers_node_endpoints_are_the_gateways() -> None:
    broker, got, learned = _through_gateway(_request(API_PRODUCE, 11), _produce_answer(11))
    _corr, answer = decode_response(API_PRODUCE, 11, got)
    assert [(n.node_id, n.host, n.port) for n in answer.node_endpoints] == [(2, "gateway.example", 9003)]
    assert learned == {2: ("b2.internal", 9092)}
    assert answer.responses == decode_response(API_PRODUCE, 11, broker)[1].responses


def test_a_produce_answer_before_version_10_passes_byte_for_byte() -> None:
    broker, got, _learned = _through_gateway(_request(API_PRODUCE, 9), _produce_answer(9))
    assert got == broker
