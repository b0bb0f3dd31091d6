"""The block cache's CRC of a verified block, had from its header and its payload's CRC without
reading the payload again, is the CRC-32 of the whole block: a damaged cached copy is still a miss."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from processor.reader.block_cache import BlockCache, combined_crc
from processor.segment.checksums import crc32


@given(st.binary(max_size=200), st.binary(max_size=5000))
def test_the_combined_crc_is_the_crc_of_the_whole(head: bytes, tail: bytes) -> None:
    assert combined_crc(head, crc32(tail), len(tail)) == crc32(head + tail)


def test_a_block_cached_with_its_combined_crc_is_a_hit_and_damaged_a_miss(tmp_path: Path) -> None:
    head, payload = b"h" * 128, bytes(range(256)) * 40
    cache = BlockCache(tmp_path, 1 << 20)
    cache.put("data", 0, head + payload, combined_crc(head, crc32(payload), len(payload)))
    assert cache.get("data", 0, len(head) + len(payload)) == head + payload
    with (tmp_path / "blocks").open("r+b") as f:  # one byte of the payload damaged on disk
        f.seek(500)
        f.write(b"\xff")
    assert cache.get("data", 0, len(head) + len(payload)) is None
    cache.close()
