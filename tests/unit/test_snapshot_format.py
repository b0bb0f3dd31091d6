"""The metadata snapshot format (processor/follower/snapshot_format.py): round trips, properties, and
every corruption refused as a whole."""

from __future__ import annotations

import struct

import cramjam
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.follower import snapshot_format as fmt
from processor.follower.snapshot_format import (
    SnapshotEncoder,
    SnapshotFormatError,
    SnapshotHeader,
    decode_snapshot,
    encode_snapshot,
    record_crc,
)
from processor.kafka.partition import TopicPartition
from processor.segment.checksums import crc32c_of

A = TopicPartition("orders", 0)
B = TopicPartition("payments", 7)


def _header(**overrides: object) -> SnapshotHeader:
    base: dict[str, object] = {
        "metadata_partition": 1,
        "metadata_partitions": 4,
        "next_offset": 120,
        "origin": "__remote_log_metadata/AAAAAAAAAAAAAAAAAAAAAA",
        "partitions": (A, B),
        "last_offset": 119,
        "last_record_crc": record_crc(b"k", b"v"),
        "last_timestamp_ms": 1_700_000_000_000,
        "written_ms": 1_700_000_001_000,
        "cache_layout": 3,
    }
    base.update(overrides)
    return SnapshotHeader(**base)  # type: ignore[arg-type]


ENTRIES = [
    (A, b"E" + b"orders\x00\x00\x00\x00\x00", b'{"claim": 1}'),
    (A, b"L" + b"orders\x00\x00\x00\x00\x00" + bytes(24), struct.pack(">q", 9)),
    (B, b"S" + bytes(16), b"\x01\x00segment"),
]


def test_a_snapshot_round_trips() -> None:
    data = encode_snapshot(_header(), ENTRIES)
    header, entries = decode_snapshot(data)
    assert header == _header(version=fmt.VERSION)
    assert entries == ENTRIES


def test_an_empty_partition_round_trips() -> None:
    header = _header(partitions=(), next_offset=0, last_offset=-1, last_record_crc=0)
    assert decode_snapshot(encode_snapshot(header, [])) == (header, [])


@settings(max_examples=60, deadline=None)
@given(
    st.dictionaries(st.binary(min_size=1, max_size=40), st.binary(max_size=300), max_size=400),
    st.booleans(),
)
def test_any_sorted_entries_round_trip_across_blocks(kv: dict[bytes, bytes], compress: bool) -> None:
    entries = [(A if key[0] % 2 else B, key, value) for key, value in sorted(kv.items())]
    old = fmt.BLOCK_RAW_BYTES
    fmt.BLOCK_RAW_BYTES = 512  # many blocks from few entries
    try:
        encoder = SnapshotEncoder(_header(), compress=compress)
        pieces = encoder.take()
        for tp, key, value in entries:
            pieces += encoder.add(tp, key, value)
        pieces += encoder.finish()
    finally:
        fmt.BLOCK_RAW_BYTES = old
    assert decode_snapshot(b"".join(pieces))[1] == entries


def test_keys_out_of_order_are_not_written() -> None:
    with pytest.raises(ValueError, match="out of order"):
        encode_snapshot(_header(), [ENTRIES[1], ENTRIES[0]])
    with pytest.raises(ValueError, match="out of order"):
        encode_snapshot(_header(), [ENTRIES[0], ENTRIES[0]])


def test_every_truncation_is_refused() -> None:
    data = encode_snapshot(_header(), ENTRIES)
    for cut in range(len(data)):
        with pytest.raises(SnapshotFormatError):
            decode_snapshot(data[:cut])


def test_every_flipped_byte_is_refused() -> None:
    data = encode_snapshot(_header(), ENTRIES)
    for at in range(len(data)):
        broken = bytearray(data)
        broken[at] ^= 0x40
        with pytest.raises(SnapshotFormatError):
            decode_snapshot(bytes(broken))


def test_bytes_after_the_trailer_are_refused() -> None:
    with pytest.raises(SnapshotFormatError, match="after its trailer"):
        decode_snapshot(encode_snapshot(_header(), ENTRIES) + b"\x00")


def test_a_later_version_is_refused_by_name() -> None:
    data = bytearray(encode_snapshot(_header(), ENTRIES))
    data[4:6] = struct.pack(">H", 2)
    with pytest.raises(SnapshotFormatError, match="version 2 is not readable here"):
        decode_snapshot(bytes(data))


def test_another_format_is_refused_by_its_magic() -> None:
    with pytest.raises(SnapshotFormatError, match="not a metadata snapshot"):
        decode_snapshot(b"PK\x03\x04" + bytes(100))


def _resealed_block(payload: bytes, raw_len: int, count: int) -> bytes:
    """A snapshot whose one block is ``payload`` (zstd), with every CRC right: only the block's
    own claims are wrong."""
    head = fmt.encode_header(_header())
    crc = crc32c_of(payload)
    block = struct.pack(">BIIII", fmt.CODEC_ZSTD, count, raw_len, len(payload), crc) + payload
    chain = head[-4:] + struct.pack(">I", crc)
    trailer = struct.pack(">4sIQI", fmt.TRAILER_MAGIC, 1, count, crc32c_of(chain))
    return head + block + trailer + struct.pack(">I", crc32c_of(trailer))


def test_a_block_that_inflates_past_its_stated_size_is_refused_not_allocated() -> None:
    bomb = bytes(cramjam.zstd.compress(bytes(50 << 20), 3))  # 50 MiB of zeros in a few KiB
    with pytest.raises(SnapshotFormatError, match="block 0"):
        decode_snapshot(_resealed_block(bomb, 1024, 1))


def test_entries_that_overrun_their_block_are_refused() -> None:
    payload = struct.pack(">II", 0, 1000) + b"short"
    packed = bytes(cramjam.zstd.compress(payload, 3))
    with pytest.raises(SnapshotFormatError, match="overrun"):
        decode_snapshot(_resealed_block(packed, len(payload), 1))


def test_an_entry_naming_a_partition_the_header_does_not_list_is_refused() -> None:
    payload = struct.pack(">II", 9, 1) + b"E" + struct.pack(">I", 0)
    packed = bytes(cramjam.zstd.compress(payload, 3))
    with pytest.raises(SnapshotFormatError, match="malformed"):
        decode_snapshot(_resealed_block(packed, len(payload), 1))


def test_record_crc_tells_nulls_from_empties() -> None:
    assert (
        len({record_crc(None, None), record_crc(b"", None), record_crc(None, b""), record_crc(b"", b"")}) == 4
    )
