"""ViewsReader: the upload body over several buffers reads as their concatenation, from any
position a retry seeks it back to, without copying them."""

from __future__ import annotations

import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.storage.upload_body import ViewsReader

parts_strategy = st.lists(st.binary(max_size=64), max_size=8).map(
    lambda ps: [bytearray(p) if i % 2 else p for i, p in enumerate(ps)]
)


def _drain(reader: ViewsReader, size: int) -> bytes:
    out = bytearray()
    while piece := reader.read(size):
        assert len(piece) <= size
        out += piece
    return bytes(out)


@settings(max_examples=300, deadline=None)
@given(parts=parts_strategy, size=st.integers(1, 100), start=st.integers(0, 600))
def test_reads_of_any_size_from_any_position_give_the_concatenation(
    parts: list[bytes | bytearray], size: int, start: int
) -> None:
    whole = b"".join(parts)
    reader = ViewsReader(parts)
    assert len(reader) == len(whole)
    assert _drain(reader, size) == whole
    assert reader.tell() == len(whole)
    reader.seek(start)
    assert _drain(reader, size) == whole[start:]
    reader.seek(0)  # what botocore does before a retry
    assert bytes(reader.read()) + _drain(reader, size) == whole
    reader.seek(0)
    buf = bytearray(len(whole) + 3)
    assert reader.readinto(buf) == len(whole)
    assert bytes(buf[: len(whole)]) == whole
    reader.seek(-min(start, len(whole)), io.SEEK_END)
    assert reader.readall() == whole[len(whole) - min(start, len(whole)) :]


def test_reads_are_views_of_the_buffers_not_copies() -> None:
    block = bytearray(b"abcdef")
    reader = ViewsReader([block, b"gh"])
    piece = reader.read(4)
    assert isinstance(piece, memoryview)
    block[0:1] = b"X"  # a view sees the buffer it was cut from
    assert bytes(piece) == b"Xbcd"
    assert bytes(reader.read(100)) == b"ef"  # one buffer a read
    assert bytes(reader.read(100)) == b"gh"
    assert len(reader.read(100)) == 0


def test_bad_seeks_are_refused_naming_what_was_wrong() -> None:
    reader = ViewsReader([b"abc"])
    with pytest.raises(ValueError, match="negative seek position -1"):
        reader.seek(-1)
    with pytest.raises(ValueError, match="invalid whence 7"):
        reader.seek(0, 7)
    assert reader.seek(1, io.SEEK_CUR) == 1
    assert reader.seek(-1, io.SEEK_END) == 2
