"""The source partitions' high watermarks, asked of the brokers on a schedule of their own.

The copy lag (records the source holds beyond the highest offset in a finished remote segment) must
not depend on fetching working: a fetch response carries the high watermark, but when fetching
stalls no response comes, and a lag read from the last response stays where it was (or at 0) while
the partition grows. So a daemon thread asks the partition leaders for the latest offsets
(ListOffsets: ``processor.kafka.admin.latest_offsets``, bound by the wiring) every
``interval_s`` for the partitions this worker leads, whatever the fetcher does.

Each observation keeps when it was answered. :meth:`HighWatermarks.existed_since` tells the time of
the earliest observation whose high watermark was beyond a given position: the record at that
position (the first one the worker has not taken) already existed then, so ``now - that time`` is a
lower bound of its age, true however long fetching has stalled and even while the asks fail. The
history kept for it holds one entry per observed growth of the high watermark, pruned as the
position passes them and capped (dropping middle entries only moves the bound later: still true).

A failed ask is counted (``processor_high_watermark_errors_total``) and logged once per failure
streak; observations older than ``stale_after_s`` are not used: a lag from an old answer would tell
nothing (the engine then drops the partition's lag gauge rather than show a stale number).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from processor import metrics
from processor.kafka.partition import TopicPartition

log = logging.getLogger(__name__)

ListLatest = Callable[[list[TopicPartition], float], Mapping[TopicPartition, int]]
ASK_TIMEOUT_S = 5.0
HISTORY_CAP = 256  # observations kept per partition for existed_since


@dataclass(frozen=True, slots=True)
class Observation:
    high_watermark: int
    asked_at: float  # monotonic time the answer arrived


class HighWatermarks:
    def __init__(
        self,
        list_latest: ListLatest,
        interval_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._list_latest = list_latest
        self.interval_s = interval_s
        self.stale_after_s = max(3 * interval_s, interval_s + ASK_TIMEOUT_S)
        self._clock = clock
        self._lock = threading.Lock()
        self._partitions: set[TopicPartition] = set()
        self._seen: dict[TopicPartition, Observation] = {}
        self._history: dict[TopicPartition, deque[Observation]] = {}  # growths of the high watermark
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failing = False

    # -- what the engine tells it ---------------------------------------------------------------------

    def add(self, tp: TopicPartition) -> None:
        with self._lock:
            self._partitions.add(tp)

    def remove(self, tp: TopicPartition) -> None:
        with self._lock:
            self._partitions.discard(tp)
            self._seen.pop(tp, None)
            self._history.pop(tp, None)

    # -- what the engine asks -------------------------------------------------------------------------

    def get(self, tp: TopicPartition) -> Observation | None:
        """The latest observation of ``tp``, or None when there is none recent enough to trust."""
        with self._lock:
            seen = self._seen.get(tp)
        if seen is None or self._clock() - seen.asked_at > self.stale_after_s:
            return None
        return seen

    def existed_since(self, tp: TopicPartition, position: int) -> float | None:
        """Monotonic time of the earliest observation of ``tp`` whose high watermark was beyond
        ``position``: the record at ``position`` existed then. None when no observation showed it
        (the worker has taken everything observed). Forgets the observations ``position`` passed."""
        with self._lock:
            history = self._history.get(tp)
            if not history:
                return None
            while history and history[0].high_watermark <= position:
                history.popleft()
            return history[0].asked_at if history else None

    # -- the schedule ---------------------------------------------------------------------------------

    def poll_once(self) -> None:
        with self._lock:
            wanted = sorted(self._partitions, key=lambda tp: (tp.topic, tp.partition))
        if not wanted:
            return
        try:
            answers = self._list_latest(wanted, ASK_TIMEOUT_S)
        except Exception as exc:  # any failure of the ask: counted, logged, the next round retries
            metrics.HIGH_WATERMARK_ERRORS.inc()
            if not self._failing:
                log.warning("asking the brokers for high watermarks failed: %s: %s", type(exc).__name__, exc)
            self._failing = True
            return
        if self._failing:
            log.info("high watermarks answered again")
            self._failing = False
        now = self._clock()
        with self._lock:
            for tp, offset in answers.items():
                if tp not in self._partitions:
                    continue
                seen = Observation(offset, now)
                self._seen[tp] = seen
                history = self._history.setdefault(tp, deque())
                if not history or offset > history[-1].high_watermark:
                    history.append(seen)
                    if len(history) > HISTORY_CAP:
                        del history[1]  # keep the earliest: the bound for the first record not taken

    def _run(self) -> None:
        while not self._stop.is_set():
            self.poll_once()
            self._stop.wait(self.interval_s)

    def start(self) -> HighWatermarks:
        self._thread = threading.Thread(target=self._run, name="high-watermarks", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(ASK_TIMEOUT_S + 1)
