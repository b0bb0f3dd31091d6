"""Readiness of the worker process: the problems each component reports, in one place.

Components (the data path, the follower, the storage client, the Kafka clients) call
:meth:`Health.report` when something keeps them from doing their job and :meth:`Health.clear` when
it recovers. ``/readyz`` is ready while no problem is reported, and shows the reasons otherwise.
A *fatal* problem (an unexpected error on the data path) also stops the worker, which then exits
non-zero: such an error must never leave the worker looping silently.

A problem is keyed by its component (``storage``, ``kafka`` ...) AND by who saw it (``source``):
the background probes report with ``source=PROBE``, the data path with the default ``DATA_PATH``,
and each clears only what it reported. So a failure the data path met (a PutObject denied while
HeadBucket succeeds) stays until the data path itself succeeds again; the storage probe finding the
bucket reachable a few seconds later does not clear it.

Pure and thread-safe; one process-wide instance, :data:`HEALTH`, like Prometheus' default registry.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

DATA_PATH = "data_path"  # what the work itself met: fetches, copies, deletions, the follower
PROBE = "probe"  # the background readiness probes (processor/probes.py)


@dataclass(frozen=True, slots=True)
class Problem:
    component: str
    reason: str
    fatal: bool
    since_s: float  # time.time() when first reported (unchanged while the same reason repeats)
    source: str = DATA_PATH  # who reported it, and so who may clear it


class Health:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._problems: dict[tuple[str, str], Problem] = {}

    def report(self, component: str, reason: str, *, fatal: bool = False, source: str = DATA_PATH) -> None:
        """Record (or update) why ``component`` cannot do its job, as ``source`` saw it."""
        key = (component, source)
        with self._lock:
            old = self._problems.get(key)
            since = old.since_s if old is not None and old.reason == reason else time.time()
            self._problems[key] = Problem(component, reason, fatal or bool(old and old.fatal), since, source)

    def clear(self, component: str, *, source: str = DATA_PATH) -> None:
        """``component`` recovered as ``source`` sees it: clears only the problem that ``source``
        reported. A fatal problem is never cleared: the worker is stopping."""
        with self._lock:
            old = self._problems.get((component, source))
            if old is not None and not old.fatal:
                del self._problems[(component, source)]

    def problems(self) -> list[Problem]:
        with self._lock:
            return sorted(self._problems.values(), key=lambda p: (p.component, p.source))

    @property
    def ready(self) -> bool:
        with self._lock:
            return not self._problems

    def fatal(self) -> Problem | None:
        with self._lock:
            return next((p for p in self._problems.values() if p.fatal), None)

    def reset(self) -> None:
        """Forget everything (tests that run several engines in one process)."""
        with self._lock:
            self._problems.clear()


HEALTH = Health()
