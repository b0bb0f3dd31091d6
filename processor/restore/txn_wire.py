"""What the restore's batch producer sends besides aiokafka's own request classes, and how it reads
Kafka's error codes. Pure.

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

from enum import Enum
from typing import Any

from aiokafka import errors as kafka_errors
from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.transaction import InitProducerIdRequest_v0
from aiokafka.protocol.types import CompactString, Int16, Int32, Int64, Schema, TaggedFields


class InitProducerIdResponse_v3(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 22
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
    API_KEY = 22
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

    API_KEY = 22

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
    BUSY = "busy"  # the coordinator is still ending the previous transaction: ask again shortly
    FAILED = "failed"  # the transaction cannot go on: abort it
    REJECTED = "rejected"  # the target refuses the batch itself: sending it again cannot help


# Not a Kafka code: the connection to the coordinator dropped or a request to it timed out. Asked
# again like a moved coordinator: InitProducerId, AddPartitionsToTxn and EndTxn may all be repeated
# (a repeated EndTxn whose first copy went through is answered as done by Kafka; any other answer
# leaves the commit's outcome unknown, which the producer reports as such).
CONNECTION_LOST = -1000

# Kafka's error codes (org.apache.kafka.common.protocol.Errors) the producer tells apart.
_KINDS = {
    CONNECTION_LOST: ErrorKind.COORDINATOR,
    0: ErrorKind.NONE,
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


_NAMES = {47: "INVALID_PRODUCER_EPOCH", 51: "CONCURRENT_TRANSACTIONS", 52: "TRANSACTION_COORDINATOR_FENCED"}
_NAMES |= {53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED", 90: "PRODUCER_FENCED", -1: "UNKNOWN_SERVER_ERROR"}
_NAMES |= {CONNECTION_LOST: "connection lost or request timed out"}


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
