"""One connection to an upstream broker, shared by a client connection and the gateway's own requests.

Requests are written in order and a reader task matches each answer to its request by correlation
id, so the gateway can put requests of its own (ListOffsets for a partition it answers from the
archive) on the same connection. A request keeps its correlation id unless a request in flight
already has it (then it gets a free one, and its own is restored on the answer): rewriting every id
copied every request and every answer once more (an answer can be 55 MiB). A
connection that fails fails every request waiting on it (the client connection then closes: a
Kafka client reconnects and retries, as after a broker restart).

Answers are received by a buffered protocol (:class:`FrameReceiver`) into a buffer of their own size, so
the kernel copies an answer once, into the buffer that is handed on as a read-only view. A
StreamReader copied every byte twice more (into its buffer, then out of it with readexactly):
measured, 22% of the gateway's time on live reads.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import ssl
from collections.abc import Callable

from processor.gateway.protocol import (
    MAX_FRAME_BYTES,
    SIZE,
    ProtocolError,
    response_correlation_id,
    with_correlation_id,
)

log = logging.getLogger(__name__)


class FrameTimeout(ProtocolError):
    """A frame that began to arrive and did not arrive whole in time."""


async def read_frame(
    reader: asyncio.StreamReader, limit: int = MAX_FRAME_BYTES, whole_within_s: float | None = None
) -> bytes | None:
    """One frame's payload; None at a clean end of stream (no byte of a next frame). With
    ``whole_within_s``, a frame whose first byte arrived must arrive whole within that many seconds
    (:class:`FrameTimeout`): a peer that stops mid-frame would otherwise hold the connection forever.
    Waiting for a frame's first byte has no deadline."""
    try:
        first = await reader.readexactly(1)
    except asyncio.IncompleteReadError:
        return None
    try:
        async with asyncio.timeout(whole_within_s):
            try:
                head = first + await reader.readexactly(SIZE.size - 1)
            except asyncio.IncompleteReadError:
                raise ProtocolError("connection closed inside a frame's size") from None
            (size,) = SIZE.unpack(head)
            if size < 0 or size > limit:
                raise ProtocolError(f"frame of {size} bytes (the limit is {limit})")
            try:
                return await reader.readexactly(size)
            except asyncio.IncompleteReadError:
                raise ProtocolError("connection closed inside a frame") from None
    except TimeoutError:
        raise FrameTimeout(f"a frame began to arrive and was not whole within {whole_within_s:g} s") from None


class FrameReceiver(asyncio.BufferedProtocol):
    """Frames from a socket, each received into its own buffer once its size is known.

    Until a frame's size and first bytes are in, the socket is read into a small scratch buffer,
    from which whole small frames are copied out (one recv for many small answers); a frame longer
    than what the scratch holds gets a buffer of its size, and the socket is read straight into it.
    The owner's ``on_frame`` (given by :meth:`attach`) gets each frame's payload as a read-only
    view; its ``on_end`` the reason the stream ended (None: closed by the peer at a frame boundary).
    What arrives before the owner attaches is kept for it."""

    SCRATCH = 64 * 1024

    def __init__(self, limit: int = MAX_FRAME_BYTES) -> None:
        self._limit = limit
        self._early: list[tuple[memoryview | None, BaseException | None]] = []
        self._on_frame: Callable[[memoryview], None] = lambda frame: self._early.append((frame, None))
        self._on_end: Callable[[BaseException | None], None] = lambda exc: self._early.append((None, exc))
        self._scratch = bytearray(self.SCRATCH)
        self._frame: bytearray | None = None  # the frame being received (its size known)
        self._filled = 0  # bytes received of _frame, or (no frame) bytes held in _scratch
        self.transport: asyncio.Transport | None = None
        self._paused = False
        self._resumed: list[asyncio.Future[None]] = []

    def attach(
        self, on_frame: Callable[[memoryview], None], on_end: Callable[[BaseException | None], None]
    ) -> None:
        self._on_frame, self._on_end = on_frame, on_end
        early, self._early = self._early, []
        for frame, exc in early:
            if frame is not None:
                on_frame(frame)
            else:
                on_end(exc)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._frame is not None:
            return memoryview(self._frame)[self._filled :]
        return memoryview(self._scratch)[self._filled :]

    def buffer_updated(self, nbytes: int) -> None:
        self._filled += nbytes
        if self._frame is not None:
            if self._filled == len(self._frame):
                frame, self._frame, self._filled = self._frame, None, 0
                self._on_frame(memoryview(frame).toreadonly())
            return
        try:
            self._split_scratch()
        except ProtocolError as exc:
            self._frame, self._filled = None, 0
            if self.transport is not None:
                self.transport.abort()  # connection_lost follows, with no exception: end with this one
            self._on_end(exc)

    def _split_scratch(self) -> None:
        view = memoryview(self._scratch)
        pos = 0
        while self._filled - pos >= SIZE.size:
            (size,) = SIZE.unpack_from(view, pos)
            if size < 0 or size > self._limit:
                raise ProtocolError(f"frame of {size} bytes (the limit is {self._limit})")
            have = self._filled - pos - SIZE.size
            start = pos + SIZE.size
            if have >= size:
                pos = start + size
                self._on_frame(memoryview(bytes(view[start:pos])))
                continue
            if size > len(self._scratch) - SIZE.size:  # received into a buffer of its own from here
                frame = bytearray(size)
                frame[:have] = view[start : self._filled]
                self._frame, self._filled = frame, have
                return
            break
        rest = self._filled - pos
        if pos and rest:
            self._scratch[:rest] = bytes(view[pos : self._filled])
        self._filled = rest

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost says how the stream ended

    def connection_lost(self, exc: Exception | None) -> None:
        if exc is None and (self._frame is not None or self._filled):
            exc = ProtocolError("connection closed inside a frame")
        self._on_end(exc)
        self._resume(exc)

    def pause_writing(self) -> None:
        self._paused = True

    def resume_writing(self) -> None:
        self._resume(None)

    def _resume(self, exc: BaseException | None) -> None:
        self._paused = False
        waiters, self._resumed = self._resumed, []
        for waiter in waiters:
            if not waiter.done():
                if exc is None:
                    waiter.set_result(None)
                else:
                    waiter.set_exception(ConnectionError(str(exc)))

    async def drain(self) -> None:
        """Wait while the transport's write buffer is over its high-water mark."""
        if self.transport is not None and self.transport.is_closing():
            await asyncio.sleep(0)  # let connection_lost run
        if self._paused:
            waiter = asyncio.get_running_loop().create_future()
            self._resumed.append(waiter)
            await waiter


class Upstream:
    """A pipelined connection to one broker."""

    def __init__(self, transport: asyncio.Transport, frames: FrameReceiver, name: str) -> None:
        self.transport, self.frames, self.name = transport, frames, name
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[memoryview | bytes]] = {}
        self._restore: dict[int, int] = {}  # our correlation id -> the request's own
        self._failure: BaseException | None = None
        self._ended = asyncio.get_running_loop().create_future()
        frames.attach(self._answer, self._end)

    @property
    def failed(self) -> bool:
        return self._failure is not None

    @classmethod
    async def open(cls, host: str, port: int, tls: ssl.SSLContext | None, timeout_s: float) -> Upstream:
        loop = asyncio.get_running_loop()
        transport, frames = await asyncio.wait_for(
            loop.create_connection(FrameReceiver, host, port, ssl=tls), timeout_s
        )
        return cls(transport, frames, f"{host}:{port}")

    def send_unanswered(self, request: bytes) -> None:
        """Write a request Kafka answers with nothing (a Produce with acks=0)."""
        if self._failure is not None:
            raise ConnectionError(f"upstream {self.name} failed: {self._failure}")
        self._write(request)

    def send(self, request: bytes) -> asyncio.Future[memoryview | bytes]:
        """Write ``request`` (a whole request, header first) now; the future holds its answer, with
        the request's own correlation id."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[memoryview | bytes] = loop.create_future()
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
        self.transport.write(SIZE.pack(len(request)))
        self.transport.write(request)

    async def drain(self) -> None:
        await self.frames.drain()

    def _answer(self, frame: memoryview) -> None:
        if self._failure is not None:
            return
        try:
            ours = response_correlation_id(frame)
        except ProtocolError as exc:
            self._broken(exc)
            return
        answer = self._waiting.pop(ours, None)
        theirs = self._restore.pop(ours, None)
        if answer is None:
            self._broken(ProtocolError(f"answer with correlation id {ours} that no request has"))
            return
        if not answer.done():
            answer.set_result(frame if theirs is None else with_correlation_id(frame, theirs, 0))

    def _broken(self, exc: BaseException) -> None:
        self.transport.abort()
        self._end(exc)

    def _end(self, exc: BaseException | None) -> None:
        if not self._ended.done():
            self._ended.set_result(None)
        if self._failure is None:
            self._fail(exc if exc is not None else ConnectionError("closed by the broker"))

    def _fail(self, exc: BaseException) -> None:
        self._failure = exc
        for answer in self._waiting.values():
            if not answer.done():
                answer.set_exception(ConnectionError(f"upstream {self.name}: {exc}"))
        self._waiting.clear()
        self._restore.clear()

    async def close(self) -> None:
        if self._failure is None:
            self._fail(ConnectionError("gateway connection closed"))
        self.transport.close()
        try:
            await asyncio.wait_for(asyncio.shield(self._ended), CLOSE_TIMEOUT_S)
        except TimeoutError:
            log.debug("upstream %s did not close in %s s: aborted", self.name, CLOSE_TIMEOUT_S)
            self.transport.abort()


CLOSE_TIMEOUT_S = 5.0
