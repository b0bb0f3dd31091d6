"""The local block cache: what was put comes back byte for byte or not at all (short or damaged
bytes are a miss, dropped), within its byte bound, the oldest written dropped first; an earlier
run's file is never trusted; a block that cannot be written is simply not cached."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from processor import metrics
from processor.reader.block_cache import FILE_NAME, BlockCache


def _count(result: str) -> float:
    return float(metrics.BLOCK_CACHE.labels(result)._value.get())


def test_a_block_put_comes_back_byte_for_byte(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "c", 1 << 20)
    cache.put("p/seg-1.data", 4096, memoryview(b"abc" * 100))
    assert cache.get("p/seg-1.data", 4096, 300) == b"abc" * 100
    assert cache.get("p/seg-1.data", 0, 300) is None  # another position
    assert cache.get("p/seg-2.data", 4096, 300) is None  # another object
    assert cache.get("p/seg-1.data", 4096, 299) is None  # another length: not this block
    assert cache.size == 300
    cache.close()


def test_the_oldest_written_go_first_within_the_bound(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "c", 1000)
    for n in range(4):
        cache.put("k", n * 250, bytes([n]) * 250)
    cache.put("k", 1000, b"\x04" * 250)  # wraps: the first written goes
    assert [cache.get("k", p, 250) is not None for p in (0, 250, 500, 750, 1000)] == [False] + [True] * 4
    cache.put("k", 2000, b"x" * 251)  # over a quarter of the bound: not cached
    assert cache.get("k", 2000, 251) is None and cache.size == 1000
    cache.put("k", 1100, b"\x05" * 200)  # covers the second block only
    assert cache.get("k", 250, 250) is None and cache.get("k", 500, 250) == b"\x02" * 250
    assert (tmp_path / "c" / FILE_NAME).stat().st_size <= 1000
    cache.close()


def test_damaged_or_missing_bytes_are_a_miss_and_dropped(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "c", 1 << 20)
    for p in (0, 100, 200):
        cache.put("k", p, bytes([p % 251]) * 100)
    path = tmp_path / "c" / FILE_NAME
    raw = bytearray(path.read_bytes())
    raw[50] ^= 1  # one bit flipped in the first block
    path.write_bytes(bytes(raw[:250]))  # and the file cut short in the third
    damaged = _count("damaged")
    assert [cache.get("k", p, 100) for p in (0, 100, 200)] == [None, bytes([100]) * 100, None]
    assert _count("damaged") == damaged + 2 and cache.size == 100
    cache.close()


def test_an_earlier_runs_file_is_not_trusted(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "c", 1 << 20)
    cache.put("k", 0, b"a" * 100)
    cache.close()
    again = BlockCache(tmp_path / "c", 1 << 20)
    assert again.get("k", 0, 100) is None and (tmp_path / "c" / FILE_NAME).stat().st_size == 0
    again.close()


def test_a_block_that_cannot_be_written_is_not_cached_and_is_counted(tmp_path: Path) -> None:
    cache = BlockCache(tmp_path / "c", 1 << 20)
    os.close(cache._fd)  # the disk fails every write from here on
    cache._fd = os.open(tmp_path / "c" / FILE_NAME, os.O_RDONLY)
    before = _count("not_written")
    cache.put("k", 0, b"a" * 100)
    assert _count("not_written") == before + 1
    assert cache.get("k", 0, 100) is None and cache.size == 0
    cache.close()


def test_a_closed_cache_reads_and_writes_nothing(tmp_path: Path) -> None:
    """Reads still running when the gateway stops must not reach a descriptor the process has given
    to another file since: after close, a get is a miss and a put does nothing."""
    cache = BlockCache(tmp_path / "c", 1 << 20)
    cache.put("k", 0, b"a" * 100)
    cache.close()
    cache.close()  # twice is once
    assert cache.get("k", 0, 100) is None
    cache.put("k", 100, b"b" * 100)
    assert cache.size == 100


class CacheModel(RuleBasedStateMachine):
    """Any interleaving of puts, gets and damage to the file: a get returns exactly the block put at
    that key and position, or nothing; what the index holds stays within the bound."""

    def __init__(self) -> None:
        super().__init__()
        self.root = Path(os.environ.get("TMPDIR", "/tmp")) / f"block-cache-model-{os.getpid()}"
        self.cache = BlockCache(self.root, 2000)

    @staticmethod
    def _block(key: str, position: int) -> bytes:
        """An object's block at a position: always the same bytes (objects are written once)."""
        seed = hashlib.sha256(f"{key}/{position}".encode()).digest()
        return (seed * 20)[: 50 + 90 * position]

    @rule(key=st.sampled_from(["a", "b"]), position=st.integers(0, 5))
    def put(self, key: str, position: int) -> None:
        self.cache.put(key, position, self._block(key, position))

    @rule(key=st.sampled_from(["a", "b"]), position=st.integers(0, 5))
    def get(self, key: str, position: int) -> None:
        block = self._block(key, position)
        got = self.cache.get(key, position, len(block))
        assert got is None or got == block, (key, position)

    @rule(where=st.integers(0, 1999), cut=st.booleans())
    def damage(self, where: int, cut: bool) -> None:
        path = self.root / FILE_NAME
        raw = bytearray(path.read_bytes())
        if cut:
            os.truncate(path, min(where, len(raw)))
        elif where < len(raw):
            raw[where] ^= 0x10
            path.write_bytes(bytes(raw))

    @invariant()
    def within_bound(self) -> None:
        assert 0 <= self.cache.size <= 2000
        assert (self.root / FILE_NAME).stat().st_size <= 2000

    def teardown(self) -> None:
        self.cache.close()
        shutil.rmtree(self.root, ignore_errors=True)


CacheModel.TestCase.settings = settings(max_examples=80, stateful_step_count=40, deadline=None)
test_cache_model = CacheModel.TestCase
