"""One connection to an upstream broker, shared by a client connection and the gateway's own requests.

Requests are written in order and a reader task matches each answer to its request by correlation
id, so the gateway can put requests of its own (ListOffsets for a partition it answers from the
archive) on the same connection. A request keeps its correlation id unless a request in flight
already has it (then it gets a free one, and its own is restored on the answer): rewriting every id
copied every request and every answer once more (an answer can be 55 MiB). A
connection that fails fails every request waiting on it (the client connection then closes: a
Kafka client reconnects and retries, as after a broker restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import ssl

from processor.gateway.protocol import (
    MAX_FRAME_BYTES,
    SIZE,
    ProtocolError,
    response_correlation_id,
    with_correlation_id,
)

log = logging.getLogger(__name__)


async def read_frame(reader: asyncio.StreamReader, limit: int = MAX_FRAME_BYTES) -> bytes | None:
    """One frame's payload; None at a clean end of stream (no byte of a next frame)."""
    try:
        head = await reader.readexactly(SIZE.size)
    except asyncio.IncompleteReadError as exc:
        if exc.partial:
            raise ProtocolError("connection closed inside a frame's size") from None
        return None
    (size,) = SIZE.unpack(head)
    if size < 0 or size > limit:
        raise ProtocolError(f"frame of {size} bytes (the limit is {limit})")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise ProtocolError("connection closed inside a frame") from None


class Upstream:
    """A pipelined connection to one broker."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, name: str) -> None:
        self.reader, self.writer, self.name = reader, writer, name
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[bytes]] = {}
        self._restore: dict[int, int] = {}  # our correlation id -> the request's own
        self._failure: BaseException | None = None
        self._task = asyncio.get_running_loop().create_task(self._read_answers())

    @property
    def failed(self) -> bool:
        return self._failure is not None

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None, timeout_s: float) -> Upstream:
        reader, writer = await asyncio.wait_for(
            # a 16 MiB buffer limit: at 1 MiB, reading one fetch answer (up to 55 MiB) paused and
            # resumed the socket every 2 MiB
            asyncio.open_connection(host, port, ssl=tls, limit=16 << 20),
            timeout_s,
        )
        return cls(reader, writer, f"{host}:{port}")

    def send_unanswered(self, request: bytes) -> None:
        """Write a request Kafka answers with nothing (a Produce with acks=0)."""
        if self._failure is not None:
            raise ConnectionError(f"upstream {self.name} failed: {self._failure}")
        self._write(request)

    def send(self, request: bytes) -> asyncio.Future[bytes]:
        """Write ``request`` (a whole request, header first) now; the future holds its answer, with
        the request's own correlation id."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[bytes] = loop.create_future()
        if self._failure is not None:
            answer.set_exception(ConnectionError(f"upstream {self.name} failed: {self._failure}"))
            return answer
        theirs = int.from_bytes(request[4:8], "big", signed=True)
        if theirs in self._waiting:  # taken by a request in flight: this one gets an id of its own
            ours = self._free_id()
            self._restore[ours] = theirs
            request = with_correlation_id(request, ours, 4)
        else:
            ours = theirs
        self._waiting[ours] = answer
        self._write(request)
        return answer

    def _free_id(self) -> int:
        while (ours := next(self._ids) & 0x7FFFFFFF) in self._waiting or ours in self._restore:
            pass
        return ours

    def _write(self, request: bytes) -> None:
        # size and request written apart: joining them copied the request (a Produce can be large)
        self.writer.write(SIZE.pack(len(request)))
        self.writer.write(request)

    async def drain(self) -> None:
        await self.writer.drain()

    async def _read_answers(self) -> None:
        try:
            while True:
                frame = await read_frame(self.reader)
                if frame is None:
                    raise ConnectionError("closed by the broker")
                ours = response_correlation_id(frame)
                answer = self._waiting.pop(ours, None)
                theirs = self._restore.pop(ours, None)
                if answer is None:
                    raise ProtocolError(f"answer with correlation id {ours} that no request has")
                if not answer.done():
                    answer.set_result(frame if theirs is None else with_correlation_id(frame, theirs, 0))
        except asyncio.CancelledError:
            self._fail(ConnectionError("gateway connection closed"))
            raise
        except (OSError, ProtocolError, ConnectionError) as exc:
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(ConnectionError(f"upstream {self.name}: {exc}"))
        self._waiting.clear()
        self._restore.clear()

    async def close(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self.writer.close()
        try:
            await self.writer.wait_closed()
        except OSError as exc:
            log.debug("closing upstream %s: %s", self.name, exc)
