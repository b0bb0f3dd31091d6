"""The upload rate limit bounds throughput through a real (filesystem) storage backend."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from pathlib import Path

import pytest

from processor.storage.filesystem import FilesystemChunkStorage
from processor.storage.rate_limited import ByteRateLimiter, RateLimitedChunkStorage, rate_limited


def test_uploads_through_the_limiter_stay_near_the_limit(tmp_path: Path) -> None:
    limit = 4 * 1024 * 1024  # bytes/s
    storage = RateLimitedChunkStorage(FilesystemChunkStorage(tmp_path), ByteRateLimiter(limit))
    chunk = b"x" * (512 * 1024)
    uploaded = 0
    start = time.monotonic()

    def upload(worker: int) -> None:
        nonlocal uploaded
        for i in range(6):
            storage.create(f"t/{worker}/{i}", [chunk])
            with lock:
                uploaded += len(chunk)

    lock = threading.Lock()
    threads = [threading.Thread(target=upload, args=(w,)) for w in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - start
    assert uploaded == 24 * len(chunk)  # 12 MiB
    # a deficit bucket allows one burst (1 s of rate) plus the last charge ahead of the rate:
    # 12 MiB at 4 MiB/s needs at least (12 - 4 - 0.5) / 4 s
    assert elapsed >= (uploaded - limit - len(chunk)) / limit * 0.9
    assert uploaded / elapsed <= limit * 2.0  # generous tolerance, still far below unthrottled
    assert len(list(storage.list("t/"))) == 24


def test_deficit_bucket_charges_large_objects_whole() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    limiter = ByteRateLimiter(100, clock=lambda: now[0], sleep=sleep)
    assert limiter.acquire(1000) == 0  # a full bucket: goes at once, 900 in debt
    assert limiter.acquire(10) == pytest.approx(9.0)  # waits until the debt is repaid
    assert sum(slept) == pytest.approx(9.0)


def test_unlimited_is_the_storage_itself(tmp_path: Path) -> None:
    fs = FilesystemChunkStorage(tmp_path)
    assert rate_limited(fs, -1) is fs
    with pytest.raises(ValueError):
        ByteRateLimiter(0)


def test_a_batch_delete_goes_to_the_stores_own(tmp_path: Path) -> None:
    batches: list[list[str]] = []

    class Batching(FilesystemChunkStorage):
        def delete_many(self, keys: Iterable[str]) -> None:
            batches.append(list(keys))
            super().delete_many(batches[-1])

    inner = Batching(tmp_path)
    for key in ("a/1", "a/2", "a/3"):
        inner.create(key, [b"x"])
    limited = rate_limited(inner, 1024)
    limited.delete_many(["a/1", "a/2", "a/missing"])
    assert batches == [["a/1", "a/2", "a/missing"]]  # one call, not one delete a key
    assert [i.key for i in inner.list("a/")] == ["a/3"]
