"""The gateway's pure parts: frames, address rewriting, API versions, and the Fetch answer of a
partition below the broker's log start (a broker that truncated; Tansu never does, so the broker's
side is scripted here from kio's own message classes)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from processor.gateway.address_rewrite import PortMap, cap_api_versions, rewrite_addresses
from processor.gateway.fetch_answers import answer_fetch
from processor.gateway.list_offsets import answer_list_offsets
from processor.gateway.protocol import (
    Answer,
    ProtocolError,
    RecordsRef,
    answer_size,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    encode_response_chunks,
    request_head,
    request_schema,
    response_schema,
)
from processor.gateway.state import Archive, GatewayState, ReadMode
from processor.gateway.state import build as _build
from processor.kafka.api_keys import API_FETCH, API_LIST_OFFSETS
from processor.kafka.partition import TopicPartition
from processor.reader.remote_reader import ArchivedBatches

DECODED = [(1, 4), (1, 12), (1, 15), (2, 1), (2, 7), (3, 1), (3, 12), (10, 4), (18, 3), (60, 0)]


def _module(schema: type) -> Any:
    return __import__(schema.__module__, fromlist=["x"])


def _fetch_request(version: int, offset: int) -> bytes:
    schema = request_schema(API_FETCH, version)
    m = _module(schema)
    part = m.FetchPartition(
        partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
        log_start_offset=-1, partition_max_bytes=1 << 20,
    )  # fmt: skip
    body = schema(
        max_wait=datetime.timedelta(milliseconds=10), min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1, topics=(m.FetchTopic(topic="orders", partitions=(part,)),),
        forgotten_topics_data=(), rack_id="", replica_id=-1,
    )  # fmt: skip
    header = schema.__header_schema__(
        request_api_key=API_FETCH, request_api_version=version, correlation_id=42, client_id="c"
    )
    return encode_request(header, body)


@settings(max_examples=300, deadline=None)
@given(key_version=st.sampled_from(DECODED), tail=st.binary(max_size=200))
def test_random_frames_raise_only_protocol_errors(key_version: tuple[int, int], tail: bytes) -> None:
    key, version = key_version
    frame = key.to_bytes(2, "big") + version.to_bytes(2, "big") + (7).to_bytes(4, "big") + tail
    with contextlib.suppress(ProtocolError):  # any other exception fails the test
        decode_request(frame)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_mutated_fetch_requests_raise_only_protocol_errors(data: st.DataObject) -> None:
    frame = bytearray(_fetch_request(12, 5))
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(8, len(frame) - 1))
        frame[at] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(8, len(frame)))
    with contextlib.suppress(ProtocolError):  # any other exception fails the test
        decode_request(bytes(frame[:cut]))


def test_a_request_head_is_read_without_its_schema_and_a_short_one_is_refused() -> None:
    head = request_head(_fetch_request(12, 5))
    assert (head.api_key, head.api_version, head.correlation_id) == (1, 12, 42)
    with pytest.raises(ProtocolError):
        request_head(b"\x00\x01")


def test_metadata_brokers_are_the_gateways_ports_and_out_of_range_nodes_are_left_out() -> None:
    schema = response_schema(3, 12)
    m = _module(schema)
    brokers = tuple(
        m.MetadataResponseBroker(node_id=n, host=f"b{n}.internal", port=9092, rack=None) for n in (1, 2, 500)
    )
    body = schema(
        throttle_time=datetime.timedelta(0), brokers=brokers, cluster_id="c", controller_id=1, topics=()
    )
    learned: dict[int, tuple[str, int]] = {}
    out = rewrite_addresses(
        3, body, PortMap("gw.example", 19092, 0, 63), lambda n, h, p: learned.update({n: (h, p)})
    )
    assert [(b.node_id, b.host, b.port) for b in out.brokers] == [
        (1, "gw.example", 19094),
        (2, "gw.example", 19095),
    ]
    # told of every broker (it logs the one it gives no port), though no client is told of 500
    assert learned == {1: ("b1.internal", 9092), 2: ("b2.internal", 9092), 500: ("b500.internal", 9092)}
    corr, again = decode_response(3, 12, encode_response(9, out))
    assert corr == 9 and again == out


def test_api_versions_are_capped_to_what_the_gateway_decodes_and_share_fetch_is_hidden() -> None:
    schema = response_schema(18, 3)
    m = _module(schema)
    keys = tuple(
        m.ApiVersion(api_key=k, min_version=0, max_version=v)
        for k, v in ((0, 12), (1, 18), (2, 10), (8, 9), (78, 1))
    )
    body = schema(
        error_code=ErrorCode.none, api_keys=keys, throttle_time=datetime.timedelta(0),
        supported_features=(), finalized_features_epoch=-1, finalized_features=(), zk_migration_ready=False,
    )  # fmt: skip
    capped = {
        int(k.api_key): (int(k.min_version), int(k.max_version)) for k in cap_api_versions(body).api_keys
    }
    assert capped == {0: (0, 11), 1: (4, 17), 2: (1, 9), 8: (0, 9)}


BROKER_BATCH = bytes(77)  # what the broker answers at 100 and above


class TruncatedBroker:
    """A broker whose log starts at 100 (it truncated; the archive holds 0..149), its high watermark
    150: Fetch below 100 answers OFFSET_OUT_OF_RANGE, ListOffsets EARLIEST 100 and LATEST 150."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.sent: list[int] = []

    async def __call__(self, request: bytes) -> bytes:
        head = request_head(request)
        self.sent.append(head.api_key)
        if head.api_key == API_FETCH:
            schema = response_schema(API_FETCH, self.version)
            m = _module(schema)
            _header, asked_fetch = decode_request(request)
            held = int(asked_fetch.topics[0].partitions[0].fetch_offset) >= 100
            part = m.PartitionData(
                partition_index=0,
                error_code=ErrorCode.none if held else ErrorCode.offset_out_of_range,
                high_watermark=150 if held else -1,
                aborted_transactions=None,
                records=BROKER_BATCH if held else None,
            )
            topic = m.FetchableTopicResponse(topic="orders", partitions=(part,))
            body = schema(
                throttle_time=datetime.timedelta(0),
                error_code=ErrorCode.none,
                session_id=0,
                responses=(topic,),
            )
            return encode_response(head.correlation_id, body)
        _header, asked = decode_request(request)
        schema = response_schema(API_LIST_OFFSETS, head.api_version)
        m = _module(schema)
        timestamp = int(asked.topics[0].partitions[0].timestamp)
        offset = {-2: 100, -1: 150}.get(timestamp, 120)
        part = _build_any(
            m.ListOffsetsPartitionResponse,
            partition_index=0, error_code=ErrorCode.none, timestamp=-1, offset=offset, leader_epoch=-1,
        )  # fmt: skip
        body = _build_any(
            schema,
            throttle_time=datetime.timedelta(0),
            topics=(m.ListOffsetsTopicResponse(name="orders", partitions=(part,)),),
        )
        return encode_response(head.correlation_id, body)


def _build_any(cls: Any, **values: Any) -> Any:
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


BATCH = bytes(61)  # opaque to the gateway


def test_below_the_brokers_log_start_the_fetch_is_answered_from_the_archive() -> None:
    """A fetch at 5 gets the broker's OFFSET_OUT_OF_RANGE; the gateway learns the broker's log
    start and answers from the archive, with the broker's high watermark and the archive's log
    start; the next fetch below 100 goes to the archive at once."""
    version = 12
    broker = TruncatedBroker(version)

    def read_batches(
        tp: TopicPartition, offset: int, max_bytes: int, topic_id: str | None
    ) -> ArchivedBatches:
        assert tp == TopicPartition("orders", 0) and offset == 5
        return ArchivedBatches([memoryview(BATCH)], 6, len(BATCH))

    archive = Archive(read_batches, lambda tp: 0, lambda tp, ts: None)
    state = GatewayState(ReadMode.BELOW_LOG_START)
    answer = asyncio.run(answer_fetch(_fetch_request(version, 5), state, archive, broker))
    corr, body = decode_response(API_FETCH, version, answer)
    part = body.responses[0].partitions[0]
    assert corr == 42 and part.error_code == ErrorCode.none
    assert (part.records, part.high_watermark, part.log_start_offset) == (BATCH, 150, 0)
    assert state.broker_log_start[TopicPartition("orders", 0)] == 100
    assert broker.sent[0] == API_FETCH and API_LIST_OFFSETS in broker.sent
    broker.sent.clear()
    asyncio.run(answer_fetch(_fetch_request(version, 5), state, archive, broker))
    assert API_FETCH not in broker.sent


def _unreachable(tp: TopicPartition, offset: int, max_bytes: int, topic_id: str | None) -> ArchivedBatches:
    raise OSError("S3 unreachable")


def test_an_archive_that_fails_below_the_log_start_answers_a_retriable_error_not_out_of_range() -> None:
    """OFFSET_OUT_OF_RANGE would make the client reset (auto.offset.reset) and skip the archived
    history; a storage failure is KAFKA_STORAGE_ERROR, which clients retry."""
    version = 12
    broker = TruncatedBroker(version)
    state = GatewayState(ReadMode.BELOW_LOG_START)
    state.broker_log_start[TopicPartition("orders", 0)] = 100
    archive = Archive(_unreachable, lambda tp: 0, lambda tp, ts: None)
    answer = asyncio.run(answer_fetch(_fetch_request(version, 5), state, archive, broker))
    _corr, body = decode_response(API_FETCH, version, answer)
    part = body.responses[0].partitions[0]
    assert part.error_code == ErrorCode.kafka_storage_error and part.records is None


@pytest.mark.parametrize(
    ("archive_start", "error"), [(0, "kafka_storage_error"), (50, "offset_out_of_range")]
)
def test_with_archived_reads_an_archived_offset_the_archive_fails_is_retried_never_out_of_range(
    archive_start: int, error: str
) -> None:
    """With ``archived`` reads a partition whose archive read fails goes to the broker; below the
    broker's log start the broker answers OFFSET_OUT_OF_RANGE, which would make the client reset
    past the archive: when the archive should hold the offset, the client gets KAFKA_STORAGE_ERROR
    (retried). Below the archive's start too, out of range is the truth and stays."""
    version = 12
    broker = TruncatedBroker(version)
    state = GatewayState(ReadMode.ARCHIVED)
    archive = Archive(_unreachable, lambda tp: archive_start, lambda tp, ts: None)
    answer = asyncio.run(answer_fetch(_fetch_request(version, 5), state, archive, broker))
    part = decode_response(API_FETCH, version, _joined(answer))[1].responses[0].partitions[0]
    assert part.error_code == getattr(ErrorCode, error) and part.records is None
    assert state.broker_log_start[TopicPartition("orders", 0)] == 100


def _joined(answer: Answer) -> bytes:
    return b"".join(answer) if isinstance(answer, list) else bytes(answer)


def test_list_offsets_earliest_and_by_time_answer_from_the_archive_below_the_broker() -> None:
    version = 7
    broker = TruncatedBroker(version)
    schema = request_schema(API_LIST_OFFSETS, version)
    m = _module(schema)
    parts = tuple(
        m.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts) for ts in (-2, 1_000)
    )
    state = GatewayState(ReadMode.BELOW_LOG_START)
    archive = Archive(lambda *a: None, lambda tp: 0, lambda tp, ts: (40, 1_005))
    for part in parts:
        body = schema(
            replica_id=-1, isolation_level=0, topics=(m.ListOffsetsTopic(name="orders", partitions=(part,)),)
        )
        head = schema.__header_schema__(
            request_api_key=API_LIST_OFFSETS, request_api_version=version, correlation_id=3, client_id="c"
        )
        answer = asyncio.run(answer_list_offsets(encode_request(head, body), state, archive, broker))
        corr, got = decode_response(API_LIST_OFFSETS, version, answer)
        found = got.topics[0].partitions[0]
        assert corr == 3
        assert (int(found.offset), int(found.timestamp)) == ((0, -1) if part.timestamp == -2 else (40, 1_005))


def test_the_gateways_tls_settings_are_checked_before_anything_listens(tmp_path: Path) -> None:
    from processor.config import load_settings
    from processor.errors import ConfigError
    from processor.wiring.gateway import client_tls, gateway_ports

    base = {"PROCESSOR_GATEWAY_HOST": "127.0.0.1"}
    assert client_tls(load_settings(base)) is None
    with pytest.raises(ConfigError, match="go together"):
        client_tls(load_settings({**base, "PROCESSOR_GATEWAY_TLS_CERTFILE": str(tmp_path / "c.pem")}))
    with pytest.raises(ConfigError, match="cannot load"):
        client_tls(
            load_settings(
                {
                    **base,
                    "PROCESSOR_GATEWAY_TLS_CERTFILE": str(tmp_path / "missing.pem"),
                    "PROCESSOR_GATEWAY_TLS_KEYFILE": str(tmp_path / "missing-key.pem"),
                }
            )
        )
    with pytest.raises(ConfigError, match="PROCESSOR_GATEWAY_ADVERTISED_HOST"):
        gateway_ports(load_settings({"PROCESSOR_GATEWAY_HOST": "0.0.0.0"}))
    with pytest.raises(ConfigError, match="PROCESSOR_GATEWAY_NODE_IDS"):
        gateway_ports(load_settings({**base, "PROCESSOR_GATEWAY_NODE_IDS": "5-2000"}))
    ports = gateway_ports(load_settings({**base, "PROCESSOR_GATEWAY_NODE_IDS": "100-127"}))
    assert (ports.node_port(99), ports.node_port(100), ports.node_port(127)) == (None, 19093, 19120)


class ScriptedBroker:
    """A broker answering every Fetch of partition orders-0 with one error code and no records."""

    def __init__(self, version: int, error: ErrorCode) -> None:
        self.version, self.error = version, error
        self.fetches: list[int] = []  # the min_bytes of each Fetch it got

    async def __call__(self, request: bytes) -> bytes:
        head = request_head(request)
        _header, asked = decode_request(request)
        if head.api_key == API_FETCH:
            self.fetches.append(int(asked.min_bytes))
            schema = response_schema(API_FETCH, self.version)
            m = _module(schema)
            part = m.PartitionData(
                partition_index=0, error_code=self.error, high_watermark=10,
                aborted_transactions=None, records=None,
            )  # fmt: skip
            body = schema(
                throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
                responses=(m.FetchableTopicResponse(topic="orders", partitions=(part,)),),
            )  # fmt: skip
            return encode_response(head.correlation_id, body)
        return await TruncatedBroker(self.version)(request)


def _archive_with_one_batch() -> Archive:
    return Archive(
        lambda tp, o, n, t: ArchivedBatches([memoryview(BATCH)], o + 1, len(BATCH)),
        lambda tp: 0,
        lambda tp, ts: None,
    )


def test_with_sasl_passed_through_a_client_the_broker_refuses_gets_nothing_from_the_archive() -> None:
    """The archive is read with the gateway's credentials; a client's own may not allow the topic.
    The broker is asked with the client's identity first, and its refusal is what the client gets."""
    broker = ScriptedBroker(12, ErrorCode.topic_authorization_failed)
    state = GatewayState(ReadMode.ARCHIVED, check_access=True)
    answer = asyncio.run(
        answer_fetch(_fetch_request(12, 5), state, _archive_with_one_batch(), broker, None, {})
    )
    _corr, body = decode_response(API_FETCH, 12, answer)
    part = body.responses[0].partitions[0]
    assert part.error_code == ErrorCode.topic_authorization_failed and part.records is None


def test_an_allowed_client_is_asked_about_once_per_connection() -> None:
    broker = ScriptedBroker(12, ErrorCode.none)
    state = GatewayState(ReadMode.ARCHIVED, check_access=True)
    access: dict[TopicPartition, float] = {}
    for _ in range(3):
        answer = asyncio.run(
            answer_fetch(_fetch_request(12, 5), state, _archive_with_one_batch(), broker, None, access)
        )
        _corr, body = decode_response(API_FETCH, 12, answer)
        assert body.responses[0].partitions[0].records == BATCH
    assert broker.fetches == [0]  # one probe (min_bytes 0: no wait), then the connection knows


def test_below_the_log_start_an_offset_the_archive_should_hold_but_does_not_yet_is_retried() -> None:
    """The archive starts at 0 but its follower has not applied offset 5 yet: OFFSET_OUT_OF_RANGE
    would make the client reset past the archive; it gets a retriable KAFKA_STORAGE_ERROR instead.
    Below the archive's own start, the broker's OFFSET_OUT_OF_RANGE stands (nothing holds it)."""
    version = 12
    state = GatewayState(ReadMode.BELOW_LOG_START)
    state.broker_log_start[TopicPartition("orders", 0)] = 100
    lagging = Archive(lambda *a: None, lambda tp: 0, lambda tp, ts: None)
    answer = asyncio.run(answer_fetch(_fetch_request(version, 5), state, lagging, TruncatedBroker(version)))
    part = decode_response(API_FETCH, version, answer)[1].responses[0].partitions[0]
    assert part.error_code == ErrorCode.kafka_storage_error
    deleted = Archive(lambda *a: None, lambda tp: 50, lambda tp, ts: None)  # retention removed 0..49
    answer = asyncio.run(answer_fetch(_fetch_request(version, 5), state, deleted, TruncatedBroker(version)))
    part = decode_response(API_FETCH, version, answer)[1].responses[0].partitions[0]
    assert part.error_code == ErrorCode.offset_out_of_range


@settings(max_examples=60, deadline=None)
@given(
    version=st.integers(3, 11),
    acks=st.sampled_from([-1, 0, 1]),
    transactional_id=st.one_of(st.none(), st.text(max_size=300)),
)
def test_produce_acks_are_read_without_decoding_the_records(
    version: int, acks: int, transactional_id: str | None
) -> None:
    """The gateway reads a Produce request's acks from its first bytes (acks=0 gets no answer);
    the same value kio's full decode gives."""
    from processor.gateway.protocol import produce_acks

    schema = request_schema(0, version)
    m = _module(schema)
    partition = m.PartitionProduceData(index=0, records=b"x" * 70)
    body = _build_any(
        schema, transactional_id=transactional_id, acks=acks, timeout=datetime.timedelta(seconds=30),
        topic_data=(m.TopicProduceData(name="orders", partition_data=(partition,)),),
    )  # fmt: skip
    head = schema.__header_schema__(
        request_api_key=0, request_api_version=version, correlation_id=1, client_id="c"
    )
    frame = encode_request(head, body)
    assert produce_acks(frame) == int(decode_request(frame)[1].acks) == acks
    assert produce_acks(frame[:10]) is None


def test_the_versions_the_gateway_offers_come_from_kios_index_and_warm_up_loads_them() -> None:
    from processor.gateway.protocol import GATEWAY_MAX_VERSIONS, schema_versions, warm_up

    assert schema_versions(1, 15) == (4, 15)  # Fetch: kio has v4 and up
    assert schema_versions(1, 12) == (4, 12)  # capped
    assert schema_versions(9999, 3) is None  # an API kio does not know
    loaded = warm_up()
    ranges = [schema_versions(k, top) for k, top in GATEWAY_MAX_VERSIONS.items()]
    assert loaded == 2 * sum(high - low + 1 for low, high in filter(None, ranges))


@settings(max_examples=50, deadline=None)
@given(
    version=st.sampled_from([4, 11, 12, 13, 15]),
    batches=st.lists(st.lists(st.binary(min_size=1, max_size=300), max_size=4), min_size=1, max_size=3),
)
def test_an_answer_encoded_as_chunks_is_byte_for_byte_the_encoded_answer(
    version: int, batches: list[list[bytes]]
) -> None:
    """The archive's batches are written by reference (RecordsRef), never joined: the bytes on the
    wire are exactly what kio encodes with the records as one bytes value."""
    schema = response_schema(API_FETCH, version)
    m = _module(schema)

    def answer(records: Any) -> Any:
        parts = tuple(
            _build(
                m.PartitionData, partition_index=i, error_code=ErrorCode.none, high_watermark=9,
                last_stable_offset=9, log_start_offset=0, aborted_transactions=None,
                preferred_read_replica=-1, records=records(pieces),
            )
            for i, pieces in enumerate(batches)
        )  # fmt: skip
        key = {"topic": "orders"} if version < 13 else {"topic_id": uuid.UUID(int=7)}
        topics = (_build(m.FetchableTopicResponse, **key, partitions=parts),)
        return _build(
            schema, throttle_time=datetime.timedelta(0), error_code=ErrorCode.none, session_id=0,
            responses=topics,
        )  # fmt: skip

    chunks = encode_response_chunks(3, answer(lambda p: RecordsRef([memoryview(b) for b in p])))
    assert b"".join(chunks) == encode_response(3, answer(lambda p: b"".join(p)))
    assert answer_size(chunks) == len(b"".join(chunks))


@pytest.mark.parametrize("mode", list(ReadMode))
def test_bytes_served_are_counted_by_topic_and_source(mode: ReadMode) -> None:
    """The archive's part and the broker's part of Fetch answers, by topic, in either mode (the
    broker's answer passed on as it is is decoded to count it)."""
    version = 12
    counted: list[tuple[str, str, int, int]] = []
    state = GatewayState(mode)
    state.served = lambda topic, source, records, size: counted.append((topic, source, records, size))

    def read_batches(
        tp: TopicPartition, offset: int, max_bytes: int, topic_id: str | None
    ) -> ArchivedBatches | None:
        return ArchivedBatches([memoryview(BATCH)], offset + 1, len(BATCH)) if offset < 100 else None

    archive = Archive(read_batches, lambda tp: 0, lambda tp, ts: None)
    for offset in (5, 120):
        answer = asyncio.run(
            answer_fetch(_fetch_request(version, offset), state, archive, TruncatedBroker(version))
        )
        part = decode_response(API_FETCH, version, answer)[1].responses[0].partitions[0]
        assert part.records == (BATCH if offset < 100 else BROKER_BATCH)
    # the test's batches are opaque zeros: bytes counted, no record
    assert counted == [("orders", "archive", 0, len(BATCH)), ("orders", "broker", 0, len(BROKER_BATCH))]
