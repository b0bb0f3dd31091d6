"""The record model every format version decodes to: exactly what a Kafka consumer sees of a record.

``timestamp_type`` is Kafka's: 0 not available, 1 CreateTime, 2 LogAppendTime (the values
confluent-kafka reports). Headers keep their order and duplicates, exactly as the producer sent them;
a header value may be null. Pure: no format, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class TimestampType(IntEnum):
    NOT_AVAILABLE = 0
    CREATE_TIME = 1
    LOG_APPEND_TIME = 2


Header = tuple[str, bytes | None]


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """Exactly what a Kafka consumer sees of one record."""

    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[Header, ...] = ()
