"""The web requests' own bounded thread pool: reads and ``POST /offload`` never borrow the threads
that rebalance callbacks, retention and the S3 client share (the event loop's default executor).

At most ``workers`` requests run at once and at most ``queued`` more wait; a request beyond that is
answered at once with 503 and ``Retry-After`` instead of queueing without bound (a slow S3 would
otherwise pile up requests, memory and client time-outs).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import Callable

from processor.web.handlers import Reply

DEFAULT_WORKERS = 4
DEFAULT_QUEUED = 16
RETRY_AFTER_S = 1


class RequestExecutor:
    def __init__(self, name: str, workers: int = DEFAULT_WORKERS, queued: int = DEFAULT_QUEUED) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name)
        self._limit = workers + queued
        self._admitted = 0
        self.name = name

    @property
    def admitted(self) -> int:
        """Requests running or waiting now."""
        return self._admitted

    async def run(self, fn: Callable[..., Reply], *args: object) -> Reply:
        """``fn(*args)`` on the pool, or a 503 when the pool and its queue are full."""
        if self._admitted >= self._limit:
            return Reply(
                503,
                {"error": f"too many {self.name} requests in progress; retry shortly"},
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        self._admitted += 1  # only the event loop thread counts: no lock needed
        try:
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._pool, functools.partial(fn, *args))
        finally:
            self._admitted -= 1

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
