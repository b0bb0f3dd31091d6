"""The gateway's gathering writer over real loopback sockets: answers of many pieces arrive whole and
in order while the reader is slower than the writer (the socket fills again and again), only small
chunks go through the transport's buffer (not the answer), a TLS connection is written through the
transport as before, and a peer that goes away fails the write instead of hanging it."""

from __future__ import annotations

import asyncio
import os
import ssl
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from processor.gateway.socket_writer import CHUNK, GatheringWriter


def _answer(seed: int, pieces: int, size: int) -> list[bytes | memoryview]:
    data = os.urandom(pieces * size)
    view = memoryview(data)
    out: list[bytes | memoryview] = [b"head-%d" % seed]
    out.extend(view[i * size : (i + 1) * size] for i in range(pieces))
    return out


@asynccontextmanager
async def _pair(
    ssl_server: ssl.SSLContext | None = None, ssl_client: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[asyncio.StreamWriter, asyncio.StreamReader]]:
    """A server-side writer (as the gateway's client connection has) and the client's reader."""
    accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()

    async def serve(_reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.set_result(writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=ssl_server)
    port = server.sockets[0].getsockname()[1]
    reader, client_writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ssl_client, server_hostname="localhost" if ssl_client else None
    )
    writer = await accepted
    try:
        yield writer, reader
    finally:
        writer.close()
        client_writer.close()
        server.close()
        await server.wait_closed()


async def _slow_read(reader: asyncio.StreamReader, total: int) -> bytes:
    got = bytearray()
    while len(got) < total:
        got += await reader.read(256 * 1024)
        await asyncio.sleep(0.001)  # slower than the writer: the socket fills
    return bytes(got)


def _run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 60))


def test_answers_of_many_pieces_arrive_whole_and_in_order_through_a_full_socket() -> None:
    answers = [_answer(n, 200, 40_000) for n in range(3)]  # 8 MB each, far more than a socket holds
    expected = b"".join(bytes(p) for a in answers for p in a)

    async def body() -> None:
        async with _pair() as (writer, reader):
            out = GatheringWriter(writer)
            handed: list[int] = []
            transport_write = writer.transport.write

            def counted(data: bytes | bytearray | memoryview) -> None:
                handed.append(len(data))
                transport_write(data)

            writer.transport.write = counted  # type: ignore[method-assign]  # counts, still writes
            reading = asyncio.ensure_future(_slow_read(reader, len(expected)))
            for answer in answers:
                await out.write(answer)
            assert await reading == expected
            # the socket filled many times; each time one small chunk went through the transport
            assert handed and max(handed) <= CHUNK
            assert sum(handed) < len(expected) // 4

    _run(body)


def test_a_peer_that_goes_away_fails_the_write() -> None:
    async def body() -> None:
        async with _pair() as (writer, reader):
            out = GatheringWriter(writer)
            reader_transport = reader._transport  # type: ignore[attr-defined]
            reader_transport.abort()  # the client resets the connection
            with pytest.raises((ConnectionError, OSError)):
                for n in range(50):
                    await out.write(_answer(n, 100, 100_000))

    _run(body)


def _tls_contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True,
    )  # fmt: skip
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    client = ssl.create_default_context(cafile=str(cert))
    return server, client


def test_a_tls_connection_is_written_through_its_transport(tmp_path: Path) -> None:
    server_ctx, client_ctx = _tls_contexts(tmp_path)
    answer = _answer(1, 50, 50_000)
    expected = b"".join(bytes(p) for p in answer)

    async def body() -> None:
        async with _pair(server_ctx, client_ctx) as (writer, reader):
            out = GatheringWriter(writer)
            reading = asyncio.ensure_future(_slow_read(reader, len(expected)))
            await out.write(answer)
            assert await reading == expected

    _run(body)
