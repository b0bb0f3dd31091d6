"""Upload rate limit (``PROCESSOR_UPLOAD_BYTES_PER_SECOND``, per worker), at the storage layer.

Kafka's equivalent is ``remote.log.manager.copy.max.bytes.per.second`` (KIP-956): a copy waits for
quota before it starts, and its bytes are charged to the quota. Here every ``create`` (each data and
index object of a segment) is charged with its size to one token bucket shared by all copy threads.

Why a small class instead of a library (checked on PyPI: pyrate-limiter, limits, token-bucket):
the weights here are object sizes, megabytes each. pyrate-limiter's in-memory buckets store one
entry per unit of weight (tens of millions of entries for one segment), and all three refuse a cost
above the bucket's capacity and offer no blocking, thread-shared wait for it. What is needed is a
*deficit* token bucket: a caller waits until the balance is non-negative, then takes its whole cost
at once (the balance may go negative, and the next caller waits for the debt to be repaid). That
bounds the long-run rate at ``rate`` bytes/s plus one burst, whatever the object sizes, in ~30 lines.
"""

from __future__ import annotations

import builtins
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

from processor.storage.chunk_storage import Buffer, ChunkInfo, ChunkStorage, MultipartUpload


class ByteRateLimiter:
    """A blocking deficit token bucket, shared by threads. ``burst_bytes`` caps what an idle
    period can save up (default: one second of rate)."""

    def __init__(
        self,
        bytes_per_second: int,
        burst_bytes: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if bytes_per_second <= 0:
            raise ValueError("bytes_per_second must be positive")
        self.rate = float(bytes_per_second)
        self.burst = float(burst_bytes if burst_bytes is not None else bytes_per_second)
        self._clock = clock
        self._sleep = sleep
        self._balance = self.burst
        self._last = clock()
        self._lock = threading.Lock()

    def _refill(self) -> None:
        now = self._clock()
        self._balance = min(self.burst, self._balance + (now - self._last) * self.rate)
        self._last = now

    def acquire(self, nbytes: int) -> float:
        """Wait until the bucket is out of debt, then charge ``nbytes``; returns the seconds waited."""
        waited = 0.0
        while True:
            with self._lock:
                self._refill()
                if self._balance >= 0:
                    self._balance -= nbytes
                    return waited
                delay = -self._balance / self.rate
            self._sleep(delay)
            waited += delay


class RateLimitedChunkStorage(ChunkStorage):
    """Charges every ``create`` (upload) to a :class:`ByteRateLimiter`; everything else passes through."""

    def __init__(self, inner: ChunkStorage, limiter: ByteRateLimiter) -> None:
        self.inner = inner
        self.limiter = limiter
        self.supports_concat = inner.supports_concat

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        self.limiter.acquire(sum(len(memoryview(p).cast("B")) for p in parts))
        return self.inner.create(key, parts)

    def read(self, key: str, offset: int, length: int) -> bytes:
        return self.inner.read(key, offset, length)

    def stat(self, key: str) -> ChunkInfo | None:
        return self.inner.stat(key)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        self.inner.delete_many(keys)  # the store's batch delete (no bytes to limit)

    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        return self.inner.list(prefix)

    def concat(self, target: str, sources: Sequence[str]) -> ChunkInfo:
        return self.inner.concat(target, sources)

    def list_multipart_uploads(self, prefix: str) -> builtins.list[MultipartUpload]:
        return self.inner.list_multipart_uploads(prefix)

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        self.inner.abort_multipart_upload(key, upload_id)

    def check_bucket(self) -> None:
        self.inner.check_bucket()

    def close(self) -> None:
        self.inner.close()


def rate_limited(storage: ChunkStorage, bytes_per_second: int) -> ChunkStorage:
    """``storage`` with uploads limited to ``bytes_per_second``; unchanged when it is -1 (unlimited)."""
    if bytes_per_second < 0:
        return storage
    return RateLimitedChunkStorage(storage, ByteRateLimiter(bytes_per_second))
