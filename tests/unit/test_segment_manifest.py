"""Segment manifests (format version 1): round trip, layout, corruption."""

from __future__ import annotations

import struct
import uuid
import zlib
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.metadata.codec import encode_value
from processor.metadata.manifest import SegmentManifest, decode_manifest, encode_manifest, manifest_key
from processor.metadata.model import SegmentState
from tests.unit.metadata_samples import segment_metadata

FINISHED = SegmentState.COPY_SEGMENT_FINISHED


@given(segment_metadata(FINISHED), st.none() | st.uuids())
def test_round_trip(segment, claim) -> None:
    manifest = SegmentManifest(segment, claim)
    assert decode_manifest(encode_manifest(manifest)) == manifest


@given(segment_metadata(FINISHED))
def test_layout_is_as_documented(segment) -> None:
    claim = uuid.uuid4()
    raw = encode_manifest(SegmentManifest(segment, claim))
    magic, version, flags, reserved, claim_bytes, body_len = struct.unpack_from(">4sBBH16sI", raw)
    assert (magic, version, flags, reserved, claim_bytes) == (b"KTSM", 1, 0, 0, claim.bytes)
    assert raw[28 : 28 + body_len] == encode_value(segment)  # the metadata topic's own bytes
    assert len(raw) == 28 + body_len + 4 and int.from_bytes(raw[-4:], "big") == zlib.crc32(raw[:-4])


@settings(max_examples=5)
@given(segment_metadata(FINISHED))
def test_only_finished_segments_have_manifests(segment) -> None:
    with pytest.raises(ValueError, match="COPY_SEGMENT_FINISHED"):
        SegmentManifest(replace(segment, state=SegmentState.COPY_SEGMENT_STARTED), None)
    body = encode_value(replace(segment, state=SegmentState.DELETE_SEGMENT_STARTED))
    head = struct.pack(">4sBBH16sI", b"KTSM", 1, 0, 0, bytes(16), len(body)) + body
    with pytest.raises(FormatError, match="not a COPY_SEGMENT_FINISHED"):
        decode_manifest(head + zlib.crc32(head).to_bytes(4, "big"))


def test_key_is_next_to_the_data_object() -> None:
    assert manifest_key("p/orders-x/3/0000-u-e1.log") == "p/orders-x/3/0000-u-e1.log-manifest"


@settings(max_examples=80)
@given(segment_metadata(FINISHED), st.data())
def test_any_flipped_bit_is_detected(segment, data: st.DataObject) -> None:
    raw = bytearray(encode_manifest(SegmentManifest(segment, uuid.uuid4())))
    pos = data.draw(st.integers(0, len(raw) - 1))
    raw[pos] ^= 1 << data.draw(st.integers(0, 7))
    with pytest.raises(FormatError):
        decode_manifest(bytes(raw))


@given(segment_metadata(FINISHED), st.data())
def test_truncated_or_extended_manifests_are_rejected(segment, data: st.DataObject) -> None:
    raw = encode_manifest(SegmentManifest(segment, None))
    with pytest.raises(FormatError):
        decode_manifest(raw[: data.draw(st.integers(0, len(raw) - 1))])
    with pytest.raises(FormatError):
        decode_manifest(raw + b"\x00")


@settings(max_examples=5)
@given(segment_metadata(FINISHED))
def test_unknown_versions_and_flags_are_named(segment) -> None:
    raw = bytearray(encode_manifest(SegmentManifest(segment, None)))
    for pos, value, message in ((4, 2, "version 2"), (5, 1, "flags"), (0, ord("X"), "magic")):
        bad = bytearray(raw)
        bad[pos] = value
        bad[-4:] = zlib.crc32(bad[:-4]).to_bytes(4, "big")
        with pytest.raises(FormatError, match=message):
            decode_manifest(bytes(bad))
