"""The partitions of a broker's Fetch answer, found without copying their records. Pure.

A Fetch answer the gateway passes on as it is (every partition the broker's: live reads) is still
read for two things: each partition's error code (an OFFSET_OUT_OF_RANGE below the broker's log start
must not reach a client that would reset past the archive) and where its records lie (the records
served metric). kio decodes a whole answer and copies every partition's records into new bytes:
measured, 8% of the gateway's time on live reads, for bytes it then throws away. This walks the
answer with kio's own primitive readers instead and gives each partition's records as a view into
the answer. Kept to the fields it must step over; the layout is Kafka's ``FetchResponse.json``:

    header          correlation_id int32; v12+ (flexible): tagged fields
    body            throttle_time_ms int32 (v1+); error_code int16 (v7+); session_id int32 (v7+);
                    responses [topic]; v12+: tagged fields
    topic           topic string (v0-12) | topic_id uuid (v13+); partitions [partition];
                    v12+: tagged fields
    partition       partition_index int32; error_code int16; high_watermark int64;
                    last_stable_offset int64 (v4+); log_start_offset int64 (v5+);
                    aborted_transactions nullable [producer_id int64, first_offset int64,
                    v12+: tagged fields] (v4+); preferred_read_replica int32 (v11+);
                    records nullable bytes; v12+: tagged fields

Flexible versions (12+) write arrays, strings and bytes with an unsigned varint length + 1 (0: null)
and end each struct with tagged fields (a count, then per field a tag, a size and that many bytes);
older ones use int32 (arrays, bytes) and int16 (strings) lengths, -1 for null. Versions 16 and later
add node endpoints (broker addresses) as a tagged field of the body: the walk steps over tagged
fields and notes the body's, so an answer that names brokers is decoded and its addresses rewritten.
An answer that does not follow the layout (cut short, a length past its end, bytes left over) is a
:class:`ProtocolError`, as kio's would be.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kio.serial.errors import DecodeError
from kio.serial.readers import (
    read_compact_array_length,
    read_compact_string_nullable,
    read_int16,
    read_int32,
    read_legacy_array_length,
    read_legacy_string,
    read_unsigned_varint,
    read_uuid,
)

from processor.gateway.protocol import ProtocolError

FLEXIBLE_FROM = 12
NODE_ENDPOINTS_TAG = 0
TOPIC_IDS_FROM = 13


@dataclass(frozen=True, slots=True)
class BrokerPartition:
    """One partition of a Fetch answer: its topic as the answer names it (a name below version 13,
    a topic id from 13; None for a null id), its error code and its records (None if null)."""

    topic: str | uuid.UUID | None
    partition: int
    error_code: int
    records: bytes | memoryview | None


def fetch_partitions(answer: bytes | memoryview, version: int) -> list[BrokerPartition]:
    """Every partition of the Fetch answer ``answer`` (a whole response frame, header first) of
    ``version``, in order; ProtocolError if it does not follow the layout."""
    return _walked(answer, version).answer()


def fetch_node_endpoints(answer: bytes | memoryview, version: int) -> bool:
    """Whether the Fetch answer names brokers: node endpoints (from version 16, the body's tagged
    field 0, a compact array) with at least one entry. A broker may send the field empty with
    every answer (Tansu does): decoding those to find nothing took a fifth off live reads."""
    walk = _walked(answer, version)
    walk.answer()
    return walk.body_tags.get(NODE_ENDPOINTS_TAG, 0) > 1  # an empty compact array is one byte


def _walked(answer: bytes | memoryview, version: int) -> _Walk:
    return _Walk(memoryview(answer).toreadonly(), version)


class _Walk:
    def __init__(self, view: memoryview, version: int) -> None:
        self.view, self.version, self.pos = view, version, 0
        self.flexible = version >= FLEXIBLE_FROM
        self.body_tags: dict[int, int] = {}  # the body's tagged fields: tag -> size

    def answer(self) -> list[BrokerPartition]:
        try:
            return self._answer()
        except (DecodeError, ValueError, IndexError, TypeError) as exc:
            raise ProtocolError(f"cannot read the broker's Fetch v{self.version} answer: {exc}") from None

    def _answer(self) -> list[BrokerPartition]:
        self.skip(4)  # correlation id
        self.tags()
        self.skip((4 if self.version >= 1 else 0) + (6 if self.version >= 7 else 0))
        out: list[BrokerPartition] = []
        for _ in range(self.array()):
            topic = self.topic()
            for _ in range(self.array()):
                out.append(self.partition(topic))
            self.tags()
        self.body_tags = self.tags()
        if self.pos != len(self.view):
            raise ProtocolError(f"Fetch v{self.version} answer: {len(self.view) - self.pos} bytes left over")
        return out

    def topic(self) -> str | uuid.UUID | None:
        if self.version >= TOPIC_IDS_FROM:
            topic_id: uuid.UUID | None = self.read(read_uuid)
            return topic_id
        name = self.read(read_compact_string_nullable if self.flexible else read_legacy_string)
        if name is None:
            raise ProtocolError(f"Fetch v{self.version} answer: a topic with a null name")
        return str(name)

    def partition(self, topic: str | uuid.UUID | None) -> BrokerPartition:
        index = int(self.read(read_int32))
        error_code = int(self.read(read_int16))
        self.skip(8 + (8 if self.version >= 4 else 0) + (8 if self.version >= 5 else 0))
        if self.version >= 4:
            for _ in range(self.array()):
                self.skip(16)
                self.tags()
        if self.version >= 11:
            self.skip(4)
        records = self.bytes_field()
        self.tags()
        return BrokerPartition(topic, index, error_code, records)

    def read(self, reader: Callable[[memoryview, int], tuple[Any, int]]) -> Any:
        value, used = reader(self.view, self.pos)
        self.pos += used
        return value

    def skip(self, n: int) -> None:
        if self.pos + n > len(self.view):
            raise ProtocolError(f"Fetch v{self.version} answer cut short")
        self.pos += n

    def array(self) -> int:
        """An array's length (0 for a null array)."""
        n = self.read(read_compact_array_length if self.flexible else read_legacy_array_length)
        count = 0 if n is None else int(n)
        if count < -1:
            raise ProtocolError(f"Fetch v{self.version} answer: an array of {count} items")
        return max(count, 0)

    def bytes_field(self) -> memoryview | None:
        n = int(self.read(read_unsigned_varint)) - 1 if self.flexible else int(self.read(read_int32))
        if n < 0:
            if n != -1:
                raise ProtocolError(f"Fetch v{self.version} answer: records of {n} bytes")
            return None
        start = self.pos
        self.skip(n)
        return self.view[start : self.pos]

    def tags(self) -> dict[int, int]:
        """Steps over a struct's tagged fields; the size of each, by tag."""
        found: dict[int, int] = {}
        if not self.flexible:
            return found
        for _ in range(int(self.read(read_unsigned_varint))):
            tag = int(self.read(read_unsigned_varint))
            found[tag] = int(self.read(read_unsigned_varint))
            self.skip(found[tag])
        return found
