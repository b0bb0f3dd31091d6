"""The restore's Kafka requests and answers, byte for byte (processor/restore/requests.py, encoded by
kio over processor/kafka/wire.py).

Every request at every version the restore may send (``RESTORE_VERSIONS``) is the bytes its earlier
codec sent, aiokafka's request classes and a hand-written InitProducerId v3, header included (these
golden bytes were taken from that codec and compared with kio's before it was removed). Every answer
at those versions, in the golden bytes both codecs encode alike, decodes to what the restore reads of
it and encodes back to the same bytes. And: the version sent is the highest the broker, kio and the
restore share; an answer kio cannot decode fails its request alone.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable

import pytest
from aiokafka import errors as kafka_errors
from kio.index import load_response_schema
from kio.serial import entity_writer

from processor.kafka import wire
from processor.kafka.api_keys import (
    API_ADD_PARTITIONS_TO_TXN,
    API_END_TXN,
    API_FETCH,
    API_FIND_COORDINATOR,
    API_INIT_PRODUCER_ID,
    API_LIST_OFFSETS,
    API_PRODUCE,
)
from processor.restore import requests
from processor.restore.requests import RESTORE_VERSIONS

CORRELATION_ID, CLIENT_ID = 7, "processor-restore"
TID, PID, EPOCH, TOPIC, PART = "restore-t", 4242, 3, "orders", 2
BATCH = b"record-batch"  # opaque to the codec: any record batch's bytes

# name: (api key, the request as the restore builds it)
REQUESTS: dict[str, tuple[int, Callable[[], wire.KioRequest]]] = {
    "find_coordinator": (API_FIND_COORDINATOR, lambda: requests.find_coordinator(TID)),
    "init_producer_id": (API_INIT_PRODUCER_ID, lambda: requests.init_producer_id(TID, 60_000)),
    "init_producer_id_bump": (
        API_INIT_PRODUCER_ID,
        lambda: requests.init_producer_id(TID, 60_000, PID, EPOCH),
    ),
    "add_partitions_to_txn": (
        API_ADD_PARTITIONS_TO_TXN,
        lambda: requests.add_partitions_to_txn(TID, PID, EPOCH, TOPIC, PART),
    ),
    "end_txn_commit": (API_END_TXN, lambda: requests.end_txn(TID, PID, EPOCH, True)),
    "end_txn_abort": (API_END_TXN, lambda: requests.end_txn(TID, PID, EPOCH, False)),
    "produce": (API_PRODUCE, lambda: requests.produce(TID, -1, 30_000, TOPIC, PART, bytearray(BATCH))),
    "fetch": (API_FETCH, lambda: requests.fetch(5000, 1, 8 << 20, 0, TOPIC, PART, 1234, 8 << 20)),
    "list_offsets": (API_LIST_OFFSETS, lambda: requests.list_offsets(0, TOPIC, PART, -2)),
}

GOLDEN_REQUESTS: dict[tuple[str, int], str] = {
    ("find_coordinator", 1): "000a000100000007001170726f636573736f722d726573746f72650009726573746f72652d7401",
    (
        "init_producer_id",
        0,
    ): "0016000000000007001170726f636573736f722d726573746f72650009726573746f72652d740000ea60",
    ("init_producer_id", 3): (
        "0016000300000007001170726f636573736f722d726573746f7265000a726573746f72652d740000ea60ffffffffffff"
        "ffffffff00"
    ),
    ("init_producer_id_bump", 3): (
        "0016000300000007001170726f636573736f722d726573746f7265000a726573746f72652d740000ea60000000000000"
        "1092000300"
    ),
    ("add_partitions_to_txn", 0): (
        "0018000000000007001170726f636573736f722d726573746f72650009726573746f72652d7400000000000010920003"
        "0000000100066f72646572730000000100000002"
    ),
    ("end_txn_commit", 0): (
        "001a000000000007001170726f636573736f722d726573746f72650009726573746f72652d740000000000001092000301"
    ),
    ("end_txn_abort", 0): (
        "001a000000000007001170726f636573736f722d726573746f72650009726573746f72652d740000000000001092000300"
    ),
    ("produce", 3): (
        "0000000300000007001170726f636573736f722d726573746f72650009726573746f72652d74ffff0000753000000001"
        "00066f726465727300000001000000020000000c7265636f72642d6261746368"
    ),
    ("produce", 4): (
        "0000000400000007001170726f636573736f722d726573746f72650009726573746f72652d74ffff0000753000000001"
        "00066f726465727300000001000000020000000c7265636f72642d6261746368"
    ),
    ("produce", 5): (
        "0000000500000007001170726f636573736f722d726573746f72650009726573746f72652d74ffff0000753000000001"
        "00066f726465727300000001000000020000000c7265636f72642d6261746368"
    ),
    ("produce", 6): (
        "0000000600000007001170726f636573736f722d726573746f72650009726573746f72652d74ffff0000753000000001"
        "00066f726465727300000001000000020000000c7265636f72642d6261746368"
    ),
    ("produce", 7): (
        "0000000700000007001170726f636573736f722d726573746f72650009726573746f72652d74ffff0000753000000001"
        "00066f726465727300000001000000020000000c7265636f72642d6261746368"
    ),
    ("fetch", 4): (
        "0001000400000007001170726f636573736f722d726573746f7265ffffffff0000138800000001008000000000000001"
        "00066f7264657273000000010000000200000000000004d200800000"
    ),
    ("fetch", 5): (
        "0001000500000007001170726f636573736f722d726573746f7265ffffffff0000138800000001008000000000000001"
        "00066f7264657273000000010000000200000000000004d2ffffffffffffffff00800000"
    ),
    ("fetch", 6): (
        "0001000600000007001170726f636573736f722d726573746f7265ffffffff0000138800000001008000000000000001"
        "00066f7264657273000000010000000200000000000004d2ffffffffffffffff00800000"
    ),
    ("fetch", 7): (
        "0001000700000007001170726f636573736f722d726573746f7265ffffffff0000138800000001008000000000000000"
        "ffffffff0000000100066f7264657273000000010000000200000000000004d2ffffffffffffffff0080000000000000"
    ),
    ("fetch", 8): (
        "0001000800000007001170726f636573736f722d726573746f7265ffffffff0000138800000001008000000000000000"
        "ffffffff0000000100066f7264657273000000010000000200000000000004d2ffffffffffffffff0080000000000000"
    ),
    ("fetch", 9): (
        "0001000900000007001170726f636573736f722d726573746f7265ffffffff0000138800000001008000000000000000"
        "ffffffff0000000100066f72646572730000000100000002ffffffff00000000000004d2ffffffffffffffff00800000"
        "00000000"
    ),
    ("fetch", 10): (
        "0001000a00000007001170726f636573736f722d726573746f7265ffffffff0000138800000001008000000000000000"
        "ffffffff0000000100066f72646572730000000100000002ffffffff00000000000004d2ffffffffffffffff00800000"
        "00000000"
    ),
    ("fetch", 11): (
        "0001000b00000007001170726f636573736f722d726573746f7265ffffffff0000138800000001008000000000000000"
        "ffffffff0000000100066f72646572730000000100000002ffffffff00000000000004d2ffffffffffffffff00800000"
        "000000000000"
    ),
    ("list_offsets", 1): (
        "0002000100000007001170726f636573736f722d726573746f7265ffffffff0000000100066f72646572730000000100"
        "000002fffffffffffffffe"
    ),
    ("list_offsets", 2): (
        "0002000200000007001170726f636573736f722d726573746f7265ffffffff000000000100066f726465727300000001"
        "00000002fffffffffffffffe"
    ),
    ("list_offsets", 3): (
        "0002000300000007001170726f636573736f722d726573746f7265ffffffff000000000100066f726465727300000001"
        "00000002fffffffffffffffe"
    ),
}
GOLDEN_ANSWERS: dict[tuple[int, int, str], tuple[str, tuple[int | bytes, ...]]] = {
    (API_PRODUCE, 3, "ok"): (
        "000000070000000100066f72646572730000000100000002000000000000000003e8ffffffffffffffff00000000",
        (0, 1000),
    ),
    (API_PRODUCE, 3, "too_large"): (
        "000000070000000100066f72646572730000000100000002000affffffffffffffffffffffffffffffff00000000",
        (10, -1),
    ),
    (API_PRODUCE, 4, "ok"): (
        "000000070000000100066f72646572730000000100000002000000000000000003e8ffffffffffffffff00000000",
        (0, 1000),
    ),
    (API_PRODUCE, 4, "too_large"): (
        "000000070000000100066f72646572730000000100000002000affffffffffffffffffffffffffffffff00000000",
        (10, -1),
    ),
    (API_PRODUCE, 5, "ok"): (
        (
            "000000070000000100066f72646572730000000100000002000000000000000003e8ffffffffffffffff000000000000"
            "000000000000"
        ),
        (0, 1000),
    ),
    (API_PRODUCE, 5, "too_large"): (
        (
            "000000070000000100066f72646572730000000100000002000affffffffffffffffffffffffffffffff000000000000"
            "000000000000"
        ),
        (10, -1),
    ),
    (API_PRODUCE, 6, "ok"): (
        (
            "000000070000000100066f72646572730000000100000002000000000000000003e8ffffffffffffffff000000000000"
            "000000000000"
        ),
        (0, 1000),
    ),
    (API_PRODUCE, 6, "too_large"): (
        (
            "000000070000000100066f72646572730000000100000002000affffffffffffffffffffffffffffffff000000000000"
            "000000000000"
        ),
        (10, -1),
    ),
    (API_PRODUCE, 7, "ok"): (
        (
            "000000070000000100066f72646572730000000100000002000000000000000003e8ffffffffffffffff000000000000"
            "000000000000"
        ),
        (0, 1000),
    ),
    (API_PRODUCE, 7, "too_large"): (
        (
            "000000070000000100066f72646572730000000100000002000affffffffffffffffffffffffffffffff000000000000"
            "000000000000"
        ),
        (10, -1),
    ),
    (API_FETCH, 4, "ok"): (
        (
            "00000007000000000000000100066f726465727300000001000000020000000000000000138800000000000013880000"
            "00000000000c7265636f72642d6261746368"
        ),
        (0, 5000, 0, b"record-batch"),
    ),
    (API_FETCH, 4, "out_of_range"): (
        (
            "00000007000000000000000100066f726465727300000001000000020001000000000000138800000000000013880000"
            "0000ffffffff"
        ),
        (1, 5000, 0, b""),
    ),
    (API_FETCH, 5, "ok"): (
        (
            "00000007000000000000000100066f726465727300000001000000020000000000000000138800000000000013880000"
            "000000000011000000000000000c7265636f72642d6261746368"
        ),
        (0, 5000, 17, b"record-batch"),
    ),
    (API_FETCH, 5, "out_of_range"): (
        (
            "00000007000000000000000100066f726465727300000001000000020001000000000000138800000000000013880000"
            "00000000001100000000ffffffff"
        ),
        (1, 5000, 17, b""),
    ),
    (API_FETCH, 6, "ok"): (
        (
            "00000007000000000000000100066f726465727300000001000000020000000000000000138800000000000013880000"
            "000000000011000000000000000c7265636f72642d6261746368"
        ),
        (0, 5000, 17, b"record-batch"),
    ),
    (API_FETCH, 6, "out_of_range"): (
        (
            "00000007000000000000000100066f726465727300000001000000020001000000000000138800000000000013880000"
            "00000000001100000000ffffffff"
        ),
        (1, 5000, 17, b""),
    ),
    (API_FETCH, 7, "ok"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020000000000000000138800000000"
            "000013880000000000000011000000000000000c7265636f72642d6261746368"
        ),
        (0, 5000, 17, b"record-batch"),
    ),
    (API_FETCH, 7, "out_of_range"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020001000000000000138800000000"
            "00001388000000000000001100000000ffffffff"
        ),
        (1, 5000, 17, b""),
    ),
    (API_FETCH, 8, "ok"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020000000000000000138800000000"
            "000013880000000000000011000000000000000c7265636f72642d6261746368"
        ),
        (0, 5000, 17, b"record-batch"),
    ),
    (API_FETCH, 8, "out_of_range"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020001000000000000138800000000"
            "00001388000000000000001100000000ffffffff"
        ),
        (1, 5000, 17, b""),
    ),
    (API_FETCH, 9, "ok"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020000000000000000138800000000"
            "000013880000000000000011000000000000000c7265636f72642d6261746368"
        ),
        (0, 5000, 17, b"record-batch"),
    ),
    (API_FETCH, 9, "out_of_range"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020001000000000000138800000000"
            "00001388000000000000001100000000ffffffff"
        ),
        (1, 5000, 17, b""),
    ),
    (API_FETCH, 10, "ok"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020000000000000000138800000000"
            "000013880000000000000011000000000000000c7265636f72642d6261746368"
        ),
        (0, 5000, 17, b"record-batch"),
    ),
    (API_FETCH, 10, "out_of_range"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020001000000000000138800000000"
            "00001388000000000000001100000000ffffffff"
        ),
        (1, 5000, 17, b""),
    ),
    (API_FETCH, 11, "ok"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020000000000000000138800000000"
            "00001388000000000000001100000000ffffffff0000000c7265636f72642d6261746368"
        ),
        (0, 5000, 17, b"record-batch"),
    ),
    (API_FETCH, 11, "out_of_range"): (
        (
            "00000007000000000000000000000000000100066f726465727300000001000000020001000000000000138800000000"
            "00001388000000000000001100000000ffffffffffffffff"
        ),
        (1, 5000, 17, b""),
    ),
    (API_LIST_OFFSETS, 1, "ok"): (
        "000000070000000100066f726465727300000001000000020000ffffffffffffffff0000000000000011",
        (0, 17),
    ),
    (API_LIST_OFFSETS, 1, "not_leader"): (
        "000000070000000100066f726465727300000001000000020006ffffffffffffffffffffffffffffffff",
        (6, -1),
    ),
    (API_LIST_OFFSETS, 2, "ok"): (
        "00000007000000000000000100066f726465727300000001000000020000ffffffffffffffff0000000000000011",
        (0, 17),
    ),
    (API_LIST_OFFSETS, 2, "not_leader"): (
        "00000007000000000000000100066f726465727300000001000000020006ffffffffffffffffffffffffffffffff",
        (6, -1),
    ),
    (API_LIST_OFFSETS, 3, "ok"): (
        "00000007000000000000000100066f726465727300000001000000020000ffffffffffffffff0000000000000011",
        (0, 17),
    ),
    (API_LIST_OFFSETS, 3, "not_leader"): (
        "00000007000000000000000100066f726465727300000001000000020006ffffffffffffffffffffffffffffffff",
        (6, -1),
    ),
    (API_FIND_COORDINATOR, 1, "ok"): (
        "00000007000000000000ffff00000003000862726f6b65722d3300002384",
        (0, 3),
    ),
    (API_FIND_COORDINATOR, 1, "not_available"): (
        "0000000700000000000f00076c6f6164696e67ffffffff0000ffffffff",
        (15, -1),
    ),
    (API_INIT_PRODUCER_ID, 0, "ok"): (
        "0000000700000000000000000000000010920003",
        (0, 4242, 3),
    ),
    (API_INIT_PRODUCER_ID, 0, "fenced"): (
        "0000000700000000005affffffffffffffffffff",
        (90, -1, -1),
    ),
    (API_INIT_PRODUCER_ID, 3, "ok"): (
        "00000007000000000000000000000000001092000300",
        (0, 4242, 3),
    ),
    (API_INIT_PRODUCER_ID, 3, "fenced"): (
        "000000070000000000005affffffffffffffffffff00",
        (90, -1, -1),
    ),
    (API_ADD_PARTITIONS_TO_TXN, 0, "ok"): (
        "00000007000000000000000100066f726465727300000001000000020000",
        (0,),
    ),
    (API_ADD_PARTITIONS_TO_TXN, 0, "concurrent"): (
        "00000007000000000000000100066f726465727300000001000000020033",
        (51,),
    ),
    (API_END_TXN, 0, "ok"): (
        "00000007000000000000",
        (0,),
    ),
    (API_END_TXN, 0, "epoch"): (
        "0000000700000000002f",
        (47,),
    ),
}


def _sent(request: wire.KioRequest, api_key: int, version: int) -> bytes:
    prepared = request.prepare({api_key: (version, version)})
    assert version == prepared.API_VERSION
    header = prepared.build_request_header(correlation_id=CORRELATION_ID, client_id=CLIENT_ID)
    return header.encode() + prepared.encode()


def _read(api_key: int, answer: object) -> tuple[int | bytes, ...] | None:
    """What the restore reads of an answer (batch_producer.py, log_reader.py)."""
    if api_key == API_FIND_COORDINATOR:
        return int(answer.error_code), int(answer.node_id)  # type: ignore[attr-defined]
    if api_key == API_INIT_PRODUCER_ID:
        return int(answer.error_code), int(answer.producer_id), int(answer.producer_epoch)  # type: ignore[attr-defined]
    if api_key in (API_ADD_PARTITIONS_TO_TXN, API_END_TXN):
        return (requests.coordinator_error(answer),)
    if api_key == API_PRODUCE:
        return requests.produce_result(answer, TOPIC, PART)
    if api_key == API_FETCH:
        return requests.fetch_result(answer, TOPIC, PART)
    return requests.list_offsets_result(answer, TOPIC, PART)


def test_every_version_the_restore_may_send_has_golden_bytes() -> None:
    covered = {(REQUESTS[name][0], version) for name, version in GOLDEN_REQUESTS}
    wanted = {(key, v) for key, versions in RESTORE_VERSIONS.items() for v in versions}
    assert covered == wanted
    assert {(key, v) for key, v, _label in GOLDEN_ANSWERS} == wanted


@pytest.mark.parametrize(("name", "version"), sorted(GOLDEN_REQUESTS))
def test_each_request_is_the_bytes_the_restore_has_always_sent(name: str, version: int) -> None:
    api_key, build = REQUESTS[name]
    assert _sent(build(), api_key, version).hex() == GOLDEN_REQUESTS[name, version]


@pytest.mark.parametrize(("api_key", "version", "label"), sorted(GOLDEN_ANSWERS))
def test_each_answer_decodes_to_what_the_restore_reads_and_encodes_back(
    api_key: int, version: int, label: str
) -> None:
    data, expected = GOLDEN_ANSWERS[api_key, version, label]
    frame = bytes.fromhex(data)
    request = next(build() for key, build in REQUESTS.values() if key == api_key)
    prepared = request.prepare({api_key: (version, version)})
    answer = io.BytesIO(frame)
    header = prepared.parse_response_header(answer)
    assert header.correlation_id == CORRELATION_ID
    body = wire.decode_answer(prepared.RESPONSE_TYPE.decode(answer))
    assert _read(api_key, body) == expected
    out = io.BytesIO()
    schema = load_response_schema(api_key, version)
    entity_writer(schema.__header_schema__)(out, header)
    entity_writer(schema)(out, body)
    assert out.getvalue() == frame


def test_the_version_sent_is_the_highest_the_broker_kio_and_the_restore_share() -> None:
    init = requests.init_producer_id(TID, 60_000)
    assert init.prepare({API_INIT_PRODUCER_ID: (0, 2)}).API_VERSION == 0  # before Kafka 2.5: a new epoch only
    assert init.prepare({API_INIT_PRODUCER_ID: (0, 6)}).API_VERSION == 3
    fetch = requests.fetch(5000, 1, 1, 0, TOPIC, PART, 0, 1)
    assert fetch.prepare({API_FETCH: (4, 18)}).API_VERSION == 11
    produce = requests.produce(TID, -1, 1000, TOPIC, PART, BATCH)
    with pytest.raises(kafka_errors.IncompatibleBrokerVersion):  # no transactions before Produce v3
        produce.prepare({API_PRODUCE: (0, 2)})
    with pytest.raises(kafka_errors.IncompatibleBrokerVersion):
        produce.prepare({API_FETCH: (4, 18)})


def test_an_answer_kio_cannot_decode_fails_its_request_alone() -> None:
    # an error code kio's schemas do not know, and bytes left over: a KafkaError for that request,
    # decoded outside the connection's reader (which would close the connection)
    unknown = struct.pack(">ihqh", 0, 12345, -1, -1)
    with pytest.raises(wire.AnswerNotDecoded, match="12345"):
        wire.decode_answer(wire.RawAnswer(API_INIT_PRODUCER_ID, 0, unknown))
    with pytest.raises(wire.AnswerNotDecoded, match="left over"):
        wire.decode_answer(wire.RawAnswer(API_END_TXN, 0, struct.pack(">ih", 0, 0) + b"\x00"))
    assert issubclass(wire.AnswerNotDecoded, kafka_errors.KafkaError)
