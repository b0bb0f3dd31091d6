"""One client connection: its requests read in order, answered in order, at most ``MAX_IN_FLIGHT``
at a time and ``MAX_REQUEST_BYTES`` of requests (the reader waits, so one client's memory is bounded
by its in-flight frames; answers are bounded by the Fetch limits).

Each request is handled by API: the ones the gateway changes (ApiVersions, Metadata,
FindCoordinator, DescribeCluster, Fetch, ListOffsets) through :mod:`processor.gateway.address_rewrite` and
:mod:`processor.gateway.fetch_answers`; every other request goes to the upstream broker as bytes
and its answer comes back as bytes. A Produce with ``acks=0`` has no answer (Kafka sends none).
A frame the gateway cannot handle, or an upstream that fails, closes this connection only; so do a
request that began to arrive and is not whole within ``request_timeout_s`` (a client that stops
mid-frame would hold its connection forever), and a request with an API key that neither Kafka (as
kio knows it) nor the brokers (their ApiVersions answers) know, which is not forwarded (a broker
closes the connection too). Metrics name API keys only from those known ones (the rest ``unknown``),
so no client can grow their label sets.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
from collections.abc import Awaitable, Callable

from processor import metrics
from processor.gateway.address_rewrite import PortMap, cap_api_versions, rewrite_addresses
from processor.gateway.fetch_access import learn_topic_ids
from processor.gateway.fetch_answers import answer_fetch
from processor.gateway.fetch_walk import fetch_node_endpoints
from processor.gateway.list_offsets import answer_list_offsets
from processor.gateway.protocol import (
    KNOWN_API_KEYS,
    NODE_ENDPOINTS_FROM,
    SIZE,
    Answer,
    Frame,
    ProtocolError,
    answer_size,
    decode_request,
    decode_response,
    encode_response,
    produce_acks,
    request_head,
)
from processor.gateway.socket_writer import GatheringWriter
from processor.gateway.state import Archive, GatewayState, Send
from processor.gateway.upstream import FrameTimeout, Upstream, read_frame
from processor.kafka.api_keys import (
    API_API_VERSIONS,
    API_DESCRIBE_CLUSTER,
    API_FETCH,
    API_FIND_COORDINATOR,
    API_LIST_OFFSETS,
    API_METADATA,
    API_PRODUCE,
)
from processor.kafka.partition import TopicPartition

log = logging.getLogger(__name__)

MAX_IN_FLIGHT = 16
MAX_REQUEST_BYTES = 128 * 1024 * 1024  # request bytes one connection may have in flight
# Seconds a request may take to arrive whole once its first byte has (a client's request.timeout.ms is
# 30 s by default: it has given up on the request by then)
REQUEST_TIMEOUT_S = 30.0
UNKNOWN_API = "unknown"  # the metrics' label for an API key neither Kafka nor the brokers know
_ADDRESSES = (API_METADATA, API_FIND_COORDINATOR, API_DESCRIBE_CLUSTER)


class ClientConnection:
    def __init__(
        self,
        client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
        upstream: Upstream,
        state: GatewayState,
        archive: Archive,
        ports: PortMap,
        learned: Callable[[int, str, int], None],
        listeners_ready: Callable[[], Awaitable[None]],
        own_send: Send | None = None,
        request_timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        self.reader, self.writer = client
        self.upstream = upstream
        self.state, self.archive, self.ports = state, archive, ports
        self.learned, self.listeners_ready = learned, listeners_ready
        self.own_send = own_send  # the gateway's own connection to this broker (None: this one)
        self.request_timeout_s = request_timeout_s
        self.access: dict[TopicPartition, float] = {}  # partitions this client may read, until when
        self._answers: asyncio.Queue[asyncio.Task[Answer | None] | None] = asyncio.Queue(MAX_IN_FLIGHT)
        self._held: collections.deque[tuple[asyncio.Task[Answer | None], int]] = collections.deque()

    async def send(self, request: bytes) -> Frame:
        answer = self.upstream.send(request)
        await self.upstream.drain()
        return await answer

    async def run(self) -> None:
        writer_task = asyncio.create_task(self._write_answers())
        try:
            while True:
                frame = await read_frame(self.reader, whole_within_s=self.request_timeout_s)
                if frame is None:
                    break
                head = request_head(frame)
                api = self._api_label(head.api_key)
                metrics.GATEWAY_REQUESTS.labels(api).inc()
                if api == UNKNOWN_API:
                    metrics.GATEWAY_ERRORS.labels(UNKNOWN_API, "unknown_api").inc()
                    log.warning(
                        "gateway: client %s sent a request with API key %d (v%d), which neither Kafka "
                        "nor the brokers know: connection closed",
                        self._peer(), head.api_key, head.api_version,
                    )  # fmt: skip
                    break
                await self._within_request_bytes(len(frame))
                task = asyncio.create_task(self._answer(head.api_key, frame))
                self._held.append((task, len(frame)))
                if not await self._queue(task, writer_task):
                    task.cancel()
                    break
        except FrameTimeout as exc:
            metrics.GATEWAY_ERRORS.labels(UNKNOWN_API, "request_timeout").inc()
            log.warning("gateway: client %s: %s: connection closed", self._peer(), exc)
        except (ProtocolError, ConnectionError, OSError) as exc:
            log.info("gateway connection closed: %s", exc)
        finally:
            await self._queue(None, writer_task)
            try:
                await writer_task
            except (ProtocolError, ConnectionError, OSError) as exc:
                log.info("gateway connection closed: %s", exc)
            except Exception:  # logged where it happened (_answer): this connection ends, no other
                log.debug("gateway connection closed after a failed request")
            await self.upstream.close()
            self.writer.close()
            with contextlib.suppress(OSError):
                await self.writer.wait_closed()

    def _api_label(self, api_key: int) -> str:
        """The API key as the metrics name it: one Kafka (as kio knows it) or the brokers know, else
        ``unknown``."""
        if api_key in KNOWN_API_KEYS or api_key in self.state.broker_api_keys:
            return str(api_key)
        return UNKNOWN_API

    def _peer(self) -> str:
        peer = self.writer.get_extra_info("peername")
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else str(peer)

    async def _within_request_bytes(self, size: int) -> None:
        """Wait until the requests still being answered hold at most MAX_REQUEST_BYTES with this one
        (the oldest finish first): one client's requests cannot take more of the gateway's memory."""
        while self._held and (
            self._held[0][0].done() or sum(n for _t, n in self._held) + size > MAX_REQUEST_BYTES
        ):
            oldest, _n = self._held[0]
            if not oldest.done():
                await asyncio.wait([oldest])
            self._held.popleft()

    async def _queue(self, task: asyncio.Task[Answer | None] | None, writer_task: asyncio.Task[None]) -> bool:
        """Queue an answer for the writer (waiting while MAX_IN_FLIGHT are queued); False if the
        writer has ended (the connection is closing) before it could take it."""
        if writer_task.done():
            return False
        put = asyncio.ensure_future(self._answers.put(task))
        await asyncio.wait([put, writer_task], return_when=asyncio.FIRST_COMPLETED)
        if not put.done():
            put.cancel()
            return False
        return True

    async def _write_answers(self) -> None:
        out = GatheringWriter(self.writer)
        try:
            while (task := await self._answers.get()) is not None:
                answer = await task
                if answer is not None:
                    await out.write(_framed_pieces(answer))
        except BaseException:
            # the connection is done: the client sees it closed, and reconnects (as after a broker
            # restart); requests still queued are cancelled, not left running
            self.writer.close()
            while not self._answers.empty():
                pending = self._answers.get_nowait()
                if pending is not None:
                    pending.cancel()
            raise

    async def _answer(self, api_key: int, frame: bytes) -> Answer | None:
        try:
            if api_key == API_FETCH:
                fetched = await answer_fetch(
                    frame, self.state, self.archive, self.send, self.own_send, self.access
                )
                return await self._node_endpoints(frame, fetched)
            if api_key == API_LIST_OFFSETS:
                return await answer_list_offsets(frame, self.state, self.archive, self.send)
            if api_key == API_API_VERSIONS:
                return await self._api_versions(frame)
            if api_key in _ADDRESSES:
                return await self._addresses(api_key, frame)
            if api_key == API_PRODUCE and produce_acks(frame) == 0:
                self.upstream.send_unanswered(frame)
                await self.upstream.drain()
                return None
            if api_key == API_PRODUCE:
                return await self._node_endpoints(frame, await self.send(frame))
            return await self.send(frame)
        except ProtocolError as exc:
            metrics.GATEWAY_ERRORS.labels(self._api_label(api_key), "protocol").inc()
            raise ProtocolError(f"api {api_key}: {exc}") from exc
        except Exception:
            metrics.GATEWAY_ERRORS.labels(self._api_label(api_key), "internal").inc()
            log.exception("gateway request (api %d) failed", api_key)
            raise

    async def _api_versions(self, frame: bytes) -> Frame:
        head = request_head(frame)
        raw = await self.send(frame)
        try:
            corr, body = decode_response(API_API_VERSIONS, head.api_version, raw)
        except ProtocolError:
            return raw  # an UNSUPPORTED_VERSION answer (always v0): the client asks again, lower
        if int(body.error_code) != 0:
            return raw
        self.state.broker_api_keys.update(int(entry.api_key) for entry in body.api_keys)
        return encode_response(corr, cap_api_versions(body))

    async def _node_endpoints(self, frame: bytes, answer: Answer) -> Answer:
        """A Fetch or Produce answer passed on from the broker, its node endpoints (broker addresses,
        KIP-951) rewritten to the gateway's. A Fetch answer is decoded only when it names brokers (a
        broker does when a partition's leader moved); the answers the gateway builds name none (a
        client then asks Metadata, as of an older broker)."""
        head = request_head(frame)
        since = NODE_ENDPOINTS_FROM[head.api_key]
        if head.api_version < since or not isinstance(answer, bytes | memoryview):
            return answer
        if head.api_key == API_FETCH and not fetch_node_endpoints(answer, head.api_version):
            return answer
        corr, body = decode_response(head.api_key, head.api_version, answer)
        if not body.node_endpoints:
            return answer
        body = rewrite_addresses(head.api_key, body, self.ports, self.learned)
        await self.listeners_ready()
        return encode_response(corr, body)

    async def _addresses(self, api_key: int, frame: bytes) -> bytes:
        head = request_head(frame)
        decode_request(frame)  # a request the gateway cannot read is not forwarded
        corr, body = decode_response(api_key, head.api_version, await self.send(frame))
        if api_key == API_METADATA:
            learn_topic_ids(self.state, body)
        body = rewrite_addresses(api_key, body, self.ports, self.learned)
        await self.listeners_ready()
        return encode_response(corr, body)


SMALL_PIECE = 64 * 1024


def _framed_pieces(answer: Answer) -> list[bytes | memoryview]:
    """An answer's frame (size, then its bytes) as the pieces to write (gathered into the socket by
    :class:`GatheringWriter`, never joined), the size joined to a small first piece."""
    pieces = answer if isinstance(answer, list) else [answer]
    head = SIZE.pack(answer_size(answer))
    if pieces and len(pieces[0]) < SMALL_PIECE:
        return [head + pieces[0], *pieces[1:]]
    return [head, *pieces]
