"""Kafka requests the processor builds itself, encoded (and their answers decoded) by ``kio``, sent
over aiokafka's connections.

``kio`` is the gateway's codec too (:mod:`processor.gateway.protocol`): dataclasses and codecs
generated from Kafka's own JSON message schemas, headers included, so no request layout is written
by hand. aiokafka's client stays the transport: its connections (TLS, SASL), the versions each
broker offers (ApiVersions) and the cluster's metadata. A :class:`KioRequest` is what
``AIOKafkaClient.send`` takes: it picks the highest version the broker, ``kio`` and the caller all
have, and its answer arrives as bytes (:class:`RawAnswer`) that :func:`send` decodes outside the
connection's reader, so an answer ``kio`` refuses (an error code or a tagged field its schemas do not
describe) fails that request alone (:class:`AnswerNotDecoded`), not the connection and every request
in flight on it.
"""

from __future__ import annotations

import io
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from aiokafka import errors as kafka_errors
from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import i16, i32

# Builds the request's body from the kio module of the chosen version (its nested classes live in
# the same module as the request's) and the version itself.
Build = Callable[[ModuleType, int], Any]


class AnswerNotDecoded(kafka_errors.KafkaError):  # type: ignore[misc]  # aiokafka is untyped
    """A broker's answer that ``kio`` cannot decode (a field or an error code its schemas lack)."""


def kio_versions(api_key: int) -> frozenset[int]:
    """The versions of ``api_key`` kio has both a request and a response schema for."""
    versions = schema_name_map.get(api_key_map.get(api_key, ""), {})
    return frozenset(
        v
        for v, entities in versions.items()
        if EntityType.request in entities and EntityType.response in entities
    )


@dataclass(frozen=True, slots=True)
class RawAnswer:
    """An answer's body as the connection read it, decoded by :func:`decode_answer`."""

    api_key: int
    api_version: int
    body: bytes


class _AnswerBytes:
    """What aiokafka's connection decodes an answer's body with (``RESPONSE_TYPE.decode``)."""

    def __init__(self, api_key: int, api_version: int) -> None:
        self.api_key = api_key
        self.api_version = api_version

    def decode(self, data: io.BytesIO) -> RawAnswer:
        return RawAnswer(self.api_key, self.api_version, data.read())


class _Header:
    def __init__(self, data: bytes) -> None:
        self._data = data

    def encode(self) -> bytes:
        return self._data


class PreparedRequest:
    """One request at one version, as aiokafka's connection sends it: the header and the body are
    kio's encodings, the answer's header is read by kio, its body kept as bytes."""

    def __init__(self, body: Any) -> None:
        self.body = body
        self.API_KEY = int(body.__api_key__)
        self.API_VERSION = int(body.__version__)
        self.RESPONSE_TYPE = _AnswerBytes(self.API_KEY, self.API_VERSION)

    def build_request_header(self, correlation_id: int, client_id: str) -> _Header:
        schema = type(self.body).__header_schema__
        header = schema(
            request_api_key=i16(self.API_KEY),
            request_api_version=i16(self.API_VERSION),
            correlation_id=i32(correlation_id),
            client_id=client_id,
        )
        buf = io.BytesIO()
        entity_writer(schema)(buf, header)
        return _Header(buf.getvalue())

    def encode(self) -> bytes:
        buf = io.BytesIO()
        entity_writer(type(self.body))(buf, self.body)
        return buf.getvalue()

    def parse_response_header(self, data: io.BytesIO) -> Any:
        schema = load_response_schema(self.API_KEY, self.API_VERSION).__header_schema__
        start = data.tell()
        # a read-only view of the answer (no copy), released before the body is read
        with data.getbuffer() as view, view[start:] as tail, tail.toreadonly() as rest:
            header, used = entity_reader(schema)(rest, 0)
        data.seek(start + used)
        return header

    def __repr__(self) -> str:  # aiokafka's debug log names each request it sends
        return repr(self.body)


class KioRequest:
    """A request for ``AIOKafkaClient.send``: built at the highest of ``versions`` that the broker
    offers (and kio describes), by ``build``."""

    def __init__(self, api_key: int, versions: Sequence[int], build: Build) -> None:
        self.API_KEY = api_key
        self.versions = tuple(sorted(set(versions) & kio_versions(api_key)))
        self.build = build

    def prepare(self, broker_versions: dict[int, tuple[int, int]]) -> PreparedRequest:
        """The request at the version to send (aiokafka calls this with the broker's ApiVersions)."""
        if self.API_KEY not in broker_versions:
            raise kafka_errors.IncompatibleBrokerVersion(f"the broker does not offer api {self.API_KEY}")
        low, high = broker_versions[self.API_KEY]
        usable = [v for v in self.versions if low <= v <= high]
        if not usable:
            raise kafka_errors.IncompatibleBrokerVersion(
                f"api {self.API_KEY}: the broker offers versions {low}-{high}, this request is built "
                f"for {', '.join(map(str, self.versions))}"
            )
        return self.at(usable[-1])

    def at(self, version: int) -> PreparedRequest:
        schema = load_request_schema(self.API_KEY, version)
        return PreparedRequest(self.build(sys.modules[schema.__module__], version))


def decode_answer(raw: RawAnswer) -> Any:
    """The answer's body as kio's dataclass of its schema; AnswerNotDecoded when kio refuses it."""
    try:
        schema = load_response_schema(raw.api_key, raw.api_version)
        body, used = entity_reader(schema)(raw.body, 0)
    except Exception as exc:  # kio raises its own errors, and ValueError/KeyError on what it lacks
        raise AnswerNotDecoded(
            f"cannot decode the answer to api {raw.api_key} v{raw.api_version}: {exc}"
        ) from None
    if used != len(raw.body):
        raise AnswerNotDecoded(
            f"the answer to api {raw.api_key} v{raw.api_version} has {len(raw.body) - used} bytes left over"
        )
    return body


async def send(client: Any, node_id: int, request: KioRequest) -> Any:
    """Send ``request`` to ``node_id`` through aiokafka's client and decode its answer."""
    raw: RawAnswer = await client.send(node_id, request)
    return decode_answer(raw)
