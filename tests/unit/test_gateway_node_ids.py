"""A broker whose node id is outside PROCESSOR_GATEWAY_NODE_IDS never reaches a client: the gateway
refuses to start while one is in the cluster (one error naming the setting and the range to set),
and one that appears later (a scripted broker answering with node id 111, Tansu's, beside the
default 0-63) is left out of every answer that names brokers, so no client is given its address and
bypasses the gateway."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import logging
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from processor.errors import ConfigError
from processor.gateway.address_rewrite import PortMap
from processor.gateway.client_connection import ClientConnection
from processor.gateway.listeners import Gateway, check_node_ids
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
from processor.kafka.api_keys import API_DESCRIBE_CLUSTER, API_FETCH, API_FIND_COORDINATOR, API_METADATA

TOPIC_ID = uuid.UUID(int=7)
DEFAULT_PORTS = PortMap("gateway.example", 19092)  # node ids 0-63, the default
HIDDEN_HOST = "b111.internal"  # the broker's own address: must never reach a client
NO_ARCHIVE = Archive(lambda *a: None, lambda tp: None, lambda tp, ts: None)


def _build(cls: Any, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _module(schema: Any) -> Any:
    return __import__(schema.__module__, fromlist=["x"])


def _answer(api_key: int, version: int) -> Any:
    """What the broker with node id 111 says of itself, in the answers that name brokers."""
    schema = response_schema(api_key, version)
    m = _module(schema)
    if api_key == API_METADATA:
        part = _build(
            m.MetadataResponsePartition, error_code=ErrorCode.none, partition_index=0, leader_id=111,
            leader_epoch=0, replica_nodes=(111,), isr_nodes=(111,), offline_replicas=(),
        )  # fmt: skip
        topic = _build(
            m.MetadataResponseTopic, error_code=ErrorCode.none, name="orders", topic_id=TOPIC_ID,
            is_internal=False, partitions=(part,), topic_authorized_operations=-2147483648,
        )  # fmt: skip
        broker = m.MetadataResponseBroker(node_id=111, host=HIDDEN_HOST, port=9092, rack=None)
        return _build(
            schema, throttle_time=datetime.timedelta(0), brokers=(broker,), cluster_id="c",
            controller_id=111, topics=(topic,),
        )  # fmt: skip
    if api_key == API_FIND_COORDINATOR and version >= 4:
        coordinator = m.Coordinator(
            key="group-1", node_id=111, host=HIDDEN_HOST, port=9092, error_code=ErrorCode.none,
            error_message=None,
        )  # fmt: skip
        return schema(throttle_time=datetime.timedelta(0), coordinators=(coordinator,))
    if api_key == API_FIND_COORDINATOR:
        return _build(
            schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None,
            node_id=111, host=HIDDEN_HOST, port=9092,
        )  # fmt: skip
    if api_key == API_DESCRIBE_CLUSTER:
        broker = m.DescribeClusterBroker(broker_id=111, host=HIDDEN_HOST, port=9092, rack=None)
        return _build(
            schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, error_message=None,
            endpoint_type=1, cluster_id="c", controller_id=111, brokers=(broker,),
            cluster_authorized_operations=-2147483648,
        )  # fmt: skip
    part = _build(
        m.PartitionData, partition_index=0, error_code=ErrorCode.not_leader_or_follower, high_watermark=-1,
        last_stable_offset=-1, log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
        records=None, current_leader=m.LeaderIdAndEpoch(leader_id=111, leader_epoch=5),
    )  # fmt: skip
    return _build(
        schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
        responses=(m.FetchableTopicResponse(topic_id=TOPIC_ID, partitions=(part,)),),
        node_endpoints=(m.NodeEndpoint(node_id=111, host=HIDDEN_HOST, port=9092, rack=None),),
    )  # fmt: skip


def _request(api_key: int, version: int, correlation_id: int) -> bytes:
    schema = request_schema(api_key, version)
    m = _module(schema)
    if api_key == API_METADATA:
        body = _build(
            schema, topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
    elif api_key == API_FIND_COORDINATOR:
        body = _build(schema, key="group-1", key_type=0, coordinator_keys=("group-1",))
    elif api_key == API_DESCRIBE_CLUSTER:
        body = _build(schema, include_cluster_authorized_operations=False, endpoint_type=1)
    else:
        part = _build(
            m.FetchPartition, partition=0, current_leader_epoch=-1, fetch_offset=7, last_fetched_epoch=-1,
            log_start_offset=-1, partition_max_bytes=1 << 20,
        )  # fmt: skip
        body = _build(
            schema, max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=1 << 20,
            isolation_level=0, session_id=0, session_epoch=-1, rack_id="", replica_id=-1, cluster_id=None,
            topics=(m.FetchTopic(topic_id=TOPIC_ID, partitions=(part,)),), forgotten_topics_data=(),
        )  # fmt: skip
    head = schema.__header_schema__(
        request_api_key=api_key, request_api_version=version, correlation_id=correlation_id, client_id="c"
    )
    return encode_request(head, body)


ASKED = [(API_METADATA, 12), (API_FIND_COORDINATOR, 3), (API_FIND_COORDINATOR, 5), (API_DESCRIBE_CLUSTER, 1),
         (API_FETCH, 16)]  # fmt: skip


def _ask_through_gateway(ports: PortMap) -> tuple[list[bytes], dict[int, tuple[str, int]]]:
    """Each of ASKED through a client connection of the gateway, in front of a scripted broker with node
    id 111: (what the client got, the brokers the gateway was told of)."""
    learned: dict[int, tuple[str, int]] = {}

    async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (frame := await read_frame(reader)) is not None:
            head = request_head(frame)
            writer.write(
                framed(encode_response(head.correlation_id, _answer(head.api_key, head.api_version)))
            )
            await writer.drain()
        writer.close()

    async def main() -> list[bytes]:
        server = await asyncio.start_server(broker, "127.0.0.1", 0)

        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            upstream = await Upstream.open("127.0.0.1", server.sockets[0].getsockname()[1], None, 5)

            async def ready() -> None:
                return None

            await ClientConnection(
                (reader, writer), upstream, GatewayState(ReadMode.ARCHIVED), NO_ARCHIVE, ports,
                lambda node, host, port: learned.__setitem__(node, (host, port)), ready,
            ).run()  # fmt: skip

        gateway = await asyncio.start_server(serve, "127.0.0.1", 0)
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.sockets[0].getsockname()[1])
        got = []
        for corr, (api_key, version) in enumerate(ASKED):
            writer.write(framed(_request(api_key, version, corr)))
            answer = await asyncio.wait_for(read_frame(reader), 10)
            assert answer is not None
            got.append(answer)
        writer.close()
        gateway.close()
        server.close()
        return got

    return asyncio.run(main()), learned


def test_a_broker_outside_the_node_ids_never_reaches_a_client() -> None:
    got, learned = _ask_through_gateway(DEFAULT_PORTS)
    assert learned == {111: (HIDDEN_HOST, 9092)}  # the gateway knows of it (and logs it)
    for answer in got:
        assert HIDDEN_HOST.encode() not in answer
    answers = {
        key_version: decode_response(*key_version, a)[1] for key_version, a in zip(ASKED, got, strict=True)
    }
    metadata = answers[(API_METADATA, 12)]
    assert metadata.brokers == ()
    assert (
        metadata.topics[0].partitions[0].leader_id == 111
    )  # a leader the client cannot reach: it asks again
    old = answers[(API_FIND_COORDINATOR, 3)]
    assert (old.error_code, old.node_id, old.host, old.port) == (
        ErrorCode.coordinator_not_available,
        -1,
        "",
        -1,
    )
    assert "PROCESSOR_GATEWAY_NODE_IDS" in old.error_message
    (new,) = answers[(API_FIND_COORDINATOR, 5)].coordinators
    assert (new.key, new.error_code, new.node_id, new.host) == (
        "group-1",
        ErrorCode.coordinator_not_available,
        -1,
        "",
    )
    assert answers[(API_DESCRIBE_CLUSTER, 1)].brokers == ()
    assert answers[(API_FETCH, 16)].node_endpoints == ()


def test_a_broker_inside_the_node_ids_is_given_the_gateways_address() -> None:
    """The same answers with 111 inside the range: every one names the gateway's port for it."""
    ports = PortMap("gateway.example", 19092, 100, 127)
    got, _learned = _ask_through_gateway(ports)
    answers = {
        key_version: decode_response(*key_version, a)[1] for key_version, a in zip(ASKED, got, strict=True)
    }
    port = 19092 + 1 + 111 - 100
    assert [(b.node_id, b.host, b.port) for b in answers[(API_METADATA, 12)].brokers] == [
        (111, "gateway.example", port)
    ]
    old = answers[(API_FIND_COORDINATOR, 3)]
    assert (old.error_code, old.host, old.port) == (ErrorCode.none, "gateway.example", port)
    assert [(c.host, c.port) for c in answers[(API_FIND_COORDINATOR, 5)].coordinators] == [
        ("gateway.example", port)
    ]
    assert [(b.host, b.port) for b in answers[(API_DESCRIBE_CLUSTER, 1)].brokers] == [
        ("gateway.example", port)
    ]
    assert [(n.host, n.port) for n in answers[(API_FETCH, 16)].node_endpoints] == [("gateway.example", port)]


def test_the_gateway_refuses_to_start_while_a_broker_is_outside_the_node_ids() -> None:
    with pytest.raises(ConfigError) as refused:
        check_node_ids(DEFAULT_PORTS, {111: ("localhost", 9092)})
    message = str(refused.value)
    assert message.startswith(
        "PROCESSOR_GATEWAY_NODE_IDS=0-63 does not hold the node id of broker 111 (localhost:9092)"
    )
    assert "set PROCESSOR_GATEWAY_NODE_IDS=111-111" in message
    with pytest.raises(ConfigError, match=r"broker 111 \(b:1\).*PROCESSOR_GATEWAY_NODE_IDS=3-111"):
        check_node_ids(DEFAULT_PORTS, {3: ("a", 1), 111: ("b", 1)})
    check_node_ids(DEFAULT_PORTS, {0: ("a", 1), 63: ("b", 1)})  # all inside: it starts


def test_a_broker_that_appears_outside_the_node_ids_is_logged_once_and_given_no_port(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def main() -> Gateway:
        gateway = Gateway(DEFAULT_PORTS, "127.0.0.1", [], GatewayState(ReadMode.ARCHIVED), NO_ARCHIVE)
        gateway.learn(111, HIDDEN_HOST, 9092)
        await gateway.open_node_listeners()
        await gateway.open_node_listeners()  # told again by the next Metadata answer
        return gateway

    with caplog.at_level(logging.INFO, logger="processor.gateway"):
        gateway = asyncio.run(main())
    assert gateway.servers == {}
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "broker 111" in errors[0] and "PROCESSOR_GATEWAY_NODE_IDS=0-63" in errors[0]
