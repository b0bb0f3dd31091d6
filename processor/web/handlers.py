"""HTTP handlers as plain functions: a request's query and headers in, a :class:`Reply` out.

The worker serves them through Faust's web server and the read-only follower through a bare aiohttp
application (see :mod:`processor.web.servers`), so the logic lives here once, framework-free.

- ``/livez``: answers 200 as long as the event loop runs the handler. It never depends on Kafka or
  S3, so an outage of either does not make Kubernetes restart a healthy pod.
- ``/readyz`` (and its alias ``/healthz``): 200 while :data:`processor.health.HEALTH` holds no
  problem and no data path has failed; 503 otherwise, with the reasons in the body.
- ``/metrics``: Prometheus text format.
- ``/segments`` and ``/fetch``: the read API; when a token is configured they require
  ``Authorization: Bearer <token>`` (401 otherwise), compared in constant time.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from processor import metrics
from processor.errors import (
    CorruptObjectError,
    InvalidNameError,
    OffsetNotInRemoteError,
    StorageError,
)
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.health import HEALTH
from processor.metadata.model import TopicPartition
from processor.reader.record_json import record_to_json, segment_to_json
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import validate_topic

MAX_FETCH_RECORDS = 10_000


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


def authorized(token: str | None, headers: Mapping[str, str]) -> Reply | None:
    """None when the request may proceed; a 401 reply otherwise. No token configured: open."""
    if not token:
        return None
    given = headers.get("Authorization", headers.get("authorization", ""))
    scheme, _, credential = given.partition(" ")
    # hmac.compare_digest: the time taken does not reveal how much of the token matched.
    if scheme.lower() == "bearer" and hmac.compare_digest(credential.strip().encode(), token.encode()):
        return None
    return Reply(
        401,
        {"error": "a bearer token is required (Authorization: Bearer <token>)"},
        headers={"WWW-Authenticate": 'Bearer realm="processor"'},
    )


def _int_param(
    query: Mapping[str, str], name: str, required: bool = True, default: int | None = None
) -> int | None:
    raw = query.get(name)
    if raw is None:
        if required:
            raise ValueError(f"missing parameter {name!r}")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"parameter {name!r} must be an integer, got {raw!r}") from None


def segments(reader: RemoteReader, query: Mapping[str, str]) -> Reply:
    """``GET /segments?topic=T[&partition=P]`` (blocking: run it off the event loop)."""
    try:
        topic = validate_topic(query.get("topic", ""))
        partition = _int_param(query, "partition", required=False)
    except (ValueError, InvalidNameError) as exc:
        return Reply(400, {"error": str(exc)})
    cache = reader.lookup.cache if isinstance(reader.lookup, RemoteLogMetadataManager) else None
    if cache is None:
        return Reply(501, {"error": "this reader has no metadata cache to list"})
    tps = [tp for tp in cache.topic_partitions() if tp.topic == topic and partition in (None, tp.partition)]
    return Reply(200, {"segments": [segment_to_json(s) for tp in tps for s in cache.listed_segments(tp)]})


def fetch(reader: RemoteReader, query: Mapping[str, str]) -> Reply:
    """``GET /fetch?topic=T&partition=P&(offset=O|timestamp=MS)[&max_records=N]`` (blocking)."""
    try:
        topic = validate_topic(query.get("topic", ""))
        partition = _int_param(query, "partition")
        offset = _int_param(query, "offset", required=False)
        timestamp = _int_param(query, "timestamp", required=False)
        max_records = _int_param(query, "max_records", required=False, default=100)
        assert partition is not None and max_records is not None
        if (offset is None) == (timestamp is None):
            raise ValueError("give exactly one of 'offset' and 'timestamp'")
        if partition < 0 or max_records < 1 or max_records > MAX_FETCH_RECORDS:
            raise ValueError(f"partition must be >= 0 and max_records between 1 and {MAX_FETCH_RECORDS}")
    except (ValueError, InvalidNameError) as exc:
        return Reply(400, {"error": str(exc)})
    tp = TopicPartition(topic, partition)
    try:
        if offset is not None:
            records = reader.read_from_offset(tp, offset, max_records)
        else:
            assert timestamp is not None
            records = reader.read_from_timestamp(tp, timestamp, max_records)
    except OffsetNotInRemoteError as exc:
        return Reply(404, {"error": str(exc)})
    except CorruptObjectError as exc:
        return Reply(502, {"error": str(exc)})
    except StorageError as exc:
        return Reply(503, {"error": str(exc)})
    return Reply(200, {"records": [record_to_json(r) for r in records]})
