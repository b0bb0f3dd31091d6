"""Read-ahead for consumers reading the archive sequentially.

A consumer that reads a partition from the archive asks for offset X, then for the offset after the
batches it got, and so on. After answering X, the gateway reads on in a thread: ranges of
``read_bytes`` (one ranged GET each, larger than a fetch's partition limit, since S3 answers a large
GET about as fast as a small one), up to ``depth`` ranges ahead per partition; a range larger than
the next fetch may take is split, its remainder kept for the fetch after. So the consumer's next
fetch finds its answer ready instead of waiting for S3. A fetch the read-ahead has nothing for (the
first of a consumer, a seek) reads the whole blocks its limit holds, at least the one holding its
offset: one ranged GET sized to the fetch, so a cold read waits for no more than it needs.

Memory is bounded: every range read ahead reserves its byte limit (a kept remainder its size; a
range of whole blocks the archive compressed can hold more once decompressed)
against ``max_bytes`` for the whole gateway, and nothing more is read ahead while that is spent; a
range nobody asked for within ``ttl_s`` is dropped. Reading ahead starts with a partition's second
fetch in a row (a fetch at the offset where the previous answer ended): a consumer that seeks to
read a few records reads nothing more than it asked for. It starts small, as an operating system's
read-ahead does: one range of twice the fetch's limit, each range a fetch takes doubling the next, up
to ``read_bytes`` and ``depth`` ranges ahead. A Kafka client fetches on after a seek until the
application moves on (librdkafka fills its queue), so a reader of a hundred records at random
offsets looks sequential for a fetch or two: at full size from the start, each such read started
24 MiB of GETs nobody took, and the next random read waited behind them (p99 75 -> 85 ms). A read
ahead that fails is dropped too: the consumer's own fetch reads again and reports the failure.

Written here rather than taken from a library: it is a small map of futures keyed by where a
consumer will ask next, tied to the archive reader's own answer (the next offset is only known once
the previous range is read).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from processor import metrics
from processor.kafka.partition import TopicPartition
from processor.reader.remote_reader import ArchivedBatches
from processor.segment.entries_v2 import batch_last_offset

log = logging.getLogger(__name__)

Key = tuple[TopicPartition, int, str | None]  # partition, offset, topic id
Read = Callable[[TopicPartition, int, int, str | None], ArchivedBatches | None]
MiB = 1024 * 1024
MAX_PARTITIONS_TRACKED = 100_000


@dataclass
class _Ahead:
    task: asyncio.Future[ArchivedBatches | None]
    reserved: int
    started: float


class Prefetcher:
    def __init__(
        self,
        read: Read,
        max_bytes: int = 128 * MiB,
        depth: int = 3,
        # 8 MiB ranges, 128 MiB in all (eight partitions two ranges ahead): measured on a 0.25 GiB
        # read of eight partitions through the gateway, 4 MiB / 64 MiB 93-99 MB/s, 8 / 128 106-109
        # (a third fewer GETs: less CPU in botocore and SeaweedFS), 8 / 64 77-86 (ranges refused at
        # the bound, so fetches missed), 16 / 256 79 (a longer first read)
        read_bytes: int = 8 * MiB,
        ttl_s: float = 30.0,
        read_ahead: Read | None = None,
    ) -> None:
        self.read = read
        # how a range is read ahead, and a fetch nothing was read ahead for (default: ``read``):
        # whole blocks, so the next range starts at a block's first batch and no block is fetched
        # twice
        self.read_ahead = read if read_ahead is None else read_ahead
        self.max_bytes = max_bytes
        self.depth = depth
        self.read_bytes = read_bytes
        self.ttl_s = ttl_s
        self.reserved = 0
        self._ahead: dict[Key, _Ahead] = {}
        # where each partition's last answer ended: a fetch there is sequential reading
        self._next: dict[tuple[TopicPartition, str | None], int] = {}
        # the size of each sequentially read partition's next range (doubles with each one taken)
        self._window: dict[tuple[TopicPartition, str | None], int] = {}
        self.hits = 0
        self.misses = 0

    async def get(
        self, tp: TopicPartition, offset: int, limit: int, topic_id: str | None
    ) -> ArchivedBatches | None:
        """The archive's answer at ``offset`` within ``limit`` bytes (read ahead, or read now), then
        read ahead after it."""
        self._expire()
        key = (tp, offset, topic_id)
        ahead = self._ahead.pop(key, None)
        # A range taken keeps its reservation until its remainder is kept: released at once, other
        # partitions' read-ahead took it while this one awaited, and the remainder (already read)
        # was dropped and read again from S3 by the next fetch (measured: two misses in three).
        held = ahead.reserved if ahead is not None else 0
        hit = False
        try:
            got: ArchivedBatches | None = None
            if ahead is not None:
                try:
                    got = await ahead.task
                except Exception as exc:  # read again below, where the failure is reported
                    log.debug("read ahead of %s at %d failed: %s", tp, offset, exc)
                hit = got is not None
            if got is None:
                # whole blocks within the fetch's limit (at least one): a seek GETs the block
                # holding its offset, not the next one too, and a fetch after it starts at a
                # block's first batch (cut at the limit, every miss fetched its last block twice)
                got = await asyncio.to_thread(self.read_ahead, tp, offset, limit, topic_id)
            if got is None or not got.batches:
                return got  # not archived (yet): neither a hit nor a miss of the read-ahead
            if hit:
                self.hits += 1
            else:
                self.misses += 1
            metrics.GATEWAY_PREFETCH.labels("hit" if hit else "miss").inc()
            head, rest = split(got, limit)
            if rest is not None:
                self._keep(tp, head.next_offset, topic_id, rest, credit=held)
        finally:
            self.reserved -= held
        part = (tp, topic_id)
        sequential = ahead is not None or self._next.get(part) == offset
        self._next[part] = head.next_offset
        for tracked in (self._next, self._window):
            if len(tracked) > MAX_PARTITIONS_TRACKED:
                tracked.pop(next(iter(tracked)))
        if not sequential:  # a seek (a random read) reads nothing ahead: it would only slow the next
            self._window.pop(part, None)
            return head
        window = self._window.get(part)
        if window is None:
            window = min(self.read_bytes, 2 * limit)
        elif hit:
            window = min(self.read_bytes, 2 * window)
        self._window[part] = window
        self._extend(tp, head.next_offset, topic_id)
        return head

    def _extend(self, tp: TopicPartition, offset: int, topic_id: str | None) -> None:
        """Walk the ranges already read ahead from ``offset`` and start the next one, unless
        ``depth`` ranges are ahead or one is still being read (its completion goes on)."""
        for depth in range(1, self.depth + 1):
            ahead = self._ahead.get((tp, offset, topic_id))
            if ahead is None:
                self._start(tp, offset, topic_id, depth)
                return
            task = ahead.task
            if not task.done() or task.cancelled() or task.exception() is not None:
                return
            result = task.result()
            if result is None or not result.batches:
                return
            offset = result.next_offset

    def _keep(
        self, tp: TopicPartition, offset: int, topic_id: str | None, rest: ArchivedBatches, credit: int = 0
    ) -> None:
        """A range's remainder, ready for the fetch that comes next (if the bound allows, counting
        ``credit``: the reservation of the range it comes from, released after)."""
        key = (tp, offset, topic_id)
        if key in self._ahead or self.reserved - credit + rest.size > self.max_bytes:
            return
        done: asyncio.Future[ArchivedBatches | None] = asyncio.get_running_loop().create_future()
        done.set_result(rest)
        self._ahead[key] = _Ahead(done, rest.size, time.monotonic())
        self.reserved += rest.size

    def _start(self, tp: TopicPartition, offset: int, topic_id: str | None, depth: int) -> None:
        key = (tp, offset, topic_id)
        size = self._window.get((tp, topic_id), self.read_bytes)
        # until full size, one range read ahead (beyond a kept remainder)
        depth_now = self.depth if size >= self.read_bytes else min(2, self.depth)
        if depth > depth_now or key in self._ahead or self.reserved + size > self.max_bytes:
            return
        task = asyncio.ensure_future(asyncio.to_thread(self.read_ahead, tp, offset, size, topic_id))
        self._ahead[key] = _Ahead(task, size, time.monotonic())
        self.reserved += size

        def chained(done: asyncio.Future[ArchivedBatches | None]) -> None:
            if done.cancelled() or done.exception() is not None:  # read, so never "unretrieved"
                return
            result = done.result()
            # chained only at full size: while the window grows, the consumer's fetches (taking
            # what was read) start the next range, so nothing is read for a reader gone after one
            full = self._window.get((tp, topic_id), 0) >= self.read_bytes
            if result is not None and result.batches and key in self._ahead and full:
                self._start(tp, result.next_offset, topic_id, depth + 1)

        task.add_done_callback(chained)

    def _expire(self) -> None:
        now = time.monotonic()
        for key, ahead in list(self._ahead.items()):
            if now - ahead.started > self.ttl_s:
                del self._ahead[key]
                self.reserved -= ahead.reserved
                ahead.task.cancel()

    def close(self) -> None:
        for ahead in self._ahead.values():
            ahead.task.cancel()
        self._ahead.clear()
        self.reserved = 0


def split(got: ArchivedBatches, limit: int) -> tuple[ArchivedBatches, ArchivedBatches | None]:
    """The whole batches that fit in ``limit`` bytes (at least one), and the rest (None if none)."""
    if got.size <= limit:
        return got, None
    size = 0
    cut = 0
    for batch in got.batches:
        if cut and size + len(batch) > limit:
            break
        size += len(batch)
        cut += 1
    head = ArchivedBatches(got.batches[:cut], batch_last_offset(got.batches[cut - 1]) + 1, size)
    if cut == len(got.batches):
        return head, None
    return head, ArchivedBatches(got.batches[cut:], got.next_offset, got.size - size)
