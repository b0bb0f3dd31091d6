"""Encryption at rest formats: version 3 blocks (an AES-256-GCM sealed version 2 block, bound to its
segment and position) and the sealed index object. Round trips, every flipped byte, blocks moved,
swapped, taken from another segment or opened with another key, truncation."""

from __future__ import annotations

import dataclasses
import os
import struct
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.segment.block_header import (
    BLOCK_FORMAT_V2,
    BLOCK_FORMAT_V3,
    BLOCK_HEADER_LEN,
    CODEC_NONE,
    CODEC_ZSTD,
    BlockHeader,
)
from processor.segment.blocks import (
    block_payload,
    decode_block,
    decode_block_header,
    is_encrypted_block,
    iter_blocks,
)
from processor.segment.blocks_v2 import encode_header_v2
from processor.segment.blocks_v3 import (
    HEADER_V3,
    NONCE_LEN,
    TAG_LEN,
    BlockAuthenticationError,
    encode_header_v3,
    encrypt_segment,
    open_block,
    seal_block,
)
from processor.segment.checksums import crc32
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.index_format import INDEX_MAGIC, decode_index, encode_index
from processor.segment.index_sealing import (
    IndexAuthenticationError,
    is_sealed_index,
    open_index,
    seal_index,
)
from processor.segment.records import KafkaRecord
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler, compress_segment
from tests.batch_samples import Rec, expected_records, make_batch

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
SEGMENT = uuid.UUID("6c1f3a52-3d0e-4b8e-9a57-0d7a3f1b2c4e")
OTHER_SEGMENT = uuid.UUID("0b9d8e4f-5a6c-4d2e-8f1a-7c3b5e9d1a20")


def recs(n: int, size: int) -> list[Rec]:
    return [(1000 + i, f"k{i}".encode(), b"v" * size, [("h", b"x")]) for i in range(n)]


def segment_of(batches: list[bytes], block_bytes: int = 1024, compression: str = "keep") -> SealedSegment:
    asm = SegmentAssembler(3, parse_batch_header(batches[0]).base_offset, block_bytes, compression)
    for raw in batches:
        asm.append(parse_batch_header(raw), raw)
    return compress_segment(asm.seal())


def sample_batches() -> tuple[list[bytes], list[KafkaRecord]]:
    """Uncompressed batches (zstd archive compression makes them codec 1 blocks) and a gzip one."""
    batches: list[bytes] = []
    expected: list[KafkaRecord] = []
    offset = 0
    for i in range(6):
        rs = recs(3, 200 + 50 * i)
        batches.append(make_batch(offset, rs, "gzip" if i == 4 else "none"))
        expected += expected_records(offset, rs)
        offset += len(rs)
    return batches, expected


def small_v2_block() -> bytes:
    segment = segment_of([make_batch(7, [(5, b"k", b"v", [])])])
    assert len(segment.blocks) == 1
    return bytes(segment.blocks[0])


def v2_block(payload: bytes, codec: int = CODEC_NONE, first: int = 0, last: int = 0) -> bytes:
    header = BlockHeader(
        BLOCK_HEADER_LEN + len(payload), first, 9, 1, last, crc32(payload), BLOCK_FORMAT_V2, codec, 4321
    )
    return encode_header_v2(header) + payload


# -- blocks ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("compression", ["keep", "zstd"])
def test_seal_then_open_gives_the_v2_block_back(compression: str) -> None:
    batches, _ = sample_batches()
    segment = segment_of(batches, compression=compression)
    codecs = {decode_block_header(b).payload_codec for b in segment.blocks}
    assert codecs == ({CODEC_NONE, CODEC_ZSTD} if compression == "zstd" else {CODEC_NONE})
    for number, block in enumerate(segment.blocks):
        sealed = seal_block(block, KEY, SEGMENT, 1000 * number)
        assert len(sealed) == len(block) + TAG_LEN
        assert bytes(block[BLOCK_HEADER_LEN : BLOCK_HEADER_LEN + 64]) not in sealed
        opened = open_block(sealed, KEY, SEGMENT, 1000 * number, where="test")
        assert isinstance(opened, bytearray)
        assert opened == block


def test_each_seal_has_its_own_nonce() -> None:
    block = small_v2_block()
    one, two = seal_block(block, KEY, SEGMENT, 0), seal_block(block, KEY, SEGMENT, 0)
    assert decode_block_header(one).nonce != decode_block_header(two).nonce
    assert one[BLOCK_HEADER_LEN:] != two[BLOCK_HEADER_LEN:]
    assert open_block(one, KEY, SEGMENT, 0, where="a") == open_block(two, KEY, SEGMENT, 0, where="b")


def test_encrypt_segment_then_open_every_block_at_its_new_position() -> None:
    batches, expected = sample_batches()
    plain = segment_of(batches, block_bytes=700, compression="zstd")
    plain_blocks = [bytes(b) for b in plain.blocks]
    plain_infos = list(plain.block_infos)
    assert len(plain_blocks) > 3
    encrypted = encrypt_segment(plain, KEY, SEGMENT)
    # pure: the input segment is unchanged
    assert [bytes(b) for b in plain.blocks] == plain_blocks and plain.block_infos == plain_infos
    assert plain.format_version == BLOCK_FORMAT_V2
    assert encrypted.format_version == BLOCK_FORMAT_V3
    assert encrypted.size_bytes == plain.size_bytes + TAG_LEN * len(plain_blocks)
    assert encrypted.held_bytes == plain.held_bytes
    data_object = b"".join(encrypted.blocks)
    assert len(data_object) == encrypted.size_bytes
    position = 0
    records: list[KafkaRecord] = []
    for number, (info, original, old) in enumerate(
        zip(encrypted.block_infos, plain_blocks, plain_infos, strict=True)
    ):
        assert info.position == position == old.position + TAG_LEN * number
        assert info.length == old.length + TAG_LEN
        assert (info.first_offset, info.last_offset, info.min_timestamp, info.max_timestamp) == (
            old.first_offset,
            old.last_offset,
            old.min_timestamp,
            old.max_timestamp,
        )
        stored = memoryview(data_object)[info.position : info.position + info.length]
        assert is_encrypted_block(stored)
        opened = open_block(stored, KEY, SEGMENT, info.position, where=f"block {number}")
        assert opened == original
        records += decode_block(opened)
        position += info.length
    assert records == expected
    # the index of the encrypted segment is consistent with its data object
    index = encode_index(
        topic="t",
        partition=3,
        segment_id=SEGMENT,
        start_offset=encrypted.start_offset,
        end_offset=encrypted.end_offset,
        record_count=encrypted.record_count,
        max_timestamp=encrypted.max_timestamp,
        data_object_length=encrypted.size_bytes,
        blocks=encrypted.block_infos,
    )
    assert decode_index(index).blocks == tuple(encrypted.block_infos)


def test_encrypt_segment_takes_format_2_only() -> None:
    batches, _ = sample_batches()
    encrypted = encrypt_segment(segment_of(batches), KEY, SEGMENT)
    with pytest.raises(ValueError, match="format 2"):
        encrypt_segment(encrypted, KEY, SEGMENT)


def test_keys_and_positions_are_checked() -> None:
    block = small_v2_block()
    with pytest.raises(ValueError, match="32 bytes"):
        seal_block(block, KEY[:16], SEGMENT, 0)
    with pytest.raises(ValueError, match="u64"):
        seal_block(block, KEY, SEGMENT, -1)
    with pytest.raises(ValueError, match="u64"):
        seal_block(block, KEY, SEGMENT, 2**64)
    sealed = seal_block(block, KEY, SEGMENT, 2**64 - 1)
    assert open_block(sealed, KEY, SEGMENT, 2**64 - 1, where="last") == block
    with pytest.raises(ValueError, match="32 bytes"):
        open_block(sealed, KEY + b"\x00", SEGMENT, 0, where="x")


def test_seal_refuses_anything_but_an_intact_v2_block() -> None:
    block = small_v2_block()
    damaged = bytearray(block)
    damaged[-1] ^= 0x01
    with pytest.raises(FormatError, match="payload CRC mismatch"):
        seal_block(damaged, KEY, SEGMENT, 0)
    with pytest.raises(FormatError, match="expected"):
        seal_block(block[:-1], KEY, SEGMENT, 0)
    with pytest.raises(FormatError, match="only a format 2 block"):
        seal_block(seal_block(block, KEY, SEGMENT, 0), KEY, SEGMENT, 0)


@settings(max_examples=60, deadline=None)
@given(
    payload=st.binary(min_size=0, max_size=3000),
    codec=st.sampled_from([CODEC_NONE, CODEC_ZSTD]),
    first=st.integers(-(2**63), 2**63 - 1),
    position=st.integers(0, 2**64 - 1),
    segment_id=st.uuids(),
    other_position=st.integers(0, 2**64 - 1),
    key=st.binary(min_size=32, max_size=32),
)
def test_seal_open_property(
    payload: bytes,
    codec: int,
    first: int,
    position: int,
    segment_id: uuid.UUID,
    other_position: int,
    key: bytes,
) -> None:
    block = v2_block(payload, codec, first, first)
    sealed = seal_block(block, key, segment_id, position)
    header = decode_block_header(sealed)
    assert header.format_version == BLOCK_FORMAT_V3
    assert header.block_len == len(sealed) == len(block) + TAG_LEN
    assert (header.first_entry_id, header.payload_codec, header.raw_payload_len) == (first, codec, 4321)
    assert open_block(sealed, key, segment_id, position, where="p") == block
    if other_position != position:
        with pytest.raises(BlockAuthenticationError):
            open_block(sealed, key, segment_id, other_position, where="p")


def opens_or_raises(block: bytes | bytearray, *, position: int = 0) -> FormatError:
    """The FormatError opening ``block`` raises; fails the test if it returns anything."""
    try:
        opened = open_block(block, KEY, SEGMENT, position, where="corrupt")
    except FormatError as exc:
        return exc
    pytest.fail(f"a corrupt block opened into {len(opened)} bytes")


@pytest.mark.parametrize("mask", [0x01, 0x80, 0xFF])
def test_every_flipped_byte_of_a_sealed_block_is_refused(mask: int) -> None:
    sealed = seal_block(small_v2_block(), KEY, SEGMENT, 0)
    assert len(sealed) < 400  # a small block: every position is tried
    for at in range(len(sealed)):
        corrupt = bytearray(sealed)
        corrupt[at] ^= mask
        exc = opens_or_raises(corrupt)
        assert "corrupt" in str(exc)
        if at >= BLOCK_HEADER_LEN:  # damage of the stored payload is caught by its CRC first
            assert "payload CRC mismatch" in str(exc) and not isinstance(exc, BlockAuthenticationError)


def test_intact_crcs_over_altered_bytes_do_not_authenticate() -> None:
    """Someone who edits a header field or the ciphertext and fixes the CRCs still fails."""
    sealed = seal_block(small_v2_block(), KEY, SEGMENT, 0)
    header = decode_block_header(sealed)
    for changed in (
        dataclasses.replace(header, first_entry_id=header.first_entry_id + 1),
        dataclasses.replace(header, last_entry_id=header.last_entry_id + 1),
        dataclasses.replace(header, ledger_id=header.ledger_id + 1),
        dataclasses.replace(header, entry_count=header.entry_count + 1),
        dataclasses.replace(header, payload_codec=CODEC_ZSTD),
        dataclasses.replace(header, raw_payload_len=header.raw_payload_len + 1),
        dataclasses.replace(header, nonce=bytes(NONCE_LEN)),
    ):
        forged = encode_header_v3(changed) + sealed[BLOCK_HEADER_LEN:]
        with pytest.raises(BlockAuthenticationError, match="does not authenticate"):
            open_block(forged, KEY, SEGMENT, 0, where="forged")
    payload = bytearray(sealed[BLOCK_HEADER_LEN:])
    payload[0] ^= 0x01
    forged = encode_header_v3(dataclasses.replace(header, payload_crc32=crc32(payload))) + payload
    with pytest.raises(BlockAuthenticationError, match="forged: block does not authenticate"):
        open_block(forged, KEY, SEGMENT, 0, where="forged")


def test_a_block_opens_only_with_its_key_segment_and_position() -> None:
    sealed = seal_block(small_v2_block(), KEY, SEGMENT, 4096)
    assert open_block(sealed, KEY, SEGMENT, 4096, where="ok")
    for key, segment_id, position in (
        (OTHER_KEY, SEGMENT, 4096),
        (KEY, OTHER_SEGMENT, 4096),
        (KEY, SEGMENT, 0),
        (KEY, SEGMENT, 4097),
    ):
        with pytest.raises(
            BlockAuthenticationError,
            match=r"^here: block does not authenticate \(wrong key, or a block moved, swapped or altered\)$",
        ):
            open_block(sealed, key, segment_id, position, where="here")


def test_swapped_blocks_do_not_authenticate() -> None:
    batches, _ = sample_batches()
    encrypted = encrypt_segment(segment_of(batches, block_bytes=700), KEY, SEGMENT)
    first, second = encrypted.block_infos[0], encrypted.block_infos[1]
    one, two = encrypted.blocks[0], encrypted.blocks[1]
    # the second block read where the first one was, and the other way round
    with pytest.raises(BlockAuthenticationError):
        open_block(two, KEY, SEGMENT, first.position, where="swapped")
    with pytest.raises(BlockAuthenticationError):
        open_block(one, KEY, SEGMENT, second.position, where="swapped")
    # a block of another segment with the same key, at the same position
    other = encrypt_segment(segment_of(batches, block_bytes=700), KEY, OTHER_SEGMENT)
    with pytest.raises(BlockAuthenticationError):
        open_block(other.blocks[1], KEY, SEGMENT, second.position, where="foreign")


def test_a_truncated_block_is_a_format_error() -> None:
    sealed = seal_block(small_v2_block(), KEY, SEGMENT, 0)
    for length in range(len(sealed)):
        exc = opens_or_raises(sealed[:length])
        assert not isinstance(exc, BlockAuthenticationError)
    with pytest.raises(FormatError, match="expected"):
        open_block(sealed + b"\x00", KEY, SEGMENT, 0, where="long")


def test_open_block_refuses_a_plain_block() -> None:
    with pytest.raises(FormatError, match="not an encrypted block"):
        open_block(small_v2_block(), KEY, SEGMENT, 0, where="plain")


def test_header_readers_read_a_v3_header_without_the_key() -> None:
    block = small_v2_block()
    v2 = decode_block_header(block)
    sealed = seal_block(block, KEY, SEGMENT, 0)
    v3 = decode_block_header(sealed, where="v3")
    assert v3 == dataclasses.replace(
        v2,
        block_len=v2.block_len + TAG_LEN,
        payload_crc32=crc32(sealed[BLOCK_HEADER_LEN:]),
        format_version=BLOCK_FORMAT_V3,
        nonce=sealed[HEADER_V3.size - NONCE_LEN : HEADER_V3.size],
    )
    assert len(v3.nonce) == NONCE_LEN
    assert struct.unpack_from(">H", sealed, 36) == (BLOCK_FORMAT_V3,)
    assert encode_header_v3(v3) == sealed[:BLOCK_HEADER_LEN]
    assert is_encrypted_block(sealed)
    assert not is_encrypted_block(block)
    assert not is_encrypted_block(sealed[:37])


def test_payload_readers_refuse_an_encrypted_block_clearly() -> None:
    sealed = seal_block(small_v2_block(), KEY, SEGMENT, 0)
    message = r"^b7: block is encrypted \(format 3\); open it with the segment's data key first$"
    with pytest.raises(FormatError, match=message):
        block_payload(sealed, where="b7")
    with pytest.raises(FormatError, match=message):
        decode_block(sealed, where="b7")
    with pytest.raises(FormatError, match="block is encrypted"):
        list(iter_blocks(sealed))


# -- index ------------------------------------------------------------------------------------------


def plain_index() -> bytes:
    batches, _ = sample_batches()
    segment = encrypt_segment(segment_of(batches, block_bytes=700), KEY, SEGMENT)
    return encode_index(
        topic="orders",
        partition=3,
        segment_id=SEGMENT,
        start_offset=segment.start_offset,
        end_offset=segment.end_offset,
        record_count=segment.record_count,
        max_timestamp=segment.max_timestamp,
        data_object_length=segment.size_bytes,
        blocks=segment.block_infos,
    )


def test_index_round_trip() -> None:
    index = plain_index()
    sealed = seal_index(index, KEY, SEGMENT)
    assert is_sealed_index(sealed) and not is_sealed_index(index)
    assert int.from_bytes(index[:4], "big") == INDEX_MAGIC
    assert sealed[:5] == b"KTSI\x01"
    assert len(sealed) == 4 + 1 + NONCE_LEN + len(index) + TAG_LEN
    assert index not in sealed
    opened = open_index(sealed, KEY, SEGMENT, where="idx")
    assert opened == index
    assert decode_index(opened).topic == "orders"
    assert open_index(memoryview(bytearray(sealed)), KEY, SEGMENT, where="idx") == index
    assert seal_index(index, KEY, SEGMENT) != sealed  # a fresh nonce each time
    with pytest.raises(ValueError, match="already sealed"):
        seal_index(sealed, KEY, SEGMENT)
    with pytest.raises(ValueError, match="32 bytes"):
        seal_index(index, KEY[:24], SEGMENT)
    assert not is_sealed_index(b"") and not is_sealed_index(b"KTS")


def test_every_flipped_byte_of_a_sealed_index_is_refused() -> None:
    sealed = seal_index(plain_index(), KEY, SEGMENT)
    for at in range(len(sealed)):
        corrupt = bytearray(sealed)
        corrupt[at] ^= 0x01
        with pytest.raises(FormatError, match=r"^flipped: "):
            open_index(corrupt, KEY, SEGMENT, where="flipped")
        if at >= 5:  # past the magic and the version: authentication is what fails
            with pytest.raises(IndexAuthenticationError):
                open_index(corrupt, KEY, SEGMENT, where="flipped")


def test_a_sealed_index_opens_only_with_its_key_and_segment() -> None:
    sealed = seal_index(plain_index(), KEY, SEGMENT)
    with pytest.raises(IndexAuthenticationError, match=r"^i: index does not authenticate"):
        open_index(sealed, OTHER_KEY, SEGMENT, where="i")
    with pytest.raises(IndexAuthenticationError, match=r"^i: index does not authenticate"):
        open_index(sealed, KEY, OTHER_SEGMENT, where="i")


def test_a_truncated_sealed_index_is_refused() -> None:
    sealed = seal_index(plain_index(), KEY, SEGMENT)
    for length in range(len(sealed)):
        with pytest.raises(FormatError) as info:
            open_index(sealed[:length], KEY, SEGMENT, where="cut")
        if length < 4 + 1 + NONCE_LEN + TAG_LEN:
            assert type(info.value) is FormatError and "too short" in str(info.value)
        else:
            assert isinstance(info.value, IndexAuthenticationError)
    with pytest.raises(IndexAuthenticationError):
        open_index(sealed + b"\x00", KEY, SEGMENT, where="long")


def test_open_index_refuses_a_plain_index_and_unknown_versions() -> None:
    index = plain_index()
    with pytest.raises(FormatError, match="bad sealed index magic"):
        open_index(index, KEY, SEGMENT, where="plain")
    sealed = bytearray(seal_index(index, KEY, SEGMENT))
    sealed[4] = 2
    with pytest.raises(FormatError, match="unsupported sealed index version 2"):
        open_index(sealed, KEY, SEGMENT, where="v2")


def test_empty_index_bytes_seal_and_open() -> None:
    key = os.urandom(32)
    assert open_index(seal_index(b"", key, SEGMENT), key, SEGMENT, where="empty") == b""
