"""Kafka protocol frames and the messages the gateway reads or changes. Pure.

Wire layout (Kafka protocol, big-endian): a frame is ``int32 size`` then ``size`` bytes. Every request
starts with ``int16 api_key, int16 api_version, int32 correlation_id`` (request header v1 and v2 share
these first eight bytes, so any request can be routed, and its correlation id replaced, without
knowing its schema); every response starts with ``int32 correlation_id``.

Messages the gateway decodes or builds (ApiVersions, Metadata, FindCoordinator, DescribeCluster,
Fetch, ListOffsets) go through ``kio``: dataclasses and codecs generated from Kafka's own JSON
message schemas, headers included (each schema class names its header), rather than hand-written
layouts. Everything else is forwarded as bytes, never decoded. ``kio`` refuses what its schemas do not
describe (an unknown tagged field, an unknown error code): such a message is not one this gateway can
change safely, and the connection that sent it is closed (:class:`ProtocolError`).
"""

from __future__ import annotations

import io
import struct
from dataclasses import dataclass
from typing import IO, Any, cast

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from processor.errors import ProcessorError
from processor.kafka.api_keys import (
    API_API_VERSIONS,
    API_DESCRIBE_CLUSTER,
    API_FETCH,
    API_FIND_COORDINATOR,
    API_LIST_OFFSETS,
    API_METADATA,
    API_PRODUCE,
    API_SHARE_ACKNOWLEDGE,
    API_SHARE_FETCH,
)

# The highest version of each API this gateway decodes, changes or serves (kio 0.6 describes more),
# kept at the versions current clients use. Fetch from 16 and Produce from 10 answers can carry broker
# addresses (node endpoints, KIP-951): rewritten to the gateway's, as in Metadata answers.
GATEWAY_MAX_VERSIONS = {
    API_FETCH: 17,
    API_PRODUCE: 11,  # forwarded unchanged but for the node endpoints of its answer
    API_LIST_OFFSETS: 9,
    API_METADATA: 12,
    API_FIND_COORDINATOR: 5,
    API_API_VERSIONS: 3,
    API_DESCRIBE_CLUSTER: 1,
}
# The first version of an API whose answers carry node endpoints (KIP-951)
NODE_ENDPOINTS_FROM = {API_FETCH: 16, API_PRODUCE: 10}
# APIs a client may not use through the gateway: their responses name brokers the gateway does not
# rewrite, or their data would bypass the archive (share groups' fetches).
GATEWAY_HIDDEN_APIS = frozenset({API_SHARE_FETCH, API_SHARE_ACKNOWLEDGE})

# Every API key Kafka defines, as kio knows them (a key outside these and the brokers' own is refused)
KNOWN_API_KEYS = frozenset(int(key) for key in api_key_map)

HEAD = struct.Struct(">hhi")
SIZE = struct.Struct(">i")
MAX_FRAME_BYTES = 100 * 1024 * 1024  # Kafka's socket.request.max.bytes


Frame = bytes | memoryview  # a whole frame's payload (an upstream answer: a view of its own buffer)
Chunks = list[bytes | memoryview]  # one answer's bytes in order, large pieces kept by reference
Answer = Frame | Chunks


class ProtocolError(ProcessorError):
    """A frame this gateway cannot handle: the connection that sent it is closed."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    api_key: int
    api_version: int
    correlation_id: int


def request_head(frame: bytes | memoryview) -> RequestHead:
    if len(frame) < HEAD.size:
        raise ProtocolError(f"request of {len(frame)} bytes has no header")
    key, version, corr = HEAD.unpack_from(frame, 0)
    return RequestHead(key, version, corr)


def with_correlation_id(frame: bytes | memoryview, correlation_id: int, at: int) -> bytes:
    """``frame`` with the correlation id at byte ``at`` (4 in a request, 0 in a response) replaced."""
    view = memoryview(frame)
    return b"".join((view[:at], struct.pack(">i", correlation_id), view[at + 4 :]))  # one copy


def response_correlation_id(frame: bytes | memoryview) -> int:
    if len(frame) < 4:
        raise ProtocolError(f"response of {len(frame)} bytes has no correlation id")
    return int.from_bytes(frame[:4], "big", signed=True)


def schema_versions(api_key: int, top: int) -> tuple[int, int] | None:
    """The versions up to ``top`` of ``api_key`` kio has both a request and a response schema for,
    from its index (no schema module imported)."""
    versions = schema_name_map.get(api_key_map.get(api_key, ""), {})
    have = [
        v
        for v, entities in versions.items()
        if v <= top and EntityType.request in entities and EntityType.response in entities
    ]
    return (min(have), max(have)) if have else None


def warm_up() -> int:
    """Import the schemas of every API version the gateway decodes and build their codecs, before
    it listens: done on a client's first request, this took over a second of the event loop's time
    (kio's schema modules are hundreds of generated dataclasses). Returns the schemas loaded."""
    loaded = 0
    for api_key, top in GATEWAY_MAX_VERSIONS.items():
        found = schema_versions(api_key, top)
        if found is None:
            continue
        for version in range(found[0], found[1] + 1):
            for schema in (load_request_schema(api_key, version), load_response_schema(api_key, version)):
                entity_reader(schema.__header_schema__)
                entity_reader(schema)
                entity_writer(schema)
                loaded += 1
    return loaded


def framed(payload: bytes) -> bytes:
    return SIZE.pack(len(payload)) + payload


def decode_request(frame: bytes | memoryview) -> tuple[Any, Any]:
    """(header, body) of a request the gateway handles, decoded by its schema."""
    head = request_head(frame)
    try:
        schema = load_request_schema(head.api_key, head.api_version)
        header, used = entity_reader(schema.__header_schema__)(frame, 0)
        body, body_used = entity_reader(schema)(frame, used)
    except Exception as exc:  # kio raises its own errors, and ValueError/KeyError on bad input
        raise ProtocolError(f"cannot decode api {head.api_key} v{head.api_version}: {exc}") from exc
    if used + body_used != len(frame):
        raise ProtocolError(
            f"api {head.api_key} v{head.api_version}: {len(frame) - used - body_used} bytes left over"
        )
    return header, body


def encode_request(header: Any, body: Any) -> bytes:
    buf = io.BytesIO()
    entity_writer(type(body).__header_schema__)(buf, header)
    entity_writer(type(body))(buf, body)
    return buf.getvalue()


def decode_response(api_key: int, api_version: int, frame: bytes | memoryview | Chunks) -> tuple[int, Any]:
    """(correlation id, body) of a response to a request the gateway handles (or builds)."""
    if isinstance(frame, list):
        frame = b"".join(frame)
    try:
        schema = load_response_schema(api_key, api_version)
        header, used = entity_reader(schema.__header_schema__)(frame, 0)
        body, body_used = entity_reader(schema)(frame, used)
    except Exception as exc:
        raise ProtocolError(f"cannot decode the response to api {api_key} v{api_version}: {exc}") from exc
    if used + body_used != len(frame):
        raise ProtocolError(f"response to api {api_key} v{api_version}: bytes left over")
    return int(header.correlation_id), body


def encode_response(correlation_id: int, body: Any) -> bytes:
    schema = type(body)
    buf = io.BytesIO()
    entity_writer(schema.__header_schema__)(buf, schema.__header_schema__(correlation_id=correlation_id))
    entity_writer(schema)(buf, body)
    return buf.getvalue()


class RecordsRef:
    """Record batches standing in for a ``records`` field's bytes while a response is encoded by
    :func:`encode_response_chunks`: kio asks only for its length and hands it to the writer, which
    keeps the batches by reference. Joined into bytes, then copied by kio into a buffer, then that
    buffer copied out, every archived byte was copied three times before it reached the socket
    (measured: most of the gateway's time encoding an archived answer)."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces: list[memoryview] | tuple[memoryview, ...]) -> None:
        self.pieces = tuple(pieces)
        self.size = sum(len(p) for p in self.pieces)

    def __len__(self) -> int:
        return self.size


class _ChunkWriter:
    """What kio writes an entity to: small writes gathered, a :class:`RecordsRef` kept as it is."""

    def __init__(self) -> None:
        self.chunks: Chunks = []
        self._small = bytearray()

    def write(self, data: bytes | RecordsRef) -> int:
        if isinstance(data, RecordsRef):
            self._flush()
            self.chunks.extend(data.pieces)
            return data.size
        self._small += data
        return len(data)

    def _flush(self) -> None:
        if self._small:
            self.chunks.append(bytes(self._small))
            self._small = bytearray()

    def done(self) -> Chunks:
        self._flush()
        return self.chunks


def encode_response_chunks(correlation_id: int, body: Any) -> Chunks:
    """:func:`encode_response` as chunks, the ``records`` given as :class:`RecordsRef` not copied."""
    schema = type(body)
    chunks = _ChunkWriter()
    buf = cast(IO[bytes], chunks)  # kio only calls write()
    entity_writer(schema.__header_schema__)(buf, schema.__header_schema__(correlation_id=correlation_id))
    entity_writer(schema)(buf, body)
    return chunks.done()


def answer_size(answer: Answer) -> int:
    return sum(len(c) for c in answer) if isinstance(answer, list) else len(answer)


def produce_acks(frame: bytes | memoryview) -> int | None:
    """A Produce request's ``acks`` without decoding its records (None: not readable, so an answer
    is awaited). After the header (read by its schema): v3+ ``transactional_id`` (int16 length, -1
    null; v9+ flexible: uvarint length + 1, 0 null), then ``int16 acks``."""
    head = request_head(frame)
    try:
        schema = load_request_schema(API_PRODUCE, head.api_version)
        _header, pos = entity_reader(schema.__header_schema__)(frame, 0)
        if head.api_version >= 9:
            length, shift = 0, 0
            while True:
                byte = frame[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                shift += 7
                if not byte & 0x80:
                    break
            pos += max(length - 1, 0)
        elif head.api_version >= 3:
            (length,) = struct.unpack_from(">h", frame, pos)
            pos += 2 + max(length, 0)
        (acks,) = struct.unpack_from(">h", frame, pos)
    except Exception:  # kio lacks the version, or the bytes end early: an answer is awaited
        return None
    return int(acks)


def response_schema(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


def request_schema(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)
