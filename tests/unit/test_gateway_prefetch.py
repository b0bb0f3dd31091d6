"""The gateway's read-ahead: a sequential reader finds its next ranges read, memory stays within the
bound, a failed read ahead is read again (and then fails where the consumer sees it)."""

from __future__ import annotations

import asyncio
import struct
import threading

import pytest

from processor.gateway.prefetch import Prefetcher
from processor.kafka.partition import TopicPartition
from processor.reader.remote_reader import ArchivedBatches

TP = TopicPartition("orders", 0)
PER_BATCH = 10  # offsets per batch
BATCH_BYTES = 100


def _batch(base: int) -> memoryview:
    """A record batch's first 27 bytes as the prefetcher reads them (base offset, lastOffsetDelta)."""
    head = bytearray(BATCH_BYTES)
    struct.pack_into(">q", head, 0, base)
    struct.pack_into(">i", head, 23, PER_BATCH - 1)
    return memoryview(bytes(head))


class Archive:
    def __init__(self, end: int = 10_000, fail_at: set[int] | None = None) -> None:
        self.end = end
        self.reads: list[int] = []
        self.limits: list[int] = []
        self.fail_at = fail_at or set()
        self.lock = threading.Lock()

    def read(
        self, tp: TopicPartition, offset: int, limit: int, topic_id: str | None
    ) -> ArchivedBatches | None:
        with self.lock:
            self.reads.append(offset)
            self.limits.append(limit)
        if offset in self.fail_at:
            raise OSError(f"injected: cannot read {offset}")
        if offset >= self.end:
            return None
        base = offset - offset % PER_BATCH
        batches = [
            _batch(b)
            for b in range(base, min(self.end, base + PER_BATCH * max(1, limit // BATCH_BYTES)), PER_BATCH)
        ]
        last = int.from_bytes(batches[-1][:8], "big") + PER_BATCH
        return ArchivedBatches(batches, last, BATCH_BYTES * len(batches))


async def _read_sequentially(prefetcher: Prefetcher, start: int, fetches: int, limit: int) -> list[int]:
    offset, seen = start, []
    for _ in range(fetches):
        got = await prefetcher.get(TP, offset, limit, None)
        assert got is not None
        seen.append(offset)
        offset = got.next_offset
        await asyncio.sleep(0.01)  # the consumer works on what it got; the read ahead runs meanwhile
        assert prefetcher.reserved <= prefetcher.max_bytes
    return seen


def test_a_sequential_reader_finds_its_next_ranges_read_ahead() -> None:
    archive = Archive()
    prefetcher = Prefetcher(archive.read, max_bytes=10_000, depth=2, read_bytes=500)
    seen = asyncio.run(_read_sequentially(prefetcher, 0, 20, 500))
    assert seen == list(range(0, 20 * 50, 50))
    assert prefetcher.misses == 2 and prefetcher.hits == 18  # reading ahead starts at the second


def test_a_fetch_past_the_archives_end_is_neither_a_hit_nor_a_miss() -> None:
    """A consumer at the archive's end fetches on (the broker answers it): those reads find nothing
    and say nothing of the read-ahead."""
    archive = Archive(end=100)
    prefetcher = Prefetcher(archive.read, max_bytes=10_000, depth=2, read_bytes=500)

    async def run() -> None:
        for _ in range(5):
            assert await prefetcher.get(TP, 100, 500, None) is None

    asyncio.run(run())
    assert (prefetcher.hits, prefetcher.misses) == (0, 0) and archive.reads == [100] * 5


def test_a_seek_reads_nothing_ahead() -> None:
    archive = Archive()
    prefetcher = Prefetcher(archive.read, max_bytes=10_000, depth=2, read_bytes=500)

    async def run() -> None:
        for offset in (1000, 5000, 300, 7000):  # random reads, one fetch each
            await prefetcher.get(TP, offset, 500, None)
            await asyncio.sleep(0.01)

    asyncio.run(run())
    assert archive.reads == [1000, 5000, 300, 7000]
    prefetcher.close()
    prefetcher.close()


def test_read_ahead_stays_within_its_byte_bound() -> None:
    archive = Archive()
    prefetcher = Prefetcher(archive.read, max_bytes=500, depth=4, read_bytes=500)  # one range ahead
    asyncio.run(_read_sequentially(prefetcher, 0, 10, 500))
    assert prefetcher.hits >= 1
    prefetcher.close()
    assert prefetcher.reserved == 0


def test_a_failed_read_ahead_is_read_again_and_its_failure_reaches_the_consumer() -> None:
    archive = Archive(fail_at={100})
    prefetcher = Prefetcher(archive.read, max_bytes=10_000, read_bytes=500)

    async def run() -> None:
        await prefetcher.get(TP, 0, 500, None)
        got = await prefetcher.get(TP, 50, 500, None)  # sequential: 100 is read ahead, and fails
        assert got is not None and got.next_offset == 100
        await asyncio.sleep(0.05)
        with pytest.raises(OSError, match="cannot read 100"):
            await prefetcher.get(TP, 100, 500, None)

    asyncio.run(run())
    assert archive.reads.count(100) == 2  # ahead, then the consumer's own
    prefetcher.close()


def test_a_range_read_ahead_larger_than_a_fetch_is_split_and_its_rest_kept_for_the_next() -> None:
    """Ranges are read ahead in large GETs; each fetch takes the whole batches its limit allows
    and the rest waits for the fetch after it, without another read."""
    archive = Archive()
    prefetcher = Prefetcher(archive.read, max_bytes=10_000, depth=1, read_bytes=1_000)

    async def run() -> list[ArchivedBatches | None]:
        out = [await prefetcher.get(TP, 0, 150, None)]  # a miss: reads just what it may return
        out.append(await prefetcher.get(TP, 10, 150, None))  # sequential: reading ahead starts
        await asyncio.sleep(0.05)
        for offset in (20, 30):
            out.append(await prefetcher.get(TP, offset, 150, None))
        return out

    got = asyncio.run(run())
    assert [(g.size, g.next_offset) for g in got if g is not None] == [
        (100, 10),
        (100, 20),
        (100, 30),
        (100, 40),
    ]
    assert archive.reads == [0, 10, 20]  # 20..119 in one read ahead, split over the fetches
    assert prefetcher.hits == 2
    prefetcher.close()


def test_read_ahead_starts_at_twice_a_fetch_and_doubles_with_each_range_taken() -> None:
    """Like an operating system's read-ahead: a reader that goes on sequentially gets ranges of
    2, 4, 8 fetches (up to read_bytes, then depth ranges ahead); one that seeks after two fetches
    (a Kafka client fetches on until its application moves on) costs one range of two fetches."""
    archive = Archive(end=100_000)
    prefetcher = Prefetcher(archive.read, max_bytes=100_000, depth=2, read_bytes=800)
    asyncio.run(_read_sequentially(prefetcher, 0, 30, 100))
    ahead = archive.limits[2:]  # the first two fetches read what they return (100 bytes each)
    assert archive.limits[:2] == [100, 100] and ahead[:3] == [200, 400, 800]
    assert set(ahead[3:]) == {800} and prefetcher.misses == 2
    prefetcher.close()

    archive = Archive(end=100_000)
    prefetcher = Prefetcher(archive.read, max_bytes=100_000, depth=2, read_bytes=800)

    async def seeks() -> None:
        for start in (1000, 50_000, 3000, 70_000):
            got = await prefetcher.get(TP, start, 100, None)
            assert got is not None
            await prefetcher.get(TP, got.next_offset, 100, None)  # the client's next fetch
            await asyncio.sleep(0.02)

    asyncio.run(seeks())
    assert sum(archive.limits) == 4 * (100 + 100 + 200)  # each seek: two fetches, one small range
    prefetcher.close()
