"""What the restore's batch producer puts on the wire besides the requests
(:mod:`processor.restore.requests`, encoded by kio): each archived batch restamped by :func:`stamp`,
and how it reads Kafka's error codes. Pure.
"""

from __future__ import annotations

import struct
from enum import Enum

from aiokafka import errors as kafka_errors

from processor.segment.checksums import BATCH_CRC_AT, BATCH_CRC_FROM, crc32c_of
from processor.segment.entries_v2 import ATTR_TRANSACTIONAL


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
