"""A fault-injecting HTTP proxy for S3, for tests that break the object store on purpose.

It listens on a free loopback port in front of a real S3 server (SeaweedFS in the local stack) and
forwards every request unchanged (the Host header included, so SigV4 signatures still verify).
Per-request rules, matched by request kind (``put``, ``upload_part``, ``complete_multipart``,
``delete``, ``get``, ``head`` ...), can instead:

- ``error``: answer 500 InternalError (or any status/code, e.g. 503 SlowDown) with an S3 XML body,
  without forwarding;
- ``delay``: wait ``delay_s`` before forwarding (longer than the client's read timeout = a timeout);
- ``drop``: forward the request (the object IS stored), then cut the connection without an answer;
- ``reset``: cut the connection without forwarding.

``down("refuse")`` closes the listening socket (connection refused), ``down("reset")`` keeps it open
and resets every connection; ``up()`` restores service on the same port.

Written by hand (on aiohttp, which Faust already needs) because no maintained library injects
S3-shaped faults per request kind; the proxy runs its own event loop on a daemon thread so
synchronous tests and child worker processes can use it alike.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Literal

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

Action = Literal["error", "delay", "drop", "reset"]
DownMode = Literal["refuse", "reset"]

KINDS = (
    "put",
    "upload_part",
    "upload_part_copy",
    "create_multipart",
    "complete_multipart",
    "abort_multipart",
    "delete",
    "delete_objects",
    "get",
    "list",
    "head",
    "other",
)

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
}


def request_kind(method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> str:
    """The S3 operation a request performs, from its method, path and query (path-style URLs)."""
    has_key = len([p for p in path.split("/") if p]) >= 2
    if method == "PUT":
        if "partNumber" in query and "uploadId" in query:
            return "upload_part_copy" if "x-amz-copy-source" in headers else "upload_part"
        return "put" if has_key else "other"
    if method == "POST":
        if "uploads" in query:
            return "create_multipart"
        if "uploadId" in query:
            return "complete_multipart"
        if "delete" in query:
            return "delete_objects"
        return "other"
    if method == "DELETE":
        if "uploadId" in query:
            return "abort_multipart"
        return "delete" if has_key else "other"
    if method == "GET":
        return "get" if has_key and "uploadId" not in query else "list"
    if method == "HEAD":
        return "head"
    return "other"


def s3_error_body(code: str, message: str) -> bytes:
    return (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f"<Error><Code>{code}</Code><Message>{message}</Message>"
        "<RequestId>fault-proxy</RequestId></Error>"
    ).encode()


@dataclass
class FaultRule:
    """Apply ``action`` to a ``share`` of the requests whose kind is in ``kinds`` (all kinds when
    empty) and whose path (for a DeleteObjects request, also its body: the keys it names) contains
    ``path_contains``, at most ``limit`` times (None = no limit)."""

    action: Action
    kinds: frozenset[str] = frozenset()
    share: float = 1.0
    status: int = 500
    code: str = "InternalError"
    delay_s: float = 0.0
    path_contains: str = ""
    limit: int | None = None
    applied: int = 0

    def matches(self, kind: str, path: str) -> bool:
        if self.kinds and kind not in self.kinds:
            return False
        if self.path_contains and self.path_contains not in path:
            return False
        return self.limit is None or self.applied < self.limit


def error_rule(kinds: set[str] | frozenset[str], share: float = 1.0, **kw: object) -> FaultRule:
    return FaultRule("error", frozenset(kinds), share, **kw)  # type: ignore[arg-type]


def slowdown_rule(kinds: set[str] | frozenset[str], share: float = 1.0, **kw: object) -> FaultRule:
    return FaultRule("error", frozenset(kinds), share, status=503, code="SlowDown", **kw)  # type: ignore[arg-type]


@dataclass
class FaultStats:
    seen: Counter[str] = field(default_factory=Counter)
    forwarded: Counter[str] = field(default_factory=Counter)
    faulted: Counter[tuple[str, str]] = field(default_factory=Counter)


class FaultProxy:
    """Start with ``start()`` (or as a context manager); ``endpoint_url`` is what clients use."""

    def __init__(self, upstream_url: str, *, seed: int = 0, host: str = "127.0.0.1") -> None:
        self.upstream_url = upstream_url.rstrip("/")
        self.host = host
        self.port = 0
        self.stats = FaultStats()
        self._rules: list[FaultRule] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._session: aiohttp.ClientSession | None = None
        self._down: DownMode | None = None

    # -- control (any thread) -------------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def add_rule(self, rule: FaultRule) -> FaultRule:
        with self._lock:
            self._rules.append(rule)
        return rule

    def clear_rules(self) -> None:
        with self._lock:
            self._rules.clear()

    @contextlib.contextmanager
    def rule(self, rule: FaultRule) -> Iterator[FaultRule]:
        self.add_rule(rule)
        try:
            yield rule
        finally:
            with self._lock:
                if rule in self._rules:
                    self._rules.remove(rule)

    @property
    def is_down(self) -> bool:
        return self._down is not None

    def down(self, mode: DownMode = "refuse") -> None:
        """Go fully down: ``refuse`` closes the listening socket, ``reset`` resets connections."""
        self._down = mode
        if mode == "refuse":
            self._call(self._stop_site())

    def up(self) -> None:
        if self._down == "refuse":
            self._call(self._start_site())
        self._down = None

    def start(self) -> FaultProxy:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="fault-proxy", daemon=True)
        self._thread.start()
        self._call(self._setup())
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        self._call(self._teardown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        if self._thread is not None:
            self._thread.join(10)
        self._loop.close()
        self._loop = None

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, coro: object) -> None:
        assert self._loop is not None, "proxy not started"
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(30)  # type: ignore[arg-type]

    # -- event loop side ------------------------------------------------------------------------

    async def _setup(self) -> None:
        app = web.Application(client_max_size=1024**3)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # A test proxy: on stop, requests still in flight (a client that gave up on a delayed
        # answer) are cut after 2 s instead of aiohttp's graceful 60 s.
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
        await self._runner.setup()
        self._session = aiohttp.ClientSession(
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
            skip_auto_headers=("User-Agent", "Accept", "Accept-Encoding", "Content-Type"),
        )
        if not self.port:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((self.host, 0))
                self.port = int(s.getsockname()[1])
        await self._start_site()

    async def _start_site(self) -> None:
        assert self._runner is not None
        self._site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await self._site.start()

    async def _stop_site(self) -> None:
        if self._site is not None:
            await self._site.stop()
            self._site = None

    async def _teardown(self) -> None:
        await self._stop_site()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def _pick(self, kind: str, path: str) -> FaultRule | None:
        with self._lock:
            self.stats.seen[kind] += 1
            for rule in self._rules:
                if rule.matches(kind, path) and self._rng.random() < rule.share:
                    rule.applied += 1
                    self.stats.faulted[(kind, rule.action)] += 1
                    return rule
        return None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.read()
        except ConnectionError:  # the client gave up (e.g. its read timeout) mid-request
            return _cut(request)
        if self._down is not None:
            return _cut(request)
        query = {k: v for k, v in request.query.items()}
        headers = {k.lower(): v for k, v in request.headers.items()}
        kind = request_kind(request.method, request.path, query, headers)
        # a DeleteObjects request names its keys in its body: rules match them as they match a path
        where = request.path + body.decode("utf-8", "replace") if kind == "delete_objects" else request.path
        rule = self._pick(kind, where)
        if rule is not None:
            if rule.action == "error":
                return web.Response(
                    status=rule.status,
                    body=s3_error_body(rule.code, f"injected by fault proxy ({kind})"),
                    content_type="application/xml",
                )
            if rule.action == "reset":
                return _cut(request)
            if rule.action == "delay":
                await asyncio.sleep(rule.delay_s)
        status, resp_headers, resp_body = await self._forward(request, body)
        with self._lock:
            self.stats.forwarded[kind] += 1
        if rule is not None and rule.action == "drop":
            return _cut(request)
        resp = web.Response(status=status, body=resp_body)
        resp.headers.clear()
        resp.headers.extend(resp_headers)
        return resp

    async def _forward(self, request: web.Request, body: bytes) -> tuple[int, CIMultiDict[str], bytes]:
        assert self._session is not None
        from yarl import URL

        headers = CIMultiDict(
            (k, v)
            for k, v in request.headers.items()
            if k.lower() not in _HOP_BY_HOP and k.lower() != "content-length"
        )
        url = URL(self.upstream_url + request.raw_path, encoded=True)
        async with self._session.request(
            request.method, url, headers=headers, data=body if body else None, allow_redirects=False
        ) as up:
            data = await up.read()
            # Content-Length passes through unchanged (bodies are never decompressed): a HEAD
            # answer's length is the object's size.
            out = CIMultiDict((k, v) for k, v in up.headers.items() if k.lower() not in _HOP_BY_HOP)
            return up.status, out, data


def _cut(request: web.Request) -> web.StreamResponse:
    """Close the client's connection without an answer (the client sees a reset/EOF)."""
    if request.transport is not None:
        request.transport.abort()
    return web.Response(status=499)
