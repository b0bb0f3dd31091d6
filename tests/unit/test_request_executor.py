"""The web requests' pool: bounded, a 503 beyond its queue, and separate from the default executor."""

from __future__ import annotations

import asyncio
import threading

from processor.web.handlers import Reply
from processor.web.request_executor import RequestExecutor


def test_requests_beyond_the_queue_get_503_and_the_rest_complete() -> None:
    release = threading.Event()
    started = threading.Semaphore(0)

    def slow() -> Reply:
        started.release()
        release.wait(10)
        return Reply(200, {"ok": True})

    async def scenario() -> list[int]:
        executor = RequestExecutor("read", workers=2, queued=1)
        try:
            admitted = [asyncio.create_task(executor.run(slow)) for _ in range(3)]
            await asyncio.sleep(0)  # the three are admitted before anything else runs
            for _ in range(2):
                await asyncio.to_thread(started.acquire)  # both workers busy
            refused = await executor.run(slow)
            assert refused.status == 503 and refused.headers["Retry-After"] == "1"
            assert executor.admitted == 3
            release.set()
            replies = await asyncio.gather(*admitted)
            assert executor.admitted == 0
            return [r.status for r in replies]
        finally:
            executor.close()

    assert asyncio.run(scenario()) == [200, 200, 200]


def test_requests_do_not_use_the_default_executor() -> None:
    names: list[str] = []

    def which() -> Reply:
        names.append(threading.current_thread().name)
        return Reply(200, {})

    async def scenario() -> None:
        executor = RequestExecutor("read-api")
        try:
            await executor.run(which)
        finally:
            executor.close()

    asyncio.run(scenario())
    assert names[0].startswith("read-api")
