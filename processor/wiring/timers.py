"""The worker's periodic tasks, as Faust timers: the data-path watch, the segment-state gauges, and
the lifecycle (multipart sweep at start, retention pass every PROCESSOR_RETENTION_CHECK_MS)."""

from __future__ import annotations

import asyncio
import logging

import faust

from processor.errors import ProcessorError
from processor.follower.materializer import Materializer
from processor.health import HEALTH
from processor.leader.engine_gauges import publish_engine_gauges
from processor.leader.leadership import Leadership
from processor.leader.offload_engine import OffloadEngine
from processor.lifecycle.retention_service import HEALTH_COMPONENT
from processor.lifecycle.worker_tasks import LifecycleTasks

log = logging.getLogger(__name__)

WATCH_INTERVAL_S = 5.0
GAUGES_INTERVAL_S = 2.0


RECLAIM_INTERVAL_S = 5.0


def add_data_path_timers(
    app: faust.App,
    engine: OffloadEngine,
    materializer: Materializer | None,
    leadership: Leadership | None = None,
) -> None:
    @app.timer(WATCH_INTERVAL_S)  # type: ignore[untyped-decorator]
    async def watch_engine() -> None:
        failure = (
            engine.failure
            or (materializer.failure if materializer else None)
            or (leadership.failure if leadership else None)
        )
        if failure is not None:
            log.error("the worker's data path failed: %s; stopping the worker", failure)
            await app.crash(failure)

    @app.timer(GAUGES_INTERVAL_S)  # type: ignore[untyped-decorator]
    async def publish_segment_states() -> None:
        publish_engine_gauges(engine)

    if leadership is not None:

        @app.timer(RECLAIM_INTERVAL_S)  # type: ignore[untyped-decorator]
        async def reclaim() -> None:
            """Claim again what Faust assigns here and another claim released or left quiet."""
            try:
                await asyncio.get_running_loop().run_in_executor(None, leadership.reclaim)
            except ProcessorError as exc:  # Kafka unreachable now: the next tick tries again
                log.warning("claiming partitions again failed: %s", exc)


def add_lifecycle_timers(app: faust.App, tasks: LifecycleTasks, retention_check_ms: int) -> None:
    @app.task  # type: ignore[untyped-decorator]
    async def sweep_on_start() -> None:
        await asyncio.get_running_loop().run_in_executor(None, tasks.sweep)

    @app.timer(retention_check_ms / 1000.0)  # type: ignore[untyped-decorator]
    async def retention_pass() -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(None, tasks.run_once)
        except Exception as exc:  # not a ProcessorError: a bug, never a silent loop; stop the worker
            log.exception("the retention pass failed unexpectedly; stopping the worker")
            HEALTH.report(HEALTH_COMPONENT, f"unexpected error: {exc!r}", fatal=True)
            await app.crash(exc)
