"""The metadata snapshot format (processor/follower/snapshot_format.py) and the checks of the table
it carries (processor/follower/snapshot_tables.py): round trips, every corruption refused as a whole,
and a table that holds anything but the fold's state of its own partitions refused."""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import SstFileWriter

from processor.follower.cache_keys import I64, U32, tp_key
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshot_format import (
    SnapshotFormatError,
    SnapshotHeader,
    decode_snapshot,
    encode_snapshot,
    record_crc,
)
from processor.follower.snapshot_tables import open_table
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for

A = TopicPartition("orders", 0)
B = TopicPartition("payments", 7)
MPS = 4


def _header(**overrides: object) -> SnapshotHeader:
    base: dict[str, object] = {
        "metadata_partition": 1,
        "metadata_partitions": MPS,
        "next_offset": 120,
        "origin": "__remote_log_metadata/AAAAAAAAAAAAAAAAAAAAAA",
        "partitions": (A, B),
        "last_offset": 119,
        "last_record_crc": record_crc(b"k", b"v"),
        "last_timestamp_ms": 1_700_000_000_000,
        "written_ms": 1_700_000_001_000,
        "cache_layout": 3,
        "entries": 3,
    }
    base.update(overrides)
    return SnapshotHeader(**base)  # type: ignore[arg-type]


PAYLOAD = b"an SST file's bytes" * 20


def test_a_snapshot_round_trips() -> None:
    header, payload = decode_snapshot(encode_snapshot(_header(), PAYLOAD))
    assert payload == PAYLOAD
    assert dataclasses.replace(header, payload_len=0, payload_crc=0) == _header()


def test_an_empty_partition_round_trips() -> None:
    header = _header(partitions=(), next_offset=0, last_offset=-1, last_record_crc=0, entries=0)
    assert decode_snapshot(encode_snapshot(header, b"")) == (header, b"")


@settings(max_examples=50, deadline=None)
@given(st.binary(min_size=1, max_size=2000), st.integers(0, 2**62 - 1), st.text(max_size=40))
def test_any_payload_and_header_round_trip(payload: bytes, offset: int, origin: str) -> None:
    header = _header(next_offset=offset, last_offset=offset - 1, origin=origin)
    decoded, back = decode_snapshot(encode_snapshot(header, payload))
    assert back == payload and decoded.next_offset == offset and decoded.origin == origin


def test_every_truncation_is_refused() -> None:
    data = encode_snapshot(_header(), PAYLOAD)
    for cut in range(len(data)):
        with pytest.raises(SnapshotFormatError):
            decode_snapshot(data[:cut])


def test_every_flipped_byte_is_refused() -> None:
    data = encode_snapshot(_header(), PAYLOAD)
    for at in range(len(data)):
        broken = bytearray(data)
        broken[at] ^= 0x40
        with pytest.raises(SnapshotFormatError):
            decode_snapshot(bytes(broken))


def test_bytes_after_the_trailer_are_refused() -> None:
    with pytest.raises(SnapshotFormatError, match="after its trailer"):
        decode_snapshot(encode_snapshot(_header(), PAYLOAD) + b"\x00")


def test_the_trailer_of_another_snapshot_is_refused() -> None:
    one = encode_snapshot(_header(), PAYLOAD)
    other = encode_snapshot(_header(next_offset=121, last_offset=120), PAYLOAD)
    with pytest.raises(SnapshotFormatError, match="another snapshot"):
        decode_snapshot(one[:-12] + other[-12:])


def test_a_later_version_is_refused_by_name() -> None:
    data = bytearray(encode_snapshot(_header(), PAYLOAD))
    data[4:6] = struct.pack(">H", 2)
    with pytest.raises(SnapshotFormatError, match="version 2 is not readable here"):
        decode_snapshot(bytes(data))


def test_another_format_is_refused_by_its_magic() -> None:
    with pytest.raises(SnapshotFormatError, match="not a metadata snapshot"):
        decode_snapshot(b"PK\x03\x04" + bytes(100))


def test_a_header_naming_a_partition_twice_or_offsets_out_of_bounds_is_refused() -> None:
    with pytest.raises(SnapshotFormatError, match="twice"):
        decode_snapshot(encode_snapshot(_header(partitions=(A, A)), PAYLOAD))
    with pytest.raises(SnapshotFormatError, match="out of bounds"):
        decode_snapshot(encode_snapshot(_header(last_offset=120), PAYLOAD))
    with pytest.raises(SnapshotFormatError, match="metadata partition 4 of 4"):
        decode_snapshot(encode_snapshot(_header(metadata_partition=4), PAYLOAD))


def test_record_crc_tells_nulls_from_empties() -> None:
    crcs = {record_crc(None, None), record_crc(b"", None), record_crc(None, b""), record_crc(b"", b"")}
    assert len(crcs) == 4


# -- what the table may hold --------------------------------------------------------------------------


def _mine(n: int) -> list[TopicPartition]:
    """Partitions of metadata partition 1 (of MPS)."""
    out = [TopicPartition(f"t{i}", 0) for i in range(200)]
    return [tp for tp in out if metadata_partition_for(tp, MPS) == 1][:n]


def _table(path: Path, keys: dict[bytes, bytes]) -> Path:
    writer = SstFileWriter(options=MetadataCache.sst_options())
    writer.open(str(path))
    for key in sorted(keys):
        writer[key] = keys[key]
    writer.finish()
    return path


def _state_keys(tps: list[TopicPartition]) -> dict[bytes, bytes]:
    keys: dict[bytes, bytes] = {}
    for i, tp in enumerate(tps):
        keys[b"E" + tp_key(tp)] = b"{}"
        keys[b"L" + tp_key(tp) + bytes(8) + bytes([i]) * 16] = I64.pack(9)
        keys[b"O" + tp_key(tp) + bytes(8) + bytes([i]) * 16] = bytes(16)
        keys[b"H" + tp_key(tp) + b"orders/0/some-key"] = b""
        keys[b"S" + bytes([i]) * 16] = b"\x01\x00segment"
    return keys


def test_a_table_of_the_fold_s_state_of_its_own_partitions_is_opened(tmp_path: Path) -> None:
    tps = _mine(3)
    opened = open_table(
        _table(tmp_path / "t.sst", _state_keys(tps)), _header(partitions=tuple(tps)), tmp_path / "s"
    )
    opened.close()


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({b"C" + U32.pack(0): I64.pack(10**9)}, "not the fold's state"),  # another partition's offset
        ({b"V": b"\x00\x03"}, "not the fold's state"),
        ({b"M": b"another/topic"}, "not the fold's state"),
        ({b"E" + tp_key(TopicPartition("unlisted", 0)): b"{}"}, "does not list"),
    ],
)
def test_a_table_holding_anything_else_is_refused(
    tmp_path: Path, extra: dict[bytes, bytes], match: str
) -> None:
    tps = _mine(2)
    keys = {**_state_keys(tps), **extra}
    with pytest.raises(SnapshotFormatError, match=match):
        open_table(_table(tmp_path / "t.sst", keys), _header(partitions=tuple(tps)), tmp_path / "s")
    assert not (tmp_path / "s").exists()  # the scratch database is gone with it


def test_a_header_listing_a_partition_of_another_metadata_partition_is_refused(tmp_path: Path) -> None:
    other = next(
        tp for tp in (TopicPartition(f"x{i}", 0) for i in range(100)) if metadata_partition_for(tp, MPS) == 2
    )
    tps = [*_mine(1), other]
    with pytest.raises(SnapshotFormatError, match="another metadata partition"):
        open_table(
            _table(tmp_path / "t.sst", _state_keys(tps)), _header(partitions=tuple(tps)), tmp_path / "s"
        )


def test_a_payload_that_is_no_table_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "junk.sst"
    path.write_bytes(b"not a table" * 100)
    with pytest.raises(SnapshotFormatError, match="not readable"):
        open_table(path, _header(partitions=tuple(_mine(1))), tmp_path / "s")
