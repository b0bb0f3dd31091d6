"""Client connections of the gateway over real sockets, with a scripted broker behind them: requests
it does not change pass as bytes with the client's correlation id; a frame it cannot handle closes
that one connection and no other; a client that vanishes mid-request leaves the gateway serving; one
that stops mid-request is dropped after the request deadline; an API key nobody knows is refused in
one log line, and metrics never name it."""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
from prometheus_client import REGISTRY

from processor.gateway.address_rewrite import PortMap
from processor.gateway.client_connection import ClientConnection
from processor.gateway.protocol import framed
from processor.gateway.state import Archive, GatewayState, ReadMode
from processor.gateway.upstream import Upstream, read_frame

BROKER_SAW: list[int] = []  # the API keys of the requests the scripted broker received


async def _broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request with its correlation id and b"answer:" + the request's api key."""
    try:
        while (frame := await read_frame(reader)) is not None:
            key = struct.unpack_from(">h", frame, 0)[0]
            BROKER_SAW.append(key)
            writer.write(framed(frame[4:8] + b"answer:%d" % key))
            await writer.drain()
    finally:
        writer.close()


@asynccontextmanager
async def _gateway(request_timeout_s: float = 30.0) -> AsyncIterator[int]:
    broker = await asyncio.start_server(_broker, "127.0.0.1", 0)
    broker_port = broker.sockets[0].getsockname()[1]

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = await Upstream.open("127.0.0.1", broker_port, None, 5)
        archive = Archive(lambda *a: None, lambda tp: None, lambda tp, ts: None)

        async def ready() -> None:
            return None

        await ClientConnection(
            (reader, writer),
            upstream,
            GatewayState(ReadMode.ARCHIVED),
            archive,
            PortMap("127.0.0.1", 1),
            lambda *a: None,
            ready,
            request_timeout_s=request_timeout_s,
        ).run()

    gateway = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield gateway.sockets[0].getsockname()[1]
    finally:
        gateway.close()
        broker.close()


def _request(api_key: int, correlation_id: int, body: bytes = b"") -> bytes:
    return framed(struct.pack(">hhih", api_key, 0, correlation_id, -1) + body)


async def _closed(reader: asyncio.StreamReader) -> bool:
    return await asyncio.wait_for(reader.read(), 10) == b""


def _run(test: Callable[[int], Awaitable[None]], request_timeout_s: float = 30.0) -> None:
    async def main() -> None:
        async with _gateway(request_timeout_s) as port:
            await test(port)

    asyncio.run(main())


def test_requests_it_does_not_change_pass_as_bytes_in_order_with_their_correlation_ids() -> None:
    async def test(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for corr, key in ((7, 8), (8, 9), (9, 12)):  # OffsetCommit, OffsetFetch, Heartbeat
            writer.write(_request(key, corr))
        answers = [await read_frame(reader) for _ in range(3)]
        assert answers == [struct.pack(">i", c) + b"answer:%d" % k for c, k in ((7, 8), (8, 9), (9, 12))]
        writer.close()

    _run(test)


def test_a_frame_it_cannot_handle_closes_that_connection_only() -> None:
    async def test(port: int) -> None:
        good_reader, good_writer = await asyncio.open_connection("127.0.0.1", port)
        for bad in (
            struct.pack(">i", 200 * 1024 * 1024),  # a frame larger than any request may be
            _request(1, 5, b"\xff" * 9),  # a Fetch that does not decode
            struct.pack(">i", 2) + b"\x00\x01",  # a request without a header
        ):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(bad)
            await writer.drain()
            assert await _closed(reader)
            good_writer.write(_request(8, 11))
            assert await read_frame(good_reader) == struct.pack(">i", 11) + b"answer:8"
        good_writer.close()

    _run(test)


def test_a_client_that_vanishes_mid_request_leaves_the_gateway_serving() -> None:
    async def test(port: int) -> None:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(8, 1)[:7])  # half a frame, then gone
        await writer.drain()
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(8, 2))
        assert await read_frame(reader) == struct.pack(">i", 2) + b"answer:8"
        writer.close()

    _run(test)


def test_requests_in_flight_with_one_correlation_id_each_get_their_own_answer() -> None:
    """A request keeps its correlation id on the way up unless one in flight has it (the gateway's
    own requests use 0, as a client may too): then it travels under a free id, and the answer comes
    back under its own."""

    async def main() -> None:
        seen: list[int] = []

        async def broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            frames = [await read_frame(reader) for _ in range(3)]
            for frame in reversed(frames):  # answered out of order: matched by id, not by position
                assert frame is not None
                seen.append(struct.unpack_from(">i", frame, 4)[0])
                writer.write(framed(frame[4:8] + frame[8:]))
            await writer.drain()
            writer.close()

        server = await asyncio.start_server(broker, "127.0.0.1", 0)
        upstream = await Upstream.open("127.0.0.1", server.sockets[0].getsockname()[1], None, 5)
        requests = [struct.pack(">hhih", 8, 0, 0, -1) + b"client-%d" % i for i in range(3)]
        answers = [upstream.send(r) for r in requests]
        got = await asyncio.wait_for(asyncio.gather(*answers), 10)
        assert got == [struct.pack(">i", 0) + b"\xff\xffclient-%d" % i for i in range(3)]
        assert sorted(seen)[0] == 0 and len(set(seen)) == 3  # the first kept its id, the others not
        await upstream.close()
        server.close()

    asyncio.run(main())


def _errors(api: str, kind: str) -> float:
    return REGISTRY.get_sample_value("processor_gateway_errors_total", {"api": api, "kind": kind}) or 0.0


def test_a_client_that_stops_mid_request_is_dropped_after_the_request_deadline() -> None:
    """14 bytes of a 104-byte frame, then nothing: the connection is closed once the deadline for a
    request to arrive whole has passed (counted), while one that sends nothing stays open and one
    whose request arrives in slow pieces within the deadline is answered."""
    before = _errors("unknown", "request_timeout")

    async def test(port: int) -> None:
        idle_reader, idle_writer = await asyncio.open_connection("127.0.0.1", port)
        slow_reader, slow_writer = await asyncio.open_connection("127.0.0.1", port)
        stuck_reader, stuck_writer = await asyncio.open_connection("127.0.0.1", port)
        frame = _request(8, 3, b"x" * 90)
        assert len(frame) == 104
        stuck_writer.write(frame[:14])
        started = time.monotonic()
        for piece in (frame[:5], frame[5:60], frame[60:]):  # whole within the deadline
            slow_writer.write(piece)
            await slow_writer.drain()
            await asyncio.sleep(0.3)
        assert await asyncio.wait_for(read_frame(slow_reader), 5) == struct.pack(">i", 3) + b"answer:8"
        assert await _closed(stuck_reader)
        assert 1.0 <= time.monotonic() - started < 5
        assert _errors("unknown", "request_timeout") == before + 1
        assert not idle_reader.at_eof()  # no byte sent: no deadline
        idle_writer.write(_request(8, 4))
        assert await asyncio.wait_for(read_frame(idle_reader), 5) == struct.pack(">i", 4) + b"answer:8"
        for writer in (idle_writer, slow_writer, stuck_writer):
            writer.close()

    _run(test, request_timeout_s=1.0)


def test_an_api_key_nobody_knows_is_refused_in_one_line_and_metrics_do_not_name_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """API key 999: not forwarded, the connection closed, one WARNING line naming the key (no
    traceback, no "broker closed"), and the request and error metrics count it as ``unknown``."""
    BROKER_SAW.clear()
    before = _errors("unknown", "unknown_api")

    async def test(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(_request(8, 1) + _request(999, 2) + _request(9, 3))
        await writer.drain()
        assert await read_frame(reader) == struct.pack(">i", 1) + b"answer:8"  # the one before it
        assert await _closed(reader)
        writer.close()

    with caplog.at_level(logging.DEBUG, logger="processor.gateway"):
        _run(test)
    assert BROKER_SAW == [8]
    assert _errors("unknown", "unknown_api") == before + 1
    for name in ("processor_gateway_requests_total", "processor_gateway_errors_total"):
        labels = {s.labels.get("api") for m in REGISTRY.collect() if m.name + "_total" == name
                  for s in m.samples}  # fmt: skip
        assert "999" not in labels
    assert REGISTRY.get_sample_value("processor_gateway_requests_total", {"api": "unknown"})
    lines = [r for r in caplog.records if "999" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in caplog.records]
    assert lines[0].levelno == logging.WARNING and lines[0].exc_info is None
    assert "API key 999" in lines[0].getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
