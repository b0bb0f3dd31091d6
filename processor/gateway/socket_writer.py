"""Writing an answer's pieces to a client socket without copying them in Python.

An archived Fetch answer is a list of pieces: small encoded parts and the record batches by reference
(views of what S3 or the block cache returned). ``StreamWriter.write`` sends what the socket takes at
once and copies the rest into the transport's buffer (Python 3.11's selector transport; 3.12's
``writelines`` gathers, 3.11's joins first): measured on an archived read of 1 KiB records, most
bytes of a large answer went through that buffer, a copy of every byte in Python on top of the
kernel's own.

Here, on a plain TCP connection, the pieces go to the socket with ``os.writev`` (gathered, as many
as the kernel takes) while the transport's buffer is empty. When the socket is full, one small chunk
(``CHUNK`` bytes at most) is handed to the transport, which copies it and waits for the socket to
take it (``drain`` with a write-buffer bound of 0 waits until its buffer is empty), and gathering
writes go on from there: what is copied is at most one chunk per time the socket fills, not the
answer. The transport keeps owning the socket (its reads, closing, errors): nothing is written to the
socket directly while its buffer holds anything, or once it is closing.

A TLS connection (the transport encrypts into its own buffers anyway) is written as before, piece
by piece through the transport.

Written here rather than taken from a library: asyncio on 3.11 has no gathering write, and this is
a loop around ``os.writev`` within the transport's own flow control.
"""

from __future__ import annotations

import asyncio
import os

CHUNK = 64 * 1024  # bytes handed to the transport (copied) when the socket is full
IOV_MAX = 1024  # Linux's limit on the buffers of one writev


class GatheringWriter:
    """Writes answers' pieces to ``writer``'s socket (see the module's docstring)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        transport = writer.transport
        sock = transport.get_extra_info("socket")
        plain = transport.get_extra_info("sslcontext") is None and sock is not None
        self._fd: int | None = sock.fileno() if plain and hasattr(os, "writev") else None
        if self._fd is not None:
            # drain() returns once the transport's buffer is empty, not merely below 64 KiB
            transport.set_write_buffer_limits(high=0, low=0)

    async def write(self, pieces: list[bytes | memoryview]) -> None:
        if self._fd is None:
            for piece in pieces:
                self.writer.write(piece)
            await self.writer.drain()
            return
        views = [memoryview(p).cast("B") for p in pieces if len(p)]
        transport = self.writer.transport
        while views:
            if transport.get_write_buffer_size():
                await self.writer.drain()
            if transport.is_closing():
                raise ConnectionResetError("the client connection is closing")
            try:
                # no await since is_closing(): the transport cannot have closed the socket meanwhile
                sent = os.writev(self._fd, views[:IOV_MAX])
            except (BlockingIOError, InterruptedError):
                sent = 0
            full = _consume(views, sent)
            if views and full:
                # the socket took less than offered: it is full. The transport waits for it to take
                # one small chunk (copied), and says when by emptying its buffer.
                head = views[0][:CHUNK]
                transport.write(head)
                _consume(views, len(head))
        if transport.get_write_buffer_size():
            await self.writer.drain()


def _consume(views: list[memoryview], sent: int) -> bool:
    """Drop the first ``sent`` bytes of ``views`` (in place); True when they were fewer than the
    bytes of the first ``IOV_MAX`` views (the socket is full)."""
    offered = sum(len(v) for v in views[:IOV_MAX])
    taken = 0
    while views and sent - taken >= len(views[0]):
        taken += len(views.pop(0))
    if views and sent > taken:
        views[0] = views[0][sent - taken :]
    return sent < offered
