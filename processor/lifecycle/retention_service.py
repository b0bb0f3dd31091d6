"""The leader's retention pass: for each partition this worker leads, plan (pure) and delete (edge).

One pass: retry the deletion topic's pending entries of the led partitions, then for each led
partition plan with :func:`plan_retention` over the segments the view shows and carry the plan out.
A pass that cannot reach Kafka or whose deletions keep failing reports HEALTH "retention" (not fatal:
the data path is unaffected); a clean pass clears it.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from processor.errors import FencedWriterError, ProcessorError, StorageError
from processor.health import HEALTH
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_evidence import sources_kept
from processor.lifecycle.deletion_retries import retry_failed
from processor.lifecycle.deletion_topic import DeletionTopic
from processor.lifecycle.ports import DeletionOutcome, PartitionChecks
from processor.lifecycle.remote_log_gauges import RemoteLogGauges
from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import DeleteReason, RetentionLimits, RetentionPlan, plan_retention
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.lifecycle.sweep import (
    UNREFERENCED_MIN_AGE_MS,
    storage_now_ms,
    sweep_prefix,
    sweep_unreferenced,
    write_missing_manifests,
)
from processor.metadata.deletion_proof import REFUSED_ACKNOWLEDGED
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.object_keys import MANIFEST_SUFFIX
from processor.storage.chunk_storage import ChunkInfo

_FINISHED_DELETE = SegmentState.DELETE_SEGMENT_FINISHED

log = logging.getLogger(__name__)

HEALTH_COMPONENT = "retention"
PROOF_COMPONENT = "archive"  # acknowledged segments the metadata does not serve: an operator acts
FAILED_PASSES_BEFORE_UNHEALTHY = 3
# Segments this worker finished deleting are skipped for a while: the follower cache may not show
# their DELETE_SEGMENT_FINISHED yet, and deleting them again would only add illegal records.
RECENTLY_DELETED_S = 600.0


class SegmentView(Protocol):
    """A partition's remote state: its segments (every state but DELETE_SEGMENT_FINISHED), the
    finished ones served, its remote log start offset and newest writer epoch."""

    def state(self, tp: TopicPartition) -> PartitionRemoteState: ...


class RemoteStateSource(Protocol):
    """The follower cache (processor/follower/metadata_cache.py), as the retention pass reads it."""

    def remote_state(self, tp: TopicPartition) -> PartitionRemoteState: ...


# Waits until the view holds every metadata record published for these partitions before the call
# (the worker's follower reaching the metadata topic's end); False when it does not in time.
CaughtUp = Callable[[Iterable[TopicPartition]], bool]


class CacheView:
    """The follower cache's view (the worker's own RocksDB materialization of the metadata topic)."""

    def __init__(self, cache: RemoteStateSource) -> None:
        self.cache = cache

    def state(self, tp: TopicPartition) -> PartitionRemoteState:
        return self.cache.remote_state(tp)


class StateView:
    """A folded snapshot of the metadata topic (the CLI, or a worker without a follower)."""

    def __init__(self, partitions: Mapping[TopicPartition, PartitionRemoteState]) -> None:
        self.partitions = partitions

    def state(self, tp: TopicPartition) -> PartitionRemoteState:
        return self.partitions.get(tp) or PartitionRemoteState()


def clean_partition(
    tp: TopicPartition,
    part: PartitionRemoteState,
    deleter: SegmentDeleter,
    epoch: int,
    limits: RetentionLimits,
    now_ms: int,
    in_flight: frozenset[uuid.UUID] = frozenset(),
    skip: frozenset[uuid.UUID] = frozenset(),
    every_rewrite: bool = False,
) -> tuple[RetentionPlan, DeletionOutcome]:
    """One owner's pass over one partition, with the claim ``epoch`` it holds: re-publish what
    rejected records shadow, remove what rejected records left, forget (tombstone) the segments
    whose deletion finished, then retention (Kafka's order, :func:`plan_retention`) including
    dangling copies and unfinished deletes.

    Acts only on a view that shows ``epoch`` as the partition's current claim: a view where another
    claim is current means this writer was taken over (FencedWriterError), and a view that does not
    show its claim yet is not one to delete by. Records go out with ``epoch`` exactly.

    Tombstones come only after every rejected record of the view was neutralised, in this pass or an
    earlier one: a rejected record was judged against the segments served when it came, and
    compaction must not remove one of those (its tombstone) while the rejected record survives; a
    reader of the compacted topic would then judge it against less, and accept it."""
    if part.current_epoch != epoch:
        raise FencedWriterError(
            f"{tp}: the metadata shows claim {part.current_epoch}, not this writer's {epoch}; not cleaning"
        )
    claim = part.header.claim
    assert claim is not None  # its epoch is this writer's
    deleter.claims[tp] = (epoch, claim.claim_id)
    unreadable = deleter.evidence.unreadable_rewrites(part, epoch, every_rewrite)
    if unreadable.delete or unreadable.unserve:
        # a served rewrite without its objects (a record forged with the claim's epoch and writer id:
        # readers cannot tell it from the holder's own): deleted, which serves again the segments it
        # superseded; one whose objects may hold the only copy is unserved, its objects kept; the
        # rest of the pass (which states again the segments beneath) waits for a view that shows it
        drop = RetentionPlan(expired=tuple((r, DeleteReason.UNREADABLE) for r in unreadable.delete))
        out = deleter.execute(tp, drop, epoch, checks=PartitionChecks(given_back=part.given_back_marked))
        for rewrite in unreadable.unserve:
            deleter.unserve(rewrite, epoch)
        out.unserved += unreadable.unserve
        out.rewrites_unchecked = unreadable.unchecked
        return RetentionPlan(), out
    repairs = part.repairs()
    stranded = part.stranded()
    if stranded:
        log.error(
            "%s: %d finished segments are served by nothing (%s; the rewrites over them deleted inner "
            "first): stating them again, which serves them",
            tp,
            len(stranded),
            ", ".join(str(s.segment_id) for s in stranded),
        )
        repairs = [*repairs, *(s for s in stranded if s not in repairs)]
    log_start_shadowed = part.log_start_shadowed()
    if part.claim_shadowed():
        # a tombstone under this claim's key: state the claim again, then re-publish every state
        # written under it (the fold marks them when it accepts the claim stated again)
        deleter.restate_claim(tp, claim)
        repairs = [*repairs, *(s for s in part.claim_records() if s not in repairs)]
        log_start_shadowed = part.log_start_offset > 0
    repairs = part.in_restatement_order(repairs)
    # rejected records first, then the states they shadow: a rejected FINISHED was judged against
    # what is served, and a reader of a topic compacted between a shadowing record and its repair
    # judges it without the shadowed state (it may serve it); its deletion comes before the repair
    out = DeletionOutcome(rewrites_unchecked=unreadable.unchecked)
    for orphan in part.orphans.values():
        error = deleter.delete_orphan(orphan, epoch)
        if error == REFUSED_ACKNOWLEDGED:
            out.refused.append((orphan, error))
        elif error is not None:
            out.failed.append((orphan, error))
    busy = in_flight | skip
    refused = [s for s in part.refused_copies(epoch) if s.segment_id.id not in busy]
    if refused:
        # before the repairs: a reader of the compacted topic judges the refused records without
        # what a repair states again after them (the deletion is accepted by both readers)
        out.merge(deleter.execute(tp, RetentionPlan(dangling=tuple(refused)), epoch))
        skip = skip | {s.segment_id.id for s in refused}
    for segment in repairs:
        deleter.repair(segment, epoch)
    if log_start_shadowed:
        deleter.repair_log_start(tp, part.log_start_offset, epoch)
    if not out.failed and not out.refused:
        kept: set[uuid.UUID] = set()  # not forgotten this pass: what names them waits too
        for segment in part.deletion_finished():
            if any(x in kept for x in segment.supersedes) or not deleter.forget(segment):
                kept.add(segment.segment_id.id)
    segments = [s for s in part.segments.values() if s.segment_id.id not in skip]
    served = {s.segment_id.id for s in part.finished()}
    rewritten = deleter.proven_superseded(part)
    # A remote log start offset is the owner's proof only where this process published it (a record
    # carrying the claim's epoch and writer id may be forged): below a start it did not publish,
    # readers stop serving, but only the user's time and size limits delete.
    proven = deleter.published_start(tp, epoch, claim.claim_id)
    plan = plan_retention(
        segments, limits, now_ms, min(proven, part.log_start_offset), served=served, current_epoch=epoch,
        in_flight=in_flight, rewritten=rewritten,
    )  # fmt: skip
    if plan.new_log_start_offset is not None and plan.new_log_start_offset <= part.log_start_offset:
        plan = replace(plan, new_log_start_offset=None)  # the start is past it already
    if part.log_start_offset > proven:
        below = [s for s in part.finished() if s.end_offset < part.log_start_offset]
        left = [s for s in below if s not in {seg for seg, _reason in plan.expired}]
        if left:
            log.warning(
                "%s: %d segments below the remote log start offset %d are kept until the retention "
                "limits reach them: this worker did not publish that start offset",
                tp,
                len(left),
                part.log_start_offset,
            )
    if not plan.empty:
        start = min(proven, part.log_start_offset)

        def corrupt(rewrite: RemoteLogSegmentMetadata) -> tuple[str, bool] | None:
            why = deleter.evidence.index_fault(rewrite)
            return None if why is None else (why, sources_kept(rewrite, part))

        out.merge(
            deleter.execute(
                tp,
                plan,
                epoch,
                start,
                PartitionChecks(
                    part.in_lineage,
                    rewritten,
                    corrupt,
                    part.restorable,
                    part.served_over,
                    part.given_back_marked,
                    part.held_by,
                ),
            )
        )
    return plan, out


@dataclass
class PassResult:
    outcome: DeletionOutcome = field(default_factory=DeletionOutcome)
    partitions: int = 0
    fenced: list[TopicPartition] = field(default_factory=list)  # another claim holds them now
    not_caught_up: bool = False  # the view lagged the metadata topic: the pass did nothing
    sweeps_failed: list[TopicPartition] = field(default_factory=list)  # retried at the next pass

    @property
    def ok(self) -> bool:
        return not self.outcome.failed and not self.not_caught_up and not self.sweeps_failed


class RetentionService:
    def __init__(
        self,
        config: RetentionConfig,
        view: SegmentView,
        deleter: SegmentDeleter,
        deletion_topic: DeletionTopic | None,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        in_flight: Callable[[TopicPartition], frozenset[uuid.UUID]] = lambda tp: frozenset(),
        caught_up: CaughtUp | None = None,
        unreferenced_min_age_ms: int = UNREFERENCED_MIN_AGE_MS,
    ) -> None:
        self.in_flight = in_flight
        # the once-per-claim sweep leaves younger unreferenced objects (a model test's clock is
        # offsets, not milliseconds, and passes 0)
        self.unreferenced_min_age_ms = unreferenced_min_age_ms
        self.caught_up = caught_up  # the ids of the copies the leader has in progress
        # partition -> the claim (epoch, id) its objects were swept under
        self._swept: dict[TopicPartition, tuple[int, uuid.UUID]] = {}
        # partition -> the claim under which every served rewrite's objects were checked
        self._rewrites_checked: dict[TopicPartition, tuple[int, uuid.UUID | None]] = {}
        # partition -> (claim, the storage's time at the first pass under it): the sweep deletes only
        # objects the storage wrote after that
        self._claim_seen: dict[TopicPartition, tuple[tuple[int, uuid.UUID], int]] = {}
        self._probed = False
        self._storage_now: int | None = None
        self.config = config
        self.view = view
        self.deleter = deleter
        self.deletion_topic = deletion_topic
        self.clock_ms = clock_ms
        self.failed_passes = 0
        self._recently_deleted: dict[uuid.UUID, float] = {}
        # partition -> manifests its last sweep found that no record of the metadata names:
        # acknowledged segments the metadata lost (a metadata partition that lost its tail)
        self._lost_manifests: dict[TopicPartition, int] = {}
        self.gauges = RemoteLogGauges()

    def run_pass(self, led: Mapping[TopicPartition, int]) -> PassResult:
        """One pass over the led partitions (partition -> the claim epoch this worker holds there).
        A partition whose metadata shows another claim is skipped and reported in ``fenced``."""
        result = PassResult(partitions=len(led))
        # Plan on a view that holds everything published so far: a rejected record is then
        # neutralised (its objects removed, its key tombstoned, what it shadows re-published) before
        # this pass changes a segment its verdict depended on. Were the deletion first, compaction
        # could keep the rejected record and drop that segment's FINISHED, and a follower reading
        # the compacted topic would accept what the live fold rejected.
        if led and self.caught_up is not None and not self.caught_up(led):
            result.not_caught_up = True
            self._failed("the follower has not reached the metadata topic's end; nothing deleted this pass")
            return result
        try:
            if self.deletion_topic is not None and led:
                for segment in self.deletion_topic.pending(set(led)):
                    tp = segment.topic_partition
                    part = self.view.state(tp)
                    if part.current_epoch != led[tp]:
                        continue  # not ours to act on now: the claim holder retries it
                    result.outcome.merge(
                        retry_failed(
                            self.deleter,
                            [segment],
                            led[tp],
                            part.accepted_state,
                            part.log_start_offset,
                            part.in_lineage,
                        )
                    )
            now = self.clock_ms()
            self._probed, self._storage_now = False, None  # the storage's clock, read once if needed
            self._forget_old(time.monotonic())
            refused: dict[TopicPartition, int] = {}
            for tp, epoch in sorted(led.items()):
                # One snapshot of the partition with this leader's copies in it: the copies in
                # flight before the state is read and after. A copy that finishes in between is in
                # the first set; one that starts in between is in the second. (A copy that does both
                # is FINISHED already, and the conditional delete is rejected if the plan saw it
                # STARTED: the fold has the last word.)
                # the listing before the state the sweep judges it by (an upload's STARTED is
                # published before its first byte, so the state names every object listed of a copy
                # that could still finish); the state read first only for its claim and folder
                first = self.view.state(tp)
                claim = first.header.claim
                sweep = None if claim is None else self._sweep_due(tp, (epoch, claim.claim_id))
                listed: list[ChunkInfo] | None = None
                if sweep is not None:
                    listed = list(self.deleter.storage.list(sweep_prefix(tp, first, self.deleter)))
                claim_id = None if claim is None else claim.claim_id
                in_flight = self.in_flight(tp)
                part = self.view.state(tp)
                in_flight |= self.in_flight(tp)
                try:
                    plan, outcome = clean_partition(
                        tp,
                        part,
                        self.deleter,
                        epoch,
                        self.config.limits(tp.topic),
                        now,
                        in_flight,
                        frozenset(self._recently_deleted),
                        every_rewrite=self._rewrites_checked.get(tp) != (epoch, claim_id),
                    )
                except FencedWriterError as exc:
                    log.warning("retention pass: %s", exc)
                    result.fenced.append(tp)
                    continue
                # every served rewrite is checked once a claim, and again after a pass deleted one: a
                # deleted rewrite serves again what it superseded, which may be a rewrite of an earlier
                # claim (a forged one under a forged one) that no pass of this claim has checked; and
                # again after a pass that could not check one (a storage error)
                touched = (*outcome.deleted, *(f for f, _error in outcome.failed), *outcome.unserved)
                if outcome.rewrites_unchecked or any(s.supersedes for s in touched):
                    self._rewrites_checked.pop(tp, None)
                else:
                    self._rewrites_checked[tp] = (epoch, claim_id)
                if sweep is not None and listed is not None and claim is not None and not outcome.failed:
                    if not self._sweep(tp, part, plan, sweep, listed, in_flight | self.in_flight(tp)):
                        result.sweeps_failed.append(tp)
                    else:
                        self._swept[tp] = (epoch, claim.claim_id)
                for s in outcome.deleted:
                    self._recently_deleted[s.segment_id.id] = time.monotonic()
                if outcome.refused:
                    refused[tp] = len(outcome.refused)
                if plan.unserved:
                    log.info(
                        "%s: %d finished segments are not served (a retired topic id, or superseded) and "
                        "are kept; `processor delete-topic --topic-id` deletes a retired history",
                        tp,
                        len(plan.unserved),
                    )
                result.outcome.merge(outcome)
                self.gauges.partition(tp, part, None if plan.empty else plan, outcome)
            self.gauges.publish()
        except ProcessorError as exc:
            self._failed(f"retention pass failed: {exc}")
            raise
        for tp in [tp for tp in self._lost_manifests if tp not in led]:
            del self._lost_manifests[tp]  # led elsewhere now: its holder's sweep reports it
        behind = sorted({*refused, *self._lost_manifests})
        if behind:
            HEALTH.report(
                PROOF_COMPONENT,
                f"acknowledged segments the metadata does not serve in {len(behind)} partitions "
                f"({', '.join(str(tp) for tp in behind[:5])}): nothing of them is deleted; "
                "the metadata topic is behind the bucket, run `processor rebuild-metadata`",
            )
        else:
            HEALTH.clear(PROOF_COMPONENT)
        if result.ok:
            self.failed_passes = 0
            HEALTH.clear(HEALTH_COMPONENT)
        else:
            self._failed(
                f"{len(result.outcome.failed)} segment deletions failed (queued for retry), "
                f"{len(result.sweeps_failed)} sweeps failed"
            )
        return result

    def _sweep(
        self,
        tp: TopicPartition,
        part: PartitionRemoteState,
        plan: RetentionPlan,
        sweep: tuple[int, int],
        listed: list[ChunkInfo],
        in_flight: frozenset[uuid.UUID],
    ) -> bool:
        """Once per claim: objects of this claim that nobody recorded, and the manifests its copier
        could not write. A storage error fails this partition's sweep alone (retried at the next
        pass); the pass goes on with the other partitions, its deletions reported."""
        storage_now, since = sweep
        try:
            swept = sweep_unreferenced(
                tp,
                part,
                self.deleter,
                storage_now,
                in_flight,
                self.unreferenced_min_age_ms,
                listed=listed,
                written_since_ms=since,
            )
            lost = sum(1 for key in swept.kept if key.endswith(MANIFEST_SUFFIX))
            if lost:
                self._lost_manifests[tp] = lost
            else:
                self._lost_manifests.pop(tp, None)
            planned = {
                s.segment_id.id
                for s in (*plan.requeue, *plan.dangling, *(seg for seg, _reason in plan.expired))
            } | set(self._recently_deleted)
            write_missing_manifests(tp, part, self.deleter.storage, frozenset(planned))
        except StorageError as exc:
            log.warning(
                "%s: the sweep or the manifest backfill failed (%s); retried at the next pass", tp, exc
            )
            return False
        return True

    def _sweep_due(self, tp: TopicPartition, claim: tuple[int, uuid.UUID]) -> tuple[int, int] | None:
        """(the storage's time now, its time when this claim was first seen here) when the claim's
        sweep is due: once per claim (its epoch and id: an epoch may be handed out again after the
        metadata partition lost its tail), at a pass after the first one under it and at least
        ``unreferenced_min_age_ms`` later by the storage's clock; None otherwise."""
        if self._swept.get(tp) == claim:
            return None
        if not self._probed:  # one probe a pass, for all its partitions
            self._probed = True
            try:
                self._storage_now = storage_now_ms(self.deleter.storage, self.deleter.keys.prefix)
            except StorageError as exc:
                log.warning("the storage's clock could not be read (%s); no sweep this pass", exc)
                self._storage_now = None
        now = self._storage_now
        if now is None:
            return None
        seen = self._claim_seen.get(tp)
        if seen is None or seen[0] != claim:
            self._claim_seen[tp] = (claim, now)
            return None
        if now - seen[1] < self.unreferenced_min_age_ms or now < seen[1]:
            return None
        return now, seen[1]

    def _failed(self, reason: str) -> None:
        self.failed_passes += 1
        if self.failed_passes >= FAILED_PASSES_BEFORE_UNHEALTHY:
            HEALTH.report(HEALTH_COMPONENT, f"{reason} ({self.failed_passes} passes in a row)")

    def _forget_old(self, now: float) -> None:
        for sid, at in list(self._recently_deleted.items()):
            if now - at > RECENTLY_DELETED_S:
                del self._recently_deleted[sid]
