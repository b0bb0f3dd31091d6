"""The upstream's frame receiver: whatever pieces the socket hands it (a byte at a time, many frames
at once, a large frame across many reads), it hands on exactly the frames sent, in order; a frame
over the limit or a stream cut inside a frame ends it with a ProtocolError."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.gateway.protocol import ProtocolError
from processor.gateway.upstream import FrameReceiver

SCRATCH = FrameReceiver.SCRATCH


class _Received:
    def __init__(self, limit: int = 100 * 1024 * 1024) -> None:
        self.frames: list[bytes] = []
        self.ended: list[BaseException | None] = []
        self.protocol = FrameReceiver(limit)
        self.protocol.attach(lambda f: self.frames.append(bytes(f)), self.ended.append)

    def feed(self, data: bytes) -> None:
        """``data`` as the event loop hands it over: into the buffers the protocol offers."""
        pos = 0
        while pos < len(data) and not self.ended:
            buf = self.protocol.get_buffer(-1)
            n = min(len(buf), len(data) - pos)
            assert n > 0, "the protocol offered an empty buffer"
            buf[:n] = data[pos : pos + n]
            self.protocol.buffer_updated(n)
            pos += n


def _framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


sizes = st.one_of(st.integers(0, 64), st.integers(SCRATCH - 8, SCRATCH + 8), st.integers(0, 3 * SCRATCH))


@settings(max_examples=80, deadline=None)
@given(st.lists(sizes, max_size=8), st.data())
def test_every_frame_comes_out_whole_whatever_the_reads(frame_sizes: list[int], data: st.DataObject) -> None:
    frames = [bytes([i % 251]) * n for i, n in enumerate(frame_sizes)]
    stream = b"".join(map(_framed, frames))
    received = _Received()
    pos = 0
    while pos < len(stream):
        step = data.draw(st.one_of(st.integers(1, 8), st.integers(1, 2 * SCRATCH)))
        received.feed(stream[pos : pos + step])
        pos += step
    assert received.frames == frames
    received.protocol.connection_lost(None)
    assert len(received.ended) == 1 and received.ended[0] is None


def test_a_frame_over_the_limit_ends_the_stream() -> None:
    received = _Received(limit=1000)
    received.feed(_framed(b"ok") + struct.pack(">i", 1001) + bytes(10))
    assert received.frames == [b"ok"]
    assert isinstance(received.ended[0], ProtocolError)


def test_a_negative_size_ends_the_stream() -> None:
    received = _Received()
    received.feed(struct.pack(">i", -5))
    assert isinstance(received.ended[0], ProtocolError)


def test_a_stream_cut_inside_a_frame_ends_with_a_protocol_error() -> None:
    for cut in (2, 4 + 10, 4 + SCRATCH + 5):
        received = _Received()
        received.feed(_framed(bytes(2 * SCRATCH))[:cut])
        received.protocol.connection_lost(None)
        assert received.frames == []
        assert isinstance(received.ended[0], ProtocolError)


def test_frames_that_arrive_before_the_owner_attaches_are_kept_for_it() -> None:
    protocol = FrameReceiver()
    buf = protocol.get_buffer(-1)
    data = _framed(b"early")
    buf[: len(data)] = data
    protocol.buffer_updated(len(data))
    got: list[bytes] = []
    protocol.attach(lambda f: got.append(bytes(f)), lambda exc: None)
    assert got == [b"early"]
