"""Client connections of the gateway over real sockets, with a scripted broker behind them: requests
it does not change pass as bytes with the client's correlation id; a frame it cannot handle closes
that one connection and no other; a client that vanishes mid-request leaves the gateway serving."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from processor.gateway.connection import ClientConnection
from processor.gateway.protocol import framed
from processor.gateway.rewrite import PortMap
from processor.gateway.state import Archive, GatewayState
from processor.gateway.upstream import Upstream, read_frame


async def _broker(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Answers every request with its correlation id and b"answer:" + the request's api key."""
    try:
        while (frame := await read_frame(reader)) is not None:
            key = struct.unpack_from(">h", frame, 0)[0]
            writer.write(framed(frame[4:8] + b"answer:%d" % key))
            await writer.drain()
    finally:
        writer.close()


@asynccontextmanager
async def _gateway() -> AsyncIterator[int]:
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
            GatewayState("archived"),
            archive,
            PortMap("127.0.0.1", 1),
            lambda *a: None,
            ready,
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


def _run(test: Callable[[int], Awaitable[None]]) -> None:
    async def main() -> None:
        async with _gateway() as port:
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
