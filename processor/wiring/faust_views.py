"""The HTTP views of the worker, on its Faust app (Faust owns the worker's web server).

The handlers are :mod:`processor.web.handlers` (framework-free, shared with the read-only follower's
aiohttp server). Blocking work (RocksDB lookups, S3 reads, an offload) runs on the requests' own
bounded pools (:mod:`processor.web.request_executor`), never on the event loop nor in its default
executor, so ``/livez`` keeps answering while a read waits on S3 and a burst of requests never
delays rebalance callbacks or retention (beyond the pool's queue: 503 with Retry-After).

``POST /offload?topic=T[&partition=P][&timeout_s=S]`` (``processor offload``) runs
:func:`processor.lifecycle.offload_now.offload_now`. Answer:
``{"partitions": {"P": {"target": N, "remote_end": M, "done": bool}}}``, only partitions this worker
leads (another worker answers for the others); 400 on bad input; 401 without the bearer token the
reads need (see :func:`processor.wiring.startup.read_api_token`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import faust
from faust.web import Request, View

from processor.config import Settings
from processor.errors import InvalidNameError
from processor.kafka.clients import new_consumer
from processor.leader.offload_engine import OffloadEngine
from processor.lifecycle.offload_now import offload_now
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import validate_topic
from processor.web import handlers
from processor.web.handlers import FailureCheck, Reply, authorized
from processor.web.request_executor import RequestExecutor
from processor.web.servers import ExtraStatus

MAX_OFFLOAD_TIMEOUT_S = 3600.0


def _faust_response(view: Any, reply: Reply) -> Any:
    if isinstance(reply.body, bytes):
        return view.bytes(
            reply.body, content_type=reply.content_type, status=reply.status, headers=reply.headers
        )
    return view.json(reply.body, status=reply.status, headers=reply.headers or None)


def register_faust_views(
    app: faust.App,
    checks: Mapping[str, FailureCheck],
    extra: ExtraStatus | None = None,
    reader: RemoteReader | None = None,
    token: str | None = None,
) -> None:
    @app.page("/livez")
    async def livez_view(view: Any, request: Any) -> Any:
        return _faust_response(view, handlers.livez())

    async def ready(view: Any, request: Any) -> Any:
        return _faust_response(view, handlers.readyz(checks, extra() if extra else None))

    app.page("/readyz")(ready)
    app.page("/healthz")(ready)

    @app.page("/metrics")
    async def metrics_view(view: Any, request: Any) -> Any:
        return _faust_response(view, handlers.metrics_reply())

    if reader is None:
        return

    # The reads' own bounded pool (process lifetime): never the default executor that rebalance
    # callbacks, retention and the S3 client share.
    executor = RequestExecutor("read-api")

    def guarded(handler: Callable[[RemoteReader, Mapping[str, str]], Reply]) -> Any:
        async def page(view: Any, request: Any) -> Any:
            denied = handlers.authorized(token, request.headers)
            if denied is not None:
                return _faust_response(view, denied)
            reply = await executor.run(handler, reader, dict(request.query))
            return _faust_response(view, reply)

        return page

    app.page("/segments")(guarded(handlers.segments))
    app.page("/fetch")(guarded(handlers.fetch))


def add_offload_view(app: faust.App, engine: OffloadEngine, settings: Settings, token: str | None) -> None:
    # Its own small pool: an offload request waits up to timeout_s for its copies to finish.
    executor = RequestExecutor("offload", workers=2, queued=4)

    def offload(topic: str, partition: int | None, timeout_s: float) -> Reply:
        def open_consumer() -> Any:
            return new_consumer(settings.kafka, f"{settings.worker_id}-offload")

        return Reply(200, {"partitions": offload_now(engine, open_consumer, topic, partition, timeout_s)})

    class OffloadView(View):
        async def post(self, request: Request, **kwargs: Any) -> Any:  # a faust Response
            denied = authorized(token, request.headers)  # the same token as the reads
            if denied is not None:
                return _faust_response(self, denied)
            try:
                topic = validate_topic(request.query.get("topic", ""))
                raw_partition = request.query.get("partition")
                partition = None if raw_partition is None else int(raw_partition)
                timeout_s = float(request.query.get("timeout_s", "120"))
                if partition is not None and not 0 <= partition <= handlers.INT32_MAX:
                    raise ValueError(f"partition must be between 0 and {handlers.INT32_MAX}")
                if not 0 < timeout_s <= MAX_OFFLOAD_TIMEOUT_S:  # also false for nan
                    raise ValueError(f"timeout_s must be in (0, {MAX_OFFLOAD_TIMEOUT_S:.0f}]")
            except (ValueError, InvalidNameError) as exc:
                return self.json({"error": str(exc)}, status=400)
            return _faust_response(self, await executor.run(offload, topic, partition, timeout_s))

    app.page("/offload")(OffloadView)
