"""The handlers of :mod:`processor.web.handlers` mounted on a bare aiohttp application.

- :func:`follower_web_app`: for ``processor follower``, which runs no Faust app (it holds no
  leadership). aiohttp is what Faust's web server uses underneath.
- On the worker, Faust owns the web server: the same handlers are registered as Faust views by the
  composition root (processor/wiring/faust_views.py), the only package that knows Faust.

Blocking work (RocksDB lookups, S3 reads) runs on the reads' own bounded pool
(:mod:`processor.web.request_executor`), never on the event loop nor in its default executor, so
``/livez`` keeps answering while a read waits on S3 and a burst of reads gets 503, not a queue.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from processor.reader.remote_reader import RemoteReader
from processor.web import handlers
from processor.web.handlers import FailureCheck, Reply
from processor.web.request_executor import RequestExecutor

ExtraStatus = Callable[[], Mapping[str, Any]]


def _aiohttp_response(reply: Reply) -> web.Response:
    if isinstance(reply.body, bytes):
        return web.Response(
            body=reply.body, status=reply.status, content_type=reply.content_type, headers=reply.headers
        )
    return web.json_response(reply.body, status=reply.status, headers=reply.headers or None)


def follower_web_app(
    checks: Mapping[str, FailureCheck],
    reader: RemoteReader,
    token: str | None = None,
    extra: ExtraStatus | None = None,
) -> web.Application:
    async def livez(request: web.Request) -> web.Response:
        return _aiohttp_response(handlers.livez())

    async def readyz(request: web.Request) -> web.Response:
        return _aiohttp_response(handlers.readyz(checks, extra() if extra else None))

    async def metrics(request: web.Request) -> web.Response:
        return _aiohttp_response(handlers.metrics_reply())

    executor = RequestExecutor("read-api")  # the reads' own bounded pool

    def guarded(handler: Callable[[RemoteReader, Mapping[str, str]], Reply]) -> Any:
        async def route(request: web.Request) -> web.Response:
            denied = handlers.authorized(token, request.headers)
            if denied is not None:
                return _aiohttp_response(denied)
            return _aiohttp_response(await executor.run(handler, reader, dict(request.query)))

        return route

    app = web.Application()
    app.router.add_get("/livez", livez)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/healthz", readyz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/segments", guarded(handlers.segments))
    app.router.add_get("/fetch", guarded(handlers.fetch))
    return app
