"""Read-ahead for consumers reading the archive sequentially.

A consumer that reads a partition from the archive asks for offset X, then for the offset after the
batches it got, and so on. After answering X, the gateway starts reading the next range in a thread
(a ranged GET) and then the one after it (``depth`` ranges ahead per partition), so the consumer's
next fetch finds its answer ready instead of waiting for S3. Memory is bounded: every read ahead
reserves its byte limit against ``max_bytes`` for the whole gateway, and nothing is read ahead while
that is spent; a read ahead nobody asked for within ``ttl_s`` is dropped. A read ahead that fails is
dropped too: the consumer's own fetch reads again and reports the failure.

Written here rather than taken from a library: it is a small map of futures keyed by where a
consumer will ask next, tied to the archive reader's own answer (the next offset is only known
once the previous range is read).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from processor import metrics
from processor.metadata.model import TopicPartition
from processor.reader.remote_reader import ArchivedBatches

log = logging.getLogger(__name__)

Key = tuple[TopicPartition, int, str | None]  # partition, offset, topic id
Read = Callable[[TopicPartition, int, int, str | None], ArchivedBatches | None]


@dataclass
class _Ahead:
    task: asyncio.Task[ArchivedBatches | None]
    limit: int
    depth: int  # how far ahead of the consumer's last fetch (1: the next one)
    started: float


class Prefetcher:
    def __init__(
        self, read: Read, max_bytes: int = 64 * 1024 * 1024, depth: int = 2, ttl_s: float = 30.0
    ) -> None:
        self.read = read
        self.max_bytes = max_bytes
        self.depth = depth
        self.ttl_s = ttl_s
        self.reserved = 0
        self._ahead: dict[Key, _Ahead] = {}
        self.hits = 0
        self.misses = 0

    async def get(
        self, tp: TopicPartition, offset: int, limit: int, topic_id: str | None
    ) -> ArchivedBatches | None:
        """The archive's answer at ``offset`` (read ahead, or read now), then read ahead after it."""
        self._expire()
        ahead = self._ahead.pop((tp, offset, topic_id), None)
        got: ArchivedBatches | None = None
        if ahead is not None:
            self.reserved -= ahead.limit
            if ahead.limit >= limit:
                try:
                    got = await ahead.task
                    self.hits += 1
                    metrics.GATEWAY_PREFETCH.labels("hit").inc()
                except Exception as exc:  # read again below, where the failure is reported
                    log.debug("read ahead of %s at %d failed: %s", tp, offset, exc)
            else:
                ahead.task.cancel()
        if got is None:
            self.misses += 1
            metrics.GATEWAY_PREFETCH.labels("miss").inc()
            got = await asyncio.to_thread(self.read, tp, offset, limit, topic_id)
        if got is not None and got.batches:
            self._start(tp, got.next_offset, limit, topic_id, 1)
        return _trimmed(got, limit)

    def _start(self, tp: TopicPartition, offset: int, limit: int, topic_id: str | None, depth: int) -> None:
        key = (tp, offset, topic_id)
        if depth > self.depth or key in self._ahead or self.reserved + limit > self.max_bytes:
            return
        task = asyncio.ensure_future(asyncio.to_thread(self.read, tp, offset, limit, topic_id))
        self._ahead[key] = _Ahead(task, limit, depth, time.monotonic())
        self.reserved += limit

        def chained(done: asyncio.Task[ArchivedBatches | None]) -> None:
            if done.cancelled() or done.exception() is not None:  # read, so never "unretrieved"
                return
            result = done.result()
            if result is not None and result.batches and key in self._ahead:
                self._start(tp, result.next_offset, limit, topic_id, depth + 1)

        task.add_done_callback(chained)

    def _expire(self) -> None:
        now = time.monotonic()
        for key, ahead in list(self._ahead.items()):
            if now - ahead.started > self.ttl_s:
                del self._ahead[key]
                self.reserved -= ahead.limit
                ahead.task.cancel()

    def close(self) -> None:
        for ahead in self._ahead.values():
            ahead.task.cancel()
        self._ahead.clear()
        self.reserved = 0


def _trimmed(got: ArchivedBatches | None, limit: int) -> ArchivedBatches | None:
    """At most ``limit`` bytes (whole batches, at least one): a read ahead may have used a larger
    limit than this fetch allows."""
    if got is None or got.size <= limit:
        return got
    kept: list[memoryview] = []
    size = 0
    for batch in got.batches:
        if kept and size + len(batch) > limit:
            break
        kept.append(batch)
        size += len(batch)
    last = kept[-1]
    next_offset = (
        int.from_bytes(last[:8], "big", signed=True) + int.from_bytes(last[23:27], "big", signed=True) + 1
    )
    return ArchivedBatches(kept, next_offset, size)
