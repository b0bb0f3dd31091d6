"""What the restore's batch producer sends besides aiokafka's own request classes (InitProducerId
v3, and each batch restamped by :func:`stamp`), and how it reads Kafka's error codes. Pure.

aiokafka carries InitProducerId only at version 0, whose request has no producer id or epoch; Tansu
answers it with error -1, and Kafka itself wants version 3+ to bump an epoch (KIP-360). Version 0
stays for brokers older than Kafka 2.5. Version 3
is the first flexible one (KIP-482: compact strings, tagged fields). Its layout::

    InitProducerId request v3 (api key 22)
      transactional_id        COMPACT_NULLABLE_STRING
      transaction_timeout_ms  INT32
      producer_id             INT64   -1: a new producer; else the current one (an epoch bump)
      producer_epoch          INT16   -1 likewise
      TAG_BUFFER
    InitProducerId response v3
      throttle_time_ms INT32 | error_code INT16 | producer_id INT64 | producer_epoch INT16 | TAG_BUFFER
"""

from __future__ import annotations

import struct
from enum import Enum
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.transaction import InitProducerIdRequest_v0
from aiokafka.protocol.types import CompactString, Int16, Int32, Int64, Schema, TaggedFields

from processor.kafka.api_keys import API_INIT_PRODUCER_ID
from processor.segment.checksums import BATCH_CRC_AT, BATCH_CRC_FROM, crc32c_of
from processor.segment.entries_v2 import ATTR_TRANSACTIONAL


class InitProducerIdResponse_v3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = API_INIT_PRODUCER_ID
    API_VERSION = 3
    FLEXIBLE_VERSION = True
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        ("error_code", Int16),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest_v3(RequestStruct):  # type: ignore[misc]
    API_KEY = API_INIT_PRODUCER_ID
    API_VERSION = 3
    FLEXIBLE_VERSION = True
    RESPONSE_TYPE = InitProducerIdResponse_v3
    SCHEMA = Schema(
        ("transactional_id", CompactString("utf-8")),
        ("transaction_timeout_ms", Int32),
        ("producer_id", Int64),
        ("producer_epoch", Int16),
        ("tags", TaggedFields),
    )


class InitProducerIdRequest(Request[InitProducerIdRequest_v0 | InitProducerIdRequest_v3]):  # type: ignore[misc]
    """Version 3 where the broker has it (Kafka 2.5+), else version 0 (a new epoch only)."""

    API_KEY = API_INIT_PRODUCER_ID

    def __init__(
        self, transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
    ) -> None:
        self._args = (transactional_id, timeout_ms, producer_id, epoch)

    def build(self, request_struct_class: type[Any]) -> Any:
        if request_struct_class.API_VERSION == 0:
            return request_struct_class(*self._args[:2])
        return request_struct_class(*self._args, {})


class ErrorKind(Enum):
    NONE = "none"
    FENCED = "fenced"  # another producer with this transactional id took over, or not allowed: fatal
    COORDINATOR = "coordinator"  # the transaction coordinator moved or is loading: find it, ask again
    BUSY = "busy"  # the coordinator still ends the previous transaction, no leader yet: ask again
    FAILED = "failed"  # the transaction cannot go on: abort it
    REJECTED = "rejected"  # the target refuses the batch itself: sending it again cannot help


# Not a Kafka code: the connection to the coordinator dropped or a request to it timed out. Asked
# again like a moved coordinator: InitProducerId, AddPartitionsToTxn and EndTxn may all be repeated
# (a repeated EndTxn whose first copy went through is answered as done by Kafka; any other answer
# leaves the commit's outcome unknown, which the producer reports as such).
CONNECTION_LOST = -1000
LEADER_NOT_AVAILABLE = 5

# Kafka's error codes (org.apache.kafka.common.protocol.Errors) the producer tells apart.
_KINDS = {
    CONNECTION_LOST: ErrorKind.COORDINATOR,
    0: ErrorKind.NONE,
    LEADER_NOT_AVAILABLE: ErrorKind.BUSY,  # asked again (the producer's leader lookup)
    14: ErrorKind.COORDINATOR,  # COORDINATOR_LOAD_IN_PROGRESS
    15: ErrorKind.COORDINATOR,  # COORDINATOR_NOT_AVAILABLE
    16: ErrorKind.COORDINATOR,  # NOT_COORDINATOR
    47: ErrorKind.FENCED,  # INVALID_PRODUCER_EPOCH
    51: ErrorKind.BUSY,  # CONCURRENT_TRANSACTIONS
    52: ErrorKind.FENCED,  # TRANSACTION_COORDINATOR_FENCED
    53: ErrorKind.FENCED,  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    29: ErrorKind.FENCED,  # TOPIC_AUTHORIZATION_FAILED
    31: ErrorKind.FENCED,  # CLUSTER_AUTHORIZATION_FAILED
    90: ErrorKind.FENCED,  # PRODUCER_FENCED
    2: ErrorKind.REJECTED,  # CORRUPT_MESSAGE
    10: ErrorKind.REJECTED,  # MESSAGE_TOO_LARGE
    18: ErrorKind.REJECTED,  # RECORD_LIST_TOO_LARGE
    87: ErrorKind.REJECTED,  # INVALID_RECORD
}


# Names for the codes aiokafka has no class for (and our own CONNECTION_LOST).
_NAMES = {
    CONNECTION_LOST: "connection lost or request timed out",
    -1: "UNKNOWN_SERVER_ERROR",
    47: "INVALID_PRODUCER_EPOCH",
    51: "CONCURRENT_TRANSACTIONS",
    52: "TRANSACTION_COORDINATOR_FENCED",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
    90: "PRODUCER_FENCED",
}
_TOO_LARGE = (10, 18)  # MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE


def error_name(code: int) -> str:
    """Kafka's name of an error code (aiokafka's class name, or the protocol's name for codes
    aiokafka does not know)."""
    if code in _NAMES:
        return _NAMES[code]
    error = kafka_errors.for_code(code)
    return f"error {code}" if error is kafka_errors.UnknownError else str(error.__name__)


def error_kind(code: int) -> ErrorKind:
    """How the producer handles a Kafka error code: anything it does not know fails the transaction
    (which the restore aborts and redoes from its committed progress)."""
    return _KINDS.get(code, ErrorKind.FAILED)


def rejection_hint(code: int) -> str:
    """What to do about a batch the target refuses for its size."""
    return " (lower --max-batch-bytes to the topic's max.message.bytes)" if code in _TOO_LARGE else ""


_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_ATTRIBUTES = struct.Struct(">h")
_PRODUCER = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence at byte 43
_CRC = struct.Struct(">I")
NO_LEADER_EPOCH = -1


def stamp(batch: bytes | bytearray | memoryview, producer_id: int, epoch: int, sequence: int) -> bytearray:
    """A copy of a v2 record batch as this producer sends it: base offset 0 and no leader epoch (the
    broker assigns both), the transactional attribute, this producer's id, epoch and base sequence,
    and the CRC-32C (attributes to the end) recomputed. Records, codec and timestamps are untouched."""
    out = bytearray(batch)
    _OFFSET.pack_into(out, 0, 0)
    _LEADER_EPOCH.pack_into(out, 12, NO_LEADER_EPOCH)
    (attributes,) = _ATTRIBUTES.unpack_from(out, 21)
    _ATTRIBUTES.pack_into(out, 21, attributes | ATTR_TRANSACTIONAL)
    _PRODUCER.pack_into(out, 43, producer_id, epoch, sequence)
    _CRC.pack_into(out, BATCH_CRC_AT, crc32c_of(memoryview(out)[BATCH_CRC_FROM:]))
    return out
