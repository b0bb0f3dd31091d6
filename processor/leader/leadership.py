"""Which source partitions this worker leads, under which claim.

Faust's consumer-group assignment says which partitions this worker *should* lead; the metadata log
says which it *does*: a worker leads a partition only under a claim it appended there and read back
(:mod:`processor.leader.resume`), and only while that claim is the partition's current one.

Faust's eager rebalance protocol revokes every partition before each rebalance and then assigns the
new set. Stopping everything each time would drop every open and pending segment, so the revocation
is deferred: when the new assignment arrives, only partitions that left are revoked and only new
ones are claimed; partitions that stay keep their open segments and their claim. (A kept partition
never needs a new claim: its claim stays current until someone else claims.)

The worker's follower reports the current claim of every partition a batch changed: when a
partition this worker leads shows another claim, another worker (or an operator command) holds it
now, and it is revoked at once (``processor_fenced_revocations_total``), its copy lag gauges kept so
alerts see the lag grow. An operator command's claim (``ADMIN``: merge, erase, delete-before ...)
is a planned hand-over, logged at INFO with the command's writer and claim (the command logs the
same claim); another worker's claim is a fence, logged as a warning. While Faust still assigns it
here, :meth:`Leadership.reclaim` claims it again once the other claim was released or has been
quiet for ``reclaim_after_s`` (a worker that lost its assignment without noticing, an operator
command that crashed).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import Protocol

from processor import metrics
from processor.errors import ProcessorError
from processor.kafka.partition import TopicPartition
from processor.leader.offload_engine import OffloadEngine
from processor.leader.ports import AppliedBatch
from processor.leader.resume import ResumePlanner
from processor.metadata.fold_state import PartitionHeader
from processor.metadata.model import ClaimKind

log = logging.getLogger(__name__)


class ClaimHeaders(Protocol):
    def header(self, tp: TopicPartition) -> PartitionHeader:
        """The fold's state of a partition: its current claim, its kind and who holds it."""
        ...


class ClaimView(Protocol):
    """What leadership asks the worker's follower about a partition's claim."""

    @property
    def cache(self) -> ClaimHeaders:
        """The follower's cache (read on the follower's thread, after it applied a batch)."""
        ...

    def current_epoch(self, tp: TopicPartition) -> int | None: ...

    def quiet_s(self, tp: TopicPartition) -> float:
        """Seconds since the follower last applied an accepted record of ``tp`` (a claim included)."""
        ...


class Leadership:
    def __init__(
        self,
        engine: OffloadEngine,
        planner: ResumePlanner,
        claims: ClaimView | None = None,
        reclaim_after_s: float = 30.0,
    ) -> None:
        self.engine = engine
        self.planner = planner
        self.claims = claims
        self.reclaim_after_s = reclaim_after_s
        self.leading: dict[TopicPartition, int] = {}  # partition -> the claim epoch held
        self.assigned_now: set[TopicPartition] = set()  # Faust's current assignment
        self.fenced: dict[TopicPartition, float] = {}  # assigned here, held by another claim (since)
        self._lock = threading.Lock()
        self.fenced_revocations = 0
        self.failure: BaseException | None = None  # an assignment's claims failed unexpectedly

    def revoked(self, tps: Iterable[TopicPartition]) -> None:
        log.debug("rebalance: %d partitions revoked; waiting for the new assignment", len(list(tps)))

    def assigned(self, tps: Iterable[TopicPartition], generation: int) -> None:
        """The full new assignment: revoke what left, claim what is new, keep the rest."""
        wanted = set(tps)
        with self._lock:
            self.assigned_now = wanted
            leaving = sorted(tp for tp in {*self.leading, *self.fenced} if tp not in wanted)
            coming = sorted(wanted - set(self.leading))
        if leaving:
            self.engine.revoke(leaving)
            with self._lock:
                for tp in leaving:
                    self.leading.pop(tp, None)
                    self.fenced.pop(tp, None)
        try:
            held = self._claim(coming)
        except ProcessorError as exc:  # Kafka or the bucket unreachable now: the reclaim timer retries
            now = time.monotonic()
            with self._lock:
                for tp in coming:
                    if tp not in self.leading:
                        self.fenced.setdefault(tp, now)
            log.warning(
                "claiming %d newly assigned partitions failed (%s); claimed again by the reclaim timer",
                len(coming),
                exc,
            )
            return
        log.info(
            "assignment (generation %d): %d kept, %d new, %d revoked; %d of the new held by other claims",
            generation,
            len(wanted) - len(coming),
            len(coming),
            len(leaving),
            len(coming) - len(held),
        )

    def _claim(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if not tps:
            return {}
        held = self.planner.prepare(tps)
        now = time.monotonic()
        with self._lock:
            for tp in tps:
                if tp in held:
                    self.fenced.pop(tp, None)
                    self.leading[tp] = held[tp]
                else:
                    self.fenced.setdefault(tp, now)
        if held:
            self.engine.assign(held)
        return held

    def on_metadata(self, result: AppliedBatch) -> None:
        """Follower callback (its thread; must not block): revoke partitions another claim holds."""
        lost = []
        with self._lock:
            for tp, claim in result.claims.items():
                held = self.leading.get(tp)
                if held is not None and claim != held:
                    lost.append((tp, claim, held))
        for tp, claim, held in lost:
            self._log_lost(tp, claim, held)
        self.fence([tp for tp, _, _ in lost])

    def _log_lost(self, tp: TopicPartition, claim: int | None, held: int) -> None:
        """Say why ``tp`` stops here: a planned hand-over to an operator command (INFO), or another
        worker's claim (a fence: WARNING)."""
        current = None
        if self.claims is not None and claim is not None:
            current = self.claims.cache.header(tp).claim
        if claim is None:  # only an operator command releases a claim: it came and went already
            log.info(
                "%s: an operator command took it from this worker's claim %d and released it again: "
                "stopping, then claiming it again",
                tp,
                held,
            )
        elif current is not None and current.epoch == claim and current.kind is ClaimKind.ADMIN:
            log.info(
                "%s: handed over to an operator command (%s, claim %d; this worker's was %d): "
                "stopping until the command releases it",
                tp,
                current.writer_id,
                claim,
                held,
            )
        else:
            holder = f" of {current.writer_id}" if current is not None and current.epoch == claim else ""
            log.warning(
                "%s: the metadata shows claim %s%s, not this worker's %d: another writer holds it; "
                "stopping at once",
                tp,
                claim,
                holder,
                held,
            )

    def fence(self, tps: Iterable[TopicPartition]) -> None:
        """Stop writing ``tps`` now (another claim holds them); keep their lag gauges."""
        now = time.monotonic()
        stop = []
        with self._lock:
            for tp in tps:
                if self.leading.pop(tp, None) is not None:
                    stop.append(tp)
                    self.fenced[tp] = now
        if stop:
            self.fenced_revocations += len(stop)
            metrics.FENCED_REVOCATIONS.inc(len(stop))
            threading.Thread(
                target=self._revoke, args=(sorted(stop),), name="fenced-revoke", daemon=True
            ).start()

    def _revoke(self, tps: list[TopicPartition]) -> None:
        try:
            self.engine.revoke(tps, watch=True)
        except ProcessorError as exc:  # the engine stopped meanwhile: nothing left to stop
            log.warning("could not revoke %s after another claim: %s", tps, exc)

    def reclaim(self) -> dict[TopicPartition, int]:
        """Claim again the partitions Faust still assigns here whose other claim was released or has
        been quiet for ``reclaim_after_s``; returns what is held again. Blocks (run off the loop)."""
        if self.claims is None:
            return {}
        with self._lock:
            candidates = sorted(tp for tp in self.fenced if tp in self.assigned_now)
        due = [
            tp
            for tp in candidates
            if self.claims.current_epoch(tp) is None or self.claims.quiet_s(tp) >= self.reclaim_after_s
        ]
        if due:
            log.info("claiming again %d partitions whose other claim is released or quiet", len(due))
        return self._claim(due)

    def led(self) -> dict[TopicPartition, int]:
        """The partitions led now, with the claim epoch held for each."""
        with self._lock:
            return dict(self.leading)
