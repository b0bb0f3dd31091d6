"""The offload engine's thread and event loop, and calls into it from other threads.

One engine thread runs an asyncio loop (:meth:`EngineLoop._main`, given by the engine). Control calls
from other threads are coroutines submitted to that loop with ``asyncio.run_coroutine_threadsafe``,
i.e. ``concurrent.futures.Future`` results, bounded by a timeout. A crash of the loop is kept in
``failure`` and reported to health (fatal), so the worker's watch stops the worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

from processor.errors import ProcessorError
from processor.health import HEALTH

log = logging.getLogger(__name__)
T = TypeVar("T")


class EngineLoop:
    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_event: asyncio.Event | None = None
        self._ready: Future[None] = Future()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    async def _main(self) -> None:
        """The engine's work on its loop; calls :meth:`_started` once it can take calls."""
        raise NotImplementedError

    def _started(self) -> None:
        self._ready.set_result(None)

    def _start_thread(self, timeout_s: float) -> None:
        self._thread = threading.Thread(target=self._run, name="offload-engine", daemon=True)
        self._thread.start()
        self._ready.result(timeout_s)  # raises what kept the engine from starting

    def _stop_thread(self, timeout_s: float) -> None:
        loop, stop_event = self._loop, self._stop_event
        if loop is not None and stop_event is not None and not loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop already ended
                loop.call_soon_threadsafe(stop_event.set)
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _call(self, coro: Coroutine[Any, Any, T], timeout_s: float) -> T:
        loop = self._loop
        if loop is None or self._thread is None or not self._thread.is_alive():
            coro.close()
            raise ProcessorError("the offload engine is not running")
        future = asyncio.run_coroutine_threadsafe(coro, loop)
        try:
            return future.result(timeout_s)
        except TimeoutError:
            future.cancel()
            raise ProcessorError(
                f"offload engine did not complete the call within {timeout_s:.0f} s"
            ) from None

    def _fail(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = exc
        HEALTH.report("data_path", f"offload engine failed: {type(exc).__name__}: {exc}", fatal=True)

    def _run(self) -> None:
        try:
            asyncio.run(self._enter())
        except BaseException as exc:  # surfaced through .failure, health and the worker's exit code
            log.exception("offload engine crashed")
            self._fail(exc)
            if not self._ready.done():
                self._ready.set_exception(exc)

    async def _enter(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop_event = asyncio.Event()
        await self._main()

    async def _until_stopped(self, tasks: list[asyncio.Task[Any]]) -> None:
        """Run ``tasks`` until stop is asked or one of them ends (raising its error)."""
        assert self._stop_event is not None
        stopper = asyncio.create_task(self._stop_event.wait())
        try:
            done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                if task is not stopper:
                    task.result()  # a task that ended on its own: raise its error
                    raise ProcessorError("an offload engine task ended unexpectedly")
        finally:
            for task in [*tasks, stopper]:
                task.cancel()
            await asyncio.gather(*tasks, stopper, return_exceptions=True)
