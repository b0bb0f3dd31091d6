"""HTTP handlers as plain functions: a request's query and headers in, a :class:`Reply` out.

The worker serves them through Faust's web server and the read-only follower through a bare aiohttp
application (see :mod:`processor.web.servers`), so the logic lives here once, framework-free.

- ``/livez``: answers 200 as long as the event loop runs the handler. It never depends on Kafka or
  S3, so an outage of either does not make Kubernetes restart a healthy pod.
- ``/readyz`` (and its alias ``/healthz``): 200 while :data:`processor.health.HEALTH` holds no
  problem and no data path has failed; 503 otherwise, with the reasons in the body.
- ``/metrics``: Prometheus text format.
- ``/segments`` and ``/fetch``: the read API; they require ``Authorization: Bearer <token>`` (401
  otherwise, compared in constant time) unless :func:`read_api_token` found that they may be open
  (a loopback bind, or ``PROCESSOR_WEB_AUTH=none`` on purpose).

Answers are bounded: ``/segments`` returns pages (``limit``, at most ``MAX_SEGMENTS_PAGE``; the
answer's ``next`` is the ``after`` cursor of the following page, null on the last), ``/fetch`` stops
at ``max_records`` (at most ``MAX_FETCH_RECORDS``) or ``max_bytes`` (at most ``MAX_FETCH_BYTES``) of
record data, whichever comes first. Every number outside Kafka's ranges (a partition is an int32, an
offset or a timestamp a non-negative int64) is a 400 naming the parameter, never a 500.
"""

from __future__ import annotations

import hmac
import ipaddress
import re
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from processor import metrics
from processor.errors import (
    ConfigError,
    CorruptObjectError,
    InvalidNameError,
    OffsetNotInRemoteError,
    StorageError,
)
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.health import HEALTH
from processor.kafka.partition import TopicPartition
from processor.reader.record_json import record_to_json, segment_to_json
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import validate_topic

MAX_FETCH_RECORDS = 10_000
DEFAULT_FETCH_RECORDS = 100
MAX_FETCH_BYTES = 16 * 1024 * 1024
DEFAULT_FETCH_BYTES = 1024 * 1024
MAX_SEGMENTS_PAGE = 1000
DEFAULT_SEGMENTS_PAGE = 100
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1
_INTEGER = re.compile(r"-?[0-9]{1,20}")


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: dict[str, Any] | bytes
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


# A component whose failure makes the process unready: returns a reason, or None while healthy.
FailureCheck = Callable[[], str | None]


def livez() -> Reply:
    return Reply(200, {"alive": True})


def readyz(checks: Mapping[str, FailureCheck], extra: Mapping[str, Any] | None = None) -> Reply:
    problems = [
        {
            "component": p.component,
            "reason": p.reason,
            "fatal": p.fatal,
            "since": round(p.since_s, 3),
            "source": p.source,
        }
        for p in HEALTH.problems()
    ]
    reported = {p["component"] for p in problems}
    now = round(time.time(), 3)
    for component, check in checks.items():
        reason = check()
        if reason is not None and component not in reported:
            problems.append(
                {"component": component, "reason": reason, "fatal": True, "since": now, "source": "check"}
            )
    ready = not problems
    metrics.HEALTH_READY.set(1 if ready else 0)
    body: dict[str, Any] = {"ready": ready, "reasons": [f"{p['component']}: {p['reason']}" for p in problems]}
    body["problems"] = problems
    body.update(extra or {})
    return Reply(200 if ready else 503, body)


def metrics_reply() -> Reply:
    return Reply(200, generate_latest(), CONTENT_TYPE_LATEST.split(";")[0])


WEB_AUTH_TOKEN = "token"  # PROCESSOR_WEB_AUTH: the default, reads need the bearer token
WEB_AUTH_NONE = "none"  # PROCESSOR_WEB_AUTH=none: reads open, chosen on purpose


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def read_api_token(host: str, token: str | None, auth: str) -> str | None:
    """The bearer token the read API and ``POST /offload`` require (None: open), or ConfigError.

    Closed by default: without a token the API is open only when the server binds a loopback
    address (nothing off the host reaches it) or ``PROCESSOR_WEB_AUTH=none`` says so on purpose.
    """
    if auth == WEB_AUTH_NONE:
        return None
    if token:
        return token
    if is_loopback(host):
        return None
    raise ConfigError(
        f"the read API (/fetch, /segments, POST /offload) would be open to anyone who reaches "
        f"{host}: set PROCESSOR_WEB_TOKEN (clients send 'Authorization: Bearer <token>'), or bind "
        "PROCESSOR_WEB_HOST=127.0.0.1, or set PROCESSOR_WEB_AUTH=none to leave it open on purpose"
    )


def authorized(token: str | None, headers: Mapping[str, str]) -> Reply | None:
    """None when the request may proceed; a 401 reply otherwise, saying whether the token was missing
    or wrong (RFC 6750's ``invalid_token``). No token configured: open."""
    if not token:
        return None
    given = headers.get("Authorization", headers.get("authorization", ""))
    scheme, _, credential = given.partition(" ")
    if scheme.lower() != "bearer" or not credential.strip():
        return Reply(
            401,
            {
                "error": "a bearer token is required: send 'Authorization: Bearer <token>' with the "
                "server's PROCESSOR_WEB_TOKEN"
            },
            headers={"WWW-Authenticate": 'Bearer realm="processor"'},
        )
    # hmac.compare_digest: the time taken does not reveal how much of the token matched.
    if hmac.compare_digest(credential.strip().encode(), token.encode()):
        return None
    return Reply(
        401,
        {"error": "the bearer token is wrong: it is not the server's PROCESSOR_WEB_TOKEN"},
        headers={"WWW-Authenticate": 'Bearer realm="processor", error="invalid_token"'},
    )


def _int_param(
    query: Mapping[str, str],
    name: str,
    low: int,
    high: int,
    required: bool = True,
    default: int | None = None,
) -> int | None:
    """The parameter as an integer in ``[low, high]``; ValueError naming it otherwise."""
    raw = query.get(name)
    if raw is None:
        if required:
            raise ValueError(f"missing parameter {name!r}")
        return default
    # A plain decimal only: int() would also take "1_000", " 7" and other scripts' digits.
    if _INTEGER.fullmatch(raw) is None:
        raise ValueError(f"parameter {name!r} must be an integer, got {raw[:40]!r}")
    value = int(raw)
    if not low <= value <= high:
        raise ValueError(f"parameter {name!r} must be between {low} and {high}, got {raw}")
    return value


def _segments_cursor(raw: str | None) -> tuple[int, int, bytes] | None:
    """``after=P:S:ID`` (the ``next`` of the previous page): partition, start offset, segment id."""
    if raw is None:
        return None
    try:
        partition, start, sid = raw.split(":")
        cursor = (int(partition), int(start), uuid.UUID(sid).bytes)
    except ValueError:
        raise ValueError(f"parameter 'after' is not a cursor from a previous page: {raw[:80]!r}") from None
    if not (0 <= cursor[0] <= INT32_MAX and 0 <= cursor[1] <= INT64_MAX):
        raise ValueError(f"parameter 'after' is out of range: {raw[:80]!r}")
    return cursor


def segments(reader: RemoteReader, query: Mapping[str, str]) -> Reply:
    """``GET /segments?topic=T[&partition=P][&limit=N][&after=CURSOR]`` (blocking: off the loop)."""
    try:
        topic = validate_topic(query.get("topic", ""))
        partition = _int_param(query, "partition", 0, INT32_MAX, required=False)
        limit = _int_param(query, "limit", 1, MAX_SEGMENTS_PAGE, False, DEFAULT_SEGMENTS_PAGE)
        after = _segments_cursor(query.get("after"))
        assert limit is not None
    except (ValueError, InvalidNameError) as exc:
        return Reply(400, {"error": str(exc)})
    cache = reader.lookup.cache if isinstance(reader.lookup, RemoteLogMetadataManager) else None
    if cache is None:
        return Reply(501, {"error": "this reader has no metadata cache to list"})
    tps = sorted(
        tp
        for tp in cache.topic_partitions()
        if tp.topic == topic
        and partition in (None, tp.partition)
        and (after is None or tp.partition >= after[0])
    )
    page: list[dict[str, Any]] = []
    last: tuple[int, int, bytes] | None = None
    for tp in tps:
        from_offset = after[1] if after is not None and tp.partition == after[0] else 0
        ordered = sorted(
            cache.listed_segments(tp, from_offset), key=lambda s: (s.start_offset, s.segment_id.id.bytes)
        )
        for seg in ordered:
            key = (tp.partition, seg.start_offset, seg.segment_id.id.bytes)
            if after is not None and key <= after:
                continue
            if len(page) == limit:
                assert last is not None
                cursor = f"{last[0]}:{last[1]}:{uuid.UUID(bytes=last[2])}"
                return Reply(200, {"segments": page, "next": cursor})
            page.append(segment_to_json(seg))
            last = key
    return Reply(200, {"segments": page, "next": None})


def fetch(reader: RemoteReader, query: Mapping[str, str]) -> Reply:
    """``GET /fetch?topic=T&partition=P&(offset=O|timestamp=MS)[&max_records=N][&max_bytes=B]``
    (blocking: run it off the event loop)."""
    try:
        topic = validate_topic(query.get("topic", ""))
        partition = _int_param(query, "partition", 0, INT32_MAX)
        offset = _int_param(query, "offset", 0, INT64_MAX, required=False)
        timestamp = _int_param(query, "timestamp", 0, INT64_MAX, required=False)
        max_records = _int_param(query, "max_records", 1, MAX_FETCH_RECORDS, False, DEFAULT_FETCH_RECORDS)
        max_bytes = _int_param(query, "max_bytes", 1, MAX_FETCH_BYTES, False, DEFAULT_FETCH_BYTES)
        assert partition is not None and max_records is not None and max_bytes is not None
        if (offset is None) == (timestamp is None):
            raise ValueError("give exactly one of 'offset' and 'timestamp'")
    except (ValueError, InvalidNameError) as exc:
        return Reply(400, {"error": str(exc)})
    tp = TopicPartition(topic, partition)
    try:
        if offset is not None:
            records = reader.read_from_offset(tp, offset, max_records, max_bytes)
        else:
            assert timestamp is not None
            records = reader.read_from_timestamp(tp, timestamp, max_records, max_bytes)
    except OffsetNotInRemoteError as exc:
        return Reply(404, {"error": str(exc)})
    except CorruptObjectError as exc:
        return Reply(502, {"error": str(exc)})
    except StorageError as exc:
        return Reply(503, {"error": str(exc)})
    return Reply(200, {"records": [record_to_json(r) for r in records]})
