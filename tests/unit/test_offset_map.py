"""The offset map format (v1): round trip, translation against a brute-force model, corruption."""

from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.restore.offset_map import (
    OffsetMap,
    OffsetRun,
    OutsideRestoredRange,
    concat,
    decode,
    encode,
    runs_from_pairs,
)


@st.composite
def restored(draw: st.DrawFn) -> tuple[OffsetMap, list[tuple[int, int]]]:
    """A map built from increasing (source, target) pairs with random gaps on both sides (up to 60
    pairs: runs that merge, split and sit next to gaps; drawing 300 made each test cost seconds)."""
    covered_start = draw(st.integers(0, 10**12))
    n = draw(st.integers(0, 60))
    pairs: list[tuple[int, int]] = []
    s, t = covered_start, draw(st.integers(0, 10**12))
    for _ in range(n):
        s += draw(st.sampled_from([0, 0, 0, 1, 2, 1000]))
        t += draw(st.sampled_from([0, 0, 0, 1, 7]))
        pairs.append((s, t))
        s, t = s + 1, t + 1
    covered_end = s + draw(st.integers(0, 5))
    runs = runs_from_pairs([p[0] for p in pairs], [p[1] for p in pairs])
    return OffsetMap(
        draw(st.integers(0, 2**31 - 1)),
        draw(st.integers(0, 2**31 - 1)),
        covered_start,
        covered_end,
        tuple(runs),
    ), pairs


@given(restored())
def test_round_trip(m) -> None:
    offset_map, pairs = m
    assert decode(encode(offset_map)) == offset_map
    assert offset_map.records == len(pairs)


# no deadline: an example's time is the machine's load (it flaked at 326 ms on a loaded one)
@settings(deadline=None)
@given(restored(), st.data())
def test_target_of_and_translate_match_brute_force(m, data: st.DataObject) -> None:
    offset_map, pairs = m
    lookup = dict(pairs)
    probe = data.draw(st.integers(max(0, offset_map.covered_start - 3), offset_map.covered_end + 3))
    assert offset_map.target_of(probe) == lookup.get(probe)
    if probe < offset_map.covered_start or probe > offset_map.covered_end or not pairs:
        with pytest.raises(OutsideRestoredRange):
            offset_map.translate(probe)
        return
    later = [t for s, t in pairs if s >= probe]
    expected = later[0] if later else pairs[-1][1] + 1
    assert offset_map.translate(probe) == expected


@given(restored(), st.data())
def test_chunks_concatenate_to_the_whole(m, data: st.DataObject) -> None:
    whole, pairs = m
    cut = data.draw(st.integers(whole.covered_start, whole.covered_end))
    head = [p for p in pairs if p[0] < cut]
    tail = [p for p in pairs if p[0] >= cut]

    def part(ps: list[tuple[int, int]], start: int, end: int) -> OffsetMap:
        runs = runs_from_pairs([p[0] for p in ps], [p[1] for p in ps])
        return OffsetMap(whole.source_partition, whole.target_partition, start, end, tuple(runs))

    joined = concat([part(head, whole.covered_start, cut), part(tail, cut, whole.covered_end)])
    assert joined == whole


def test_chunks_must_meet() -> None:
    a = OffsetMap(0, 0, 0, 10, (OffsetRun(0, 0, 10),))
    b = OffsetMap(0, 0, 11, 20, (OffsetRun(11, 12, 9),))
    with pytest.raises(ValueError, match="starts at 11"):
        concat([a, b])
    with pytest.raises(ValueError, match="different partitions"):
        concat([a, OffsetMap(1, 0, 10, 20)])
    assert concat([]) is None


def test_runs_that_go_backwards_are_refused() -> None:
    with pytest.raises(ValueError):
        OffsetMap(0, 0, 0, 100, (OffsetRun(10, 50, 5), OffsetRun(20, 52, 5)))  # target overlaps
    with pytest.raises(ValueError):
        OffsetMap(0, 0, 5, 100, (OffsetRun(0, 0, 5),))  # before the covered range
    with pytest.raises(ValueError):
        OffsetMap(0, 0, 0, 7, (OffsetRun(0, 0, 10),))  # past it


def test_translation_in_a_source_gap_and_at_the_end() -> None:
    # source 0..4 -> 100..104, 5 is a transaction marker, 6..9 -> 106..109 (the target's marker at 105)
    m = OffsetMap(3, 3, 0, 11, (OffsetRun(0, 100, 5), OffsetRun(6, 106, 4)))
    assert m.translate(0) == 100
    assert m.translate(3) == 103
    assert m.translate(5) == 106  # a position on the marker: the next record
    assert m.translate(10) == 110  # past every restored record
    assert m.translate(11) == 110
    with pytest.raises(OutsideRestoredRange):
        m.translate(12)


def test_layout_is_as_documented() -> None:
    raw = encode(OffsetMap(2, 5, 100, 300, (OffsetRun(100, 7, 3), OffsetRun(200, 20, 100))))
    head = struct.unpack_from(">4sBBiiqqI", raw)
    assert head == (b"KTOM", 1, 0, 2, 5, 100, 300, 2)
    # run 1: gap 0, target 7, length-1 2; run 2: source gap 200-103=97, target gap 20-10=10, 99
    assert raw[34:-4] == bytes([0, 7, 2, 97, 10, 99])
    assert int.from_bytes(raw[-4:], "big") == zlib.crc32(raw[:-4])


def test_big_numbers_use_multi_byte_varints() -> None:
    m = OffsetMap(0, 0, 0, 2**40, (OffsetRun(2**39, 2**50, 2**20),))
    assert decode(encode(m)) == m


@settings(max_examples=80)
@given(restored(), st.data())
def test_any_flipped_bit_is_detected(m, data: st.DataObject) -> None:
    raw = bytearray(encode(m[0]))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(FormatError):
        decode(bytes(raw))


@given(restored(), st.data())
def test_truncation_is_detected(m, data: st.DataObject) -> None:
    raw = encode(m[0])
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(FormatError):
        decode(raw[:cut])


def _with_crc(body: bytes) -> bytes:
    return body + zlib.crc32(body).to_bytes(4, "big")


def test_unknown_version_flags_and_bad_run_counts_are_named() -> None:
    good = encode(OffsetMap(0, 0, 0, 1, (OffsetRun(0, 0, 1),)))
    body = bytearray(good[:-4])
    body[4] = 2
    with pytest.raises(FormatError, match="version 2"):
        decode(_with_crc(bytes(body)))
    body = bytearray(good[:-4])
    body[5] = 1
    with pytest.raises(FormatError, match="flags"):
        decode(_with_crc(bytes(body)))
    body = bytearray(good[:-4])
    struct.pack_into(">I", body, 30, 10**6)
    with pytest.raises(FormatError, match="cannot fit"):
        decode(_with_crc(bytes(body)))
    body = bytearray(good[:-4]) + b"\x00"
    with pytest.raises(FormatError, match="after the last run"):
        decode(_with_crc(bytes(body)))
    body = bytearray(good[:-4])
    body[34:] = b"\xff" * 11
    with pytest.raises(FormatError, match="varint"):
        decode(_with_crc(bytes(body)))
