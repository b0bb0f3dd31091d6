"""Readiness probes: cheap periodic checks that report to :data:`processor.health.HEALTH`.

One background thread runs every probe each ``interval_s`` and reports (or clears) its component:

- ``storage``: HeadBucket on a client of its own with short timeouts (2 s connect, 5 s read, no SDK
  retries), so an unreachable or stalled S3 endpoint turns readiness off within one interval plus
  ~7 s, well inside the 60 s the chart's probes allow. The data path's client keeps its longer
  timeouts and retries: a slow upload is not an outage.
- ``kafka``: a metadata request (``list_topics``) with a 5 s timeout.
- ``follower``: the metadata follower stopped, has not caught up once since start, or is behind and
  has made no progress for a minute.

Nothing here is fatal: these problems clear themselves when the dependency returns. The probes
report with ``source=PROBE`` and clear only their own findings: a failure the data path reported
(a PutObject denied while HeadBucket succeeds) stays until the data path succeeds (see health.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from processor import metrics
from processor.errors import ServiceUnavailableError, StorageError
from processor.health import HEALTH, PROBE

log = logging.getLogger(__name__)

PROBE_CONNECT_TIMEOUT_S = 2.0
PROBE_READ_TIMEOUT_S = 5.0
KAFKA_PROBE_TIMEOUT_S = 5.0
FOLLOWER_STALL_S = 60.0


@dataclass(frozen=True)
class Probe:
    component: str
    check: Callable[[], str | None]  # None: healthy; else the reason


def storage_probe(head_bucket: Callable[[], None]) -> Probe:
    """``head_bucket`` raises StorageError when the bucket cannot be reached or used."""

    def check() -> str | None:
        try:
            head_bucket()
        except StorageError as exc:
            metrics.STORAGE_REACHABLE.set(0)
            return f"S3 unreachable or unusable: {exc}"
        metrics.STORAGE_REACHABLE.set(1)
        return None

    return Probe("storage", check)


def kafka_probe(list_topics: Callable[[float], object], bootstrap_servers: str) -> Probe:
    """``list_topics(timeout_s)`` raises ServiceUnavailableError when Kafka does not answer."""

    def check() -> str | None:
        try:
            list_topics(KAFKA_PROBE_TIMEOUT_S)
        except ServiceUnavailableError as exc:
            return f"Kafka at {bootstrap_servers} unreachable: {exc}"
        return None

    return Probe("kafka", check)


class FollowerProgress(Protocol):
    """What the follower probe reads of the metadata follower (its ``FollowerState``)."""

    lag_records: int | None  # None: not measured yet
    caught_up_once: bool
    progress_at: float  # time.monotonic() of the last progress
    stopped: str | None  # why the follower stopped; None while it runs


def follower_probe(state: Callable[[], FollowerProgress]) -> Probe:
    def check() -> str | None:
        s = state()
        if s.stopped is not None:
            return f"metadata follower stopped: {s.stopped}"
        if s.lag_records is None:
            return "metadata follower starting: lag not measured yet"
        if s.lag_records > 0 and not s.caught_up_once:
            return f"metadata follower catching up: {s.lag_records} records behind"
        stalled = time.monotonic() - s.progress_at
        if s.lag_records > 0 and stalled > FOLLOWER_STALL_S:
            return f"metadata follower behind: {s.lag_records} records, no progress for {stalled:.0f} s"
        return None

    return Probe("follower", check)


class ReadinessWatch:
    """Runs the probes on a daemon thread; logs each transition once (not every interval)."""

    def __init__(self, probes: Sequence[Probe], interval_s: float) -> None:
        self.probes = list(probes)
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing: dict[str, str] = {}

    def run_once(self) -> None:
        for probe in self.probes:
            try:
                reason = probe.check()
            except Exception as exc:  # a probe's own bug must show, not kill the watch
                log.exception("readiness probe %s failed", probe.component)
                reason = f"probe error: {type(exc).__name__}: {exc}"
            if reason is None:
                if self._failing.pop(probe.component, None) is not None:
                    log.info(
                        "%s recovered: ready again", probe.component, extra={"component": probe.component}
                    )
                HEALTH.clear(probe.component, source=PROBE)
            else:
                if probe.component not in self._failing:
                    log.warning("%s: %s", probe.component, reason, extra={"component": probe.component})
                self._failing[probe.component] = reason
                HEALTH.report(probe.component, reason, source=PROBE)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval_s)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="readiness-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(PROBE_CONNECT_TIMEOUT_S + PROBE_READ_TIMEOUT_S + KAFKA_PROBE_TIMEOUT_S)
