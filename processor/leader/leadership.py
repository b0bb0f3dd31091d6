"""Which source partitions this worker leads, and with which writer epoch.

Faust's eager rebalance protocol revokes every partition before each rebalance and then assigns the
new set. Stopping everything each time would drop every open and pending segment and re-read the
metadata topic, so the revocation is deferred: when the new assignment arrives, only partitions
that left are revoked and only new ones are assigned; partitions that stay keep their open segments
and their epoch. This is safe because a stale writer is fenced by epoch (processor/metadata/
fencing.py): the new leader of a partition that moved writes with a newer epoch, and records of the
old epoch are rejected from then on.

The worker's follower reports the newest epoch it applies per partition: when a partition this
worker leads shows a newer epoch than its own, another worker leads it now (this one was paused past
its session timeout, say), and it is revoked at once, without waiting for Faust to notice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable

from processor.errors import ProcessorError
from processor.leader.offload_engine import OffloadEngine
from processor.leader.ports import AppliedBatch
from processor.leader.resume import ResumePlanner
from processor.metadata.model import TopicPartition

log = logging.getLogger(__name__)


class Leadership:
    def __init__(self, engine: OffloadEngine, planner: ResumePlanner | None = None) -> None:
        self.engine = engine
        self.planner = planner
        self.leading: dict[TopicPartition, int] = {}
        self._lock = threading.Lock()
        self.fenced_revocations = 0

    def revoked(self, tps: Iterable[TopicPartition]) -> None:
        log.debug("rebalance: %d partitions revoked; waiting for the new assignment", len(list(tps)))

    def assigned(self, tps: Iterable[TopicPartition], generation: int) -> None:
        """The full new assignment: revoke what left, assign what is new, keep the rest."""
        wanted = set(tps)
        with self._lock:
            leaving = sorted(tp for tp in self.leading if tp not in wanted)
            coming = sorted(wanted - set(self.leading))
        if leaving:
            self.engine.revoke(leaving)
            with self._lock:
                for tp in leaving:
                    self.leading.pop(tp, None)
        if coming:
            epoch = self.planner.prepare(coming, generation) if self.planner else max(generation, 0)
            with self._lock:
                self.leading.update(dict.fromkeys(coming, epoch))
            self.engine.assign(coming, epoch)
        log.info(
            "assignment (generation %d): %d kept, %d new, %d revoked",
            generation,
            len(wanted) - len(coming),
            len(coming),
            len(leaving),
        )

    def on_metadata(self, result: AppliedBatch) -> None:
        """Follower callback (its thread; must not block): revoke partitions a newer epoch wrote to."""
        with self._lock:
            stale = sorted(
                tp for tp, e in result.epochs.items() if tp in self.leading and e > self.leading[tp]
            )
            for tp in stale:
                log.warning(
                    "%s: writer epoch %d wrote to it, newer than this worker's %d: stopping at once",
                    tp,
                    result.epochs[tp],
                    self.leading.pop(tp),
                )
        if stale:
            self.fenced_revocations += len(stale)
            threading.Thread(target=self._revoke, args=(stale,), name="fenced-revoke", daemon=True).start()

    def _revoke(self, tps: list[TopicPartition]) -> None:
        try:
            self.engine.revoke(tps)
        except ProcessorError as exc:  # the engine stopped meanwhile: nothing left to stop
            log.warning("could not revoke %s after a newer epoch: %s", tps, exc)
