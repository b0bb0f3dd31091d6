"""Carries out deletions in KIP-405's order; storage and Kafka sit behind the small protocols below.

For one partition: publish the new remote log start offset first (readers stop serving below it at
once), then for its segments, oldest first: a conditional DELETE_SEGMENT_STARTED naming the state
the plan saw (readers accept it only while the segment is still in that state, so a copy that
finished after the plan is never deleted as dangling), confirmed accepted through the follower,
then its objects (manifest first; a missing object is success), then DELETE_SEGMENT_FINISHED. Each
step is taken for all the segments of the pass at once (:meth:`SegmentDeleter.delete_segments`):
every STARTED published with one wait for the broker's acknowledgements and confirmed in order,
then every confirmed segment's manifest, then their data, index and key filter objects
(``delete_many``: S3's DeleteObjects, a thousand keys a request), then every FINISHED; a merge of
a thousand small segments costs a handful of requests where it cost four thousand and a thousand
acknowledgements one after the other. A segment whose STARTED is not confirmed has no object
touched. The tombstones that let compaction forget the segment come in a later pass, once the
owner's view shows the DELETE_SEGMENT_FINISHED and every rejected record of the partition has been
neutralised (:meth:`SegmentDeleter.forget`, processor/lifecycle/retention_service.py).

Proof (processor/metadata/deletion_proof.py): a segment that is not served and has a manifest is
acknowledged data a lagging or compacted view does not know: it is never deleted here, only
reported (``processor_deletions_refused_total``).

Ownership: every record carries the deleting writer's claim epoch, exactly (never a number it works
out; see :mod:`processor.metadata.fold_rules`). A writer whose claim was taken over (paused past its
session timeout, say) learns it from the rejected DELETE_SEGMENT_STARTED and stops
(FencedWriterError) without touching an object.

Object keys come from records of the metadata or deletion topic, input like any other: only objects
that :meth:`ObjectKeyFactory.owned_objects` accepts as the segment's own are deleted; anything else
is refused, logged and counted as a failed deletion.

Failures: a storage error leaves the segment in DELETE_SEGMENT_STARTED, is counted
(``processor_remote_delete_failures_total``) and is published to the deletion topic, from where the
next pass retries it; the pass goes on with the other segments. A metadata topic error is raised:
without its records the deletion cannot be made visible, and the next pass starts over.

Fail closed: an error while reading a proof (a HEAD or GET that fails, an index that does not read
or verify) never counts as proof. The deletion is left as it is for the next pass, counted
(``processor_deletion_proofs_failed_total{reason}``, :mod:`processor.lifecycle.rewrite_proof`) and
logged.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence, Set
from dataclasses import replace

from processor import metrics
from processor.errors import (
    FencedWriterError,
    InvalidNameError,
    StorageError,
)
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_evidence import DeletionEvidence
from processor.lifecycle.deletions_found_started import DeletionsFoundStarted
from processor.lifecycle.object_deletion import ObjectDeletion
from processor.lifecycle.ports import (
    FINISH,
    LEFT,
    NO_CHECKS,
    RESTORED,
    DeletionOutcome,
    FailedDeletions,
    MetadataWriter,
    PartitionChecks,
    Tombstones,
    publish_all,
)
from processor.lifecycle.retention_policy import DeleteReason, RetentionPlan
from processor.metadata.deletion_proof import REFUSED_ACKNOWLEDGED
from processor.metadata.fold_state import Claim
from processor.metadata.model import (
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
)
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.sink import Confirm
from processor.reader.segment_keys import NO_DECRYPTION, SegmentDecryption
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)

_S = SegmentState


def _now_ms() -> int:
    return int(time.time() * 1000)


class SegmentDeleter(ObjectDeletion, DeletionsFoundStarted):
    def __init__(
        self,
        storage: ChunkStorage,
        metadata: MetadataWriter,
        tombstones: Tombstones,
        failed: FailedDeletions,
        writer_id: str,
        keys: ObjectKeyFactory,
        confirm: Confirm,
        clock_ms: Callable[[], int] = _now_ms,
        decryption: SegmentDecryption = NO_DECRYPTION,
    ) -> None:
        self.storage = storage
        # opens the indexes of encrypted rewrites and their sources (their proofs are read); without
        # the key an encrypted rewrite proves nothing, and its sources are kept
        self.decryption = decryption
        self.metadata = metadata
        self.tombstones = tombstones
        self.failed = failed
        self.writer_id = writer_id
        self.keys = keys
        self.confirm = confirm
        self.clock_ms = clock_ms
        # the deletions this deleter started (its DELETE_SEGMENT_STARTED confirmed accepted) and
        # finished: its own records, the only proof a deletion found in the metadata is one to finish
        # segment -> (writer epoch, event time) of the DELETE_SEGMENT_STARTED it published
        self.started: dict[uuid.UUID, tuple[int, int]] = {}
        # segment -> event time of the DELETE_SEGMENT_FINISHED it published
        self.finished: dict[uuid.UUID, int] = {}
        # (partition, claim epoch, claim id) -> the highest remote log start offset it published there
        self.published_starts: dict[tuple[TopicPartition, int, uuid.UUID | None], int] = {}
        self.claims: dict[TopicPartition, tuple[int, uuid.UUID]] = {}  # the claim each pass acts under
        self.evidence = DeletionEvidence(storage, keys, decryption)

    def _publish_confirmed(self, record: MetadataRecord, what: str) -> None:
        offset = self.metadata.publish(record)
        if self.confirm(record, offset) is not True:
            raise self._refused(record, what)

    @staticmethod
    def _refused(record: MetadataRecord, what: str) -> FencedWriterError:
        return FencedWriterError(
            f"{what} (writer epoch {getattr(record, 'writer_epoch', '?')}) was not accepted by the "
            f"metadata topic's readers: another claim holds {record.topic_partition}, or the "
            "segment's state changed since the pass planned (a copy finished); stopping"
        )

    def move_log_start_offset(
        self, tp: TopicPartition, offset: int, writer_epoch: int, decided: bool = True
    ) -> None:
        """Publish a remote log start offset; ``decided``: this deleter's own decision (its retention,
        or the user's delete-before), the proof its later passes delete below it by. A start stated
        again after a rejected record shadowed it (someone else's decision, possibly forged) is not."""
        record = RemoteLogStartOffset(tp, offset, self.clock_ms(), self.writer_id, writer_epoch)
        self._publish_confirmed(record, f"remote log start offset {offset} of {tp}")
        if not decided:
            return
        claim = self.claims.get(tp)
        key = (tp, writer_epoch, claim[1] if claim is not None and claim[0] == writer_epoch else None)
        self.published_starts[key] = max(offset, self.published_starts.get(key, 0))

    def published_start(self, tp: TopicPartition, epoch: int, claim_id: uuid.UUID) -> int:
        """The highest remote log start offset this deleter published under this claim (0: none)."""
        return self.published_starts.get((tp, epoch, claim_id), 0)

    def execute(
        self,
        tp: TopicPartition,
        plan: RetentionPlan,
        writer_epoch: int,
        log_start_offset: int = 0,
        checks: PartitionChecks = NO_CHECKS,
    ) -> DeletionOutcome:
        """Carry out one partition's plan in order; see the module docstring. Raises
        FencedWriterError as soon as one of its records is not accepted."""
        out = DeletionOutcome()
        if plan.new_log_start_offset is not None:
            self.move_log_start_offset(tp, plan.new_log_start_offset, writer_epoch)
            out.log_start_offset = plan.new_log_start_offset
        requeue = []
        start = max(log_start_offset, plan.new_log_start_offset or 0)
        named_by_restored: set[uuid.UUID] = set()
        restored: list[RemoteLogSegmentMetadata] = []
        # rewrites first, the widest first (a merge of merges before the merges it names): one
        # served again holds the offsets of the segments it names, which are then left as they are
        # (published again too, they would overlap it and be refused); so is anything else
        # overlapping one served again in this pass that it does not name (the view predates it).
        # A rewrite left because what it names was given back (deleted too, and served again only
        # now) is asked again once that is served again: one round per level of rewrites
        todo = sorted(
            plan.requeue, key=lambda s: (not s.supersedes, s.start_offset - s.end_offset, s.start_offset)
        )
        while todo:
            left, before = [], len(restored)
            for segment in todo:
                if segment.segment_id.id in named_by_restored or any(
                    r.start_offset <= segment.end_offset
                    and segment.start_offset <= r.end_offset
                    and r.segment_id.id not in segment.supersedes
                    for r in restored
                ):
                    continue
                proof = self.prove_deletion(segment, writer_epoch, start, checks, restored)
                if proof == RESTORED:
                    named_by_restored.update(segment.supersedes)
                    restored.append(segment)
                elif proof == LEFT and segment.supersedes:
                    left.append(segment)
                if proof == FINISH:
                    requeue.append(segment)
                elif proof == REFUSED_ACKNOWLEDGED:
                    out.refused.append((segment, proof))
            new = {r.segment_id.id for r in restored[before:]}  # none: every level is done
            todo = [s for s in left if new.intersection(s.supersedes)]
        dangling = []
        for segment in plan.dangling:
            found = self.evidence.acknowledged_or_unknown(segment)
            if found is None:
                continue  # could not be asked: the next pass
            if found:
                out.refused.append((segment, REFUSED_ACKNOWLEDGED))
            else:
                dangling.append(segment)
        work: list[tuple[RemoteLogSegmentMetadata, DeleteReason]] = [
            *((s, DeleteReason.RETRY) for s in requeue),
            *((s, DeleteReason.DANGLING) for s in dangling),
            *plan.expired,
        ]
        self.delete_segments(work, writer_epoch, out)
        self._state_served_over_again(requeue, work, writer_epoch, out, checks)
        return out

    def _state_served_over_again(
        self,
        requeue: Sequence[RemoteLogSegmentMetadata],
        work: Sequence[tuple[RemoteLogSegmentMetadata, DeleteReason]],
        writer_epoch: int,
        out: DeletionOutcome,
        checks: PartitionChecks,
    ) -> None:
        """A deletion found started and stated again here moves, for a reader of the compacted
        topic, to where it is stated now: a segment served over its offsets meanwhile (one it gave
        back, its state re-published since) would be judged there while it is still served, and
        refused. Each is stated again after it, after the finished segments it holds
        (``checks.held_by``); so is a segment the deletion of a served rewrite gives back that such
        a reader may hold without its claim (``checks.given_back``). None deleted in this pass."""
        done = {s.segment_id.id for s in out.deleted} | {s.segment_id.id for s, _error in out.failed}
        stated = [s for s, _reason in work if s.segment_id.id in done]
        busy = {s.segment_id.id for s, _reason in work}
        found = {s.segment_id.id for s in requeue}
        again: dict[uuid.UUID, RemoteLogSegmentMetadata] = {}
        for segment in stated:
            over = (
                checks.served_over(segment)
                if checks.served_over is not None and segment.segment_id.id in found
                else []
            )
            back = checks.given_back(segment) if checks.given_back is not None else []
            for served in (*over, *back):
                # (and the segments it holds first: stated again before it in this pass, they
                # would be judged where the deletion left what it overlaps served, and refused)
                held = checks.held_by(served) if checks.held_by is not None else []
                for s in (*held, served):
                    if s.segment_id.id not in busy:
                        again.setdefault(s.segment_id.id, s)
        for served in again.values():
            self.repair(served, writer_epoch)

    def proven_superseded(
        self, part: PartitionRemoteState, only: Set[uuid.UUID] | None = None
    ) -> frozenset[uuid.UUID]:
        return self.evidence.proven_superseded(part, only)

    def delete_superseded(
        self,
        tp: TopicPartition,
        sources: Sequence[RemoteLogSegmentMetadata],
        writer_epoch: int,
        part: PartitionRemoteState | None = None,
    ) -> list[str]:
        """Delete segments a rewrite supersedes; returns what could not be deleted (kept for want of
        proof, or queued on the deletion topic; retried by the owner's passes). ``part``: the view
        they were found in, read after the rewrite's FINISHED was confirmed (a merge's or erasure's
        own sources too), whose rewrites must prove each of them garbage by content
        (:meth:`proven_superseded`): a source the view serves (its rewrite's deletion started, a
        forged one say) is no garbage. None: no view, so no proof: nothing is deleted."""
        wanted = {s.segment_id.id for s in sources}
        proven = frozenset() if part is None else self.proven_superseded(part, wanted)
        unproven = [
            f"{s.segment_id}: kept, no rewrite the metadata serves is shown to hold its records"
            for s in sources
            if s.segment_id.id not in proven
        ]
        sources = [s for s in sources if s.segment_id.id in proven]
        if not sources:
            return unproven
        plan = RetentionPlan(expired=tuple((s, DeleteReason.REWRITTEN) for s in sources))
        rewritten = frozenset(s.segment_id.id for s in sources)
        outcome = self.execute(tp, plan, writer_epoch, checks=PartitionChecks(rewritten=rewritten))
        return unproven + [f"{s.segment_id}: {error}" for s, error in outcome.failed]

    def delete_segment(
        self, segment: RemoteLogSegmentMetadata, reason: DeleteReason, writer_epoch: int
    ) -> str | None:
        """Delete one segment; returns None when done, or the storage error (recorded for retry)."""
        out = DeletionOutcome()
        self.delete_segments([(segment, reason)], writer_epoch, out)
        return out.failed[0][1] if out.failed else None

    def delete_segments(
        self,
        work: Sequence[tuple[RemoteLogSegmentMetadata, DeleteReason]],
        writer_epoch: int,
        out: DeletionOutcome,
    ) -> None:
        """Delete several segments of one partition, in the order of the module docstring, each step
        for all of them at once: every DELETE_SEGMENT_STARTED published together (one wait for the
        broker's acknowledgements) and confirmed, then the manifests of the confirmed ones, then
        their other objects (``delete_many``: S3's DeleteObjects, a thousand keys a request), then
        their DELETE_SEGMENT_FINISHED together. Done ones go to ``out.deleted``, those whose objects
        could not all be deleted to ``out.failed`` (recorded for retry). A record the readers do not
        accept stops the confirmations there: the segments confirmed before it are deleted, no
        object of it or of any later one is touched, and FencedWriterError is raised."""
        if not work:
            return
        stated = [self._deletion_record(segment, writer_epoch) for segment, _ in work]
        offsets = publish_all(self.metadata, stated)
        confirmed: list[tuple[RemoteLogSegmentMetadata, RemoteLogSegmentMetadata, DeleteReason]] = []
        refused: FencedWriterError | None = None
        for (segment, reason), record, offset in zip(work, stated, offsets, strict=True):
            if self.confirm(record, offset) is not True:
                again = " stated again" if segment.state is _S.DELETE_SEGMENT_STARTED else ""
                refused = self._refused(record, f"DELETE_SEGMENT_STARTED of {segment.segment_id}{again}")
                break
            self.started[segment.segment_id.id] = (writer_epoch, record.event_timestamp_ms)
            confirmed.append((segment, record, reason))
        errors = self.delete_objects_of([record for _, record, _ in confirmed])
        finished = []
        for segment, record, reason in confirmed:
            error = errors.get(segment.segment_id.id)
            if error is not None:
                out.failed.append((segment, error))
                continue
            finished.append((segment, record.with_state(_S.DELETE_SEGMENT_FINISHED, self.clock_ms()), reason))
        publish_all(self.metadata, [deleted for _, deleted, _ in finished])
        for segment, deleted, reason in finished:
            self.finished[segment.segment_id.id] = deleted.event_timestamp_ms
            if reason is DeleteReason.RETRY:
                self.failed.resolve(segment)  # it may also wait on the deletion topic: done now
            metrics.SEGMENTS_DELETED.labels(reason.value).inc()
            log.info(
                "deleted remote segment %s (%d..%d, %s)",
                segment.segment_id,
                segment.start_offset,
                segment.end_offset,
                reason.value,
            )
            out.deleted.append(segment)
        if refused is not None:
            raise refused

    def _deletion_record(
        self, segment: RemoteLogSegmentMetadata, writer_epoch: int
    ) -> RemoteLogSegmentMetadata:
        """The DELETE_SEGMENT_STARTED that deletes ``segment`` under this writer's claim: conditional
        on the state the plan saw (a copy that finished since the plan makes the fold reject it, and
        then nothing is deleted), or, for a deletion found in the metadata, stated again
        (:meth:`state_deletion_again`). A copy of an earlier claim that never finished is deleted
        unconditionally: no record of that claim is accepted any more, so the condition changes
        nothing for readers of the live topic, while a reader of the compacted topic that accepted a
        FINISHED the live readers refused (:meth:`Restatements.refused_copies`) would refuse
        a conditional one."""
        if segment.state is _S.DELETE_SEGMENT_STARTED:
            return replace(
                segment,
                writer_id=self.writer_id,
                writer_epoch=writer_epoch,
                event_timestamp_ms=self.clock_ms(),
            )
        record = segment.deleting(self.clock_ms(), self.writer_id, writer_epoch)
        if segment.state is _S.COPY_SEGMENT_STARTED and segment.writer_epoch < writer_epoch:
            return replace(record, replaces_state=None)
        return record

    def state_deletion_again(
        self, segment: RemoteLogSegmentMetadata, writer_epoch: int
    ) -> RemoteLogSegmentMetadata:
        """A deletion found in the metadata is stated again under this writer's claim, and confirmed,
        before any of its objects goes: the view it was found in may be stale (a paused worker whose
        claim was taken since, a segment served again by the next holder), and the readers then
        reject the record (another claim, or the segment no longer being deleted: the condition it
        names), so nothing is deleted. Raises FencedWriterError then."""
        again = self._deletion_record(segment, writer_epoch)
        self._publish_confirmed(again, f"DELETE_SEGMENT_STARTED of {segment.segment_id} stated again")
        self.started[segment.segment_id.id] = (writer_epoch, again.event_timestamp_ms)
        return again

    def state_deletions_again(
        self, segments: Sequence[RemoteLogSegmentMetadata], writer_epoch: int
    ) -> tuple[list[RemoteLogSegmentMetadata], list[tuple[RemoteLogSegmentMetadata, FencedWriterError]]]:
        """:meth:`state_deletion_again` for several deletions at once: every record published with
        one wait for the acknowledgements, then each confirmed. Returns the records the readers
        accepted (their objects may go) and the segments whose record they did not, each with why
        (nothing of those may be deleted now)."""
        stated = [self._deletion_record(segment, writer_epoch) for segment in segments]
        offsets = publish_all(self.metadata, stated)
        accepted, refused = [], []
        for segment, again, offset in zip(segments, stated, offsets, strict=True):
            if self.confirm(again, offset) is not True:
                what = f"DELETE_SEGMENT_STARTED of {segment.segment_id} stated again"
                refused.append((segment, self._refused(again, what)))
                continue
            self.started[segment.segment_id.id] = (writer_epoch, again.event_timestamp_ms)
            accepted.append(again)
        return accepted, refused

    def delete_orphan(self, segment: RemoteLogSegmentMetadata, writer_epoch: int | None = None) -> str | None:
        """Remove what a *rejected* record of a segment no accepted record knows left behind: its
        objects (if the fenced writer uploaded any) and its key (so compaction forgets it). A segment
        with a manifest is refused (its copy was acknowledged: the view is behind the bucket).

        A rejected COPY_SEGMENT_FINISHED is first recorded deleted (DELETE_SEGMENT_FINISHED under
        ``writer_epoch``, confirmed): where it was judged against a state compaction may take away
        (an overlap with a served segment whose key a rejected record shadows), a reader of the
        compacted topic may have served it; the deletion unserves it there before anything the
        owner re-publishes after it."""
        found = self.evidence.acknowledged_or_unknown(segment)
        if found is None:
            return "its manifest could not be asked for"
        if found:
            return REFUSED_ACKNOWLEDGED
        try:
            keys = self.owned_objects(segment)
            for key in keys.in_delete_order():
                self.storage.delete(key)
        except (StorageError, InvalidNameError) as exc:
            metrics.DELETE_FAILURES.inc()
            log.warning("could not remove what rejected segment %s left (%s)", segment.segment_id, exc)
            return str(exc)
        if writer_epoch is not None and segment.state is _S.COPY_SEGMENT_FINISHED:
            deleted = replace(
                segment,
                state=_S.DELETE_SEGMENT_FINISHED,
                event_timestamp_ms=self.clock_ms(),
                writer_id=self.writer_id,
                writer_epoch=writer_epoch,
                replaces_state=None,
            )
            self._publish_confirmed(deleted, f"DELETE_SEGMENT_FINISHED of rejected {segment.segment_id}")
            self.finished[segment.segment_id.id] = deleted.event_timestamp_ms
        self.tombstones.tombstone(segment)
        metrics.SEGMENTS_DELETED.labels(DeleteReason.DANGLING.value).inc()
        return None

    def repair(self, segment: RemoteLogSegmentMetadata, writer_epoch: int) -> None:
        """Re-publish a served segment's accepted state under this writer's claim: a rejected record
        shadows its key, and compaction must never leave that record as the key's only one."""
        record = replace(
            segment, writer_id=self.writer_id, writer_epoch=writer_epoch, event_timestamp_ms=self.clock_ms()
        )
        self._publish_confirmed(record, f"repair of {segment.segment_id}")

    def unserve(self, segment: RemoteLogSegmentMetadata, writer_epoch: int) -> None:
        """Stop serving a served segment without deleting anything: its DELETE_SEGMENT_STARTED,
        conditional on its FINISHED, and no object touched. Not recorded as started here, so no pass
        of this deleter finishes it on its own word: one that finds it started proves it again
        (:meth:`prove_deletion`), and leaves an unreadable rewrite's objects as they are."""
        self._publish_confirmed(
            segment.deleting(self.clock_ms(), self.writer_id, writer_epoch),
            f"DELETE_SEGMENT_STARTED of {segment.segment_id} (objects kept)",
        )

    def repair_log_start(self, tp: TopicPartition, offset: int, writer_epoch: int) -> None:
        self.move_log_start_offset(tp, offset, writer_epoch, decided=False)

    def restate_claim(self, tp: TopicPartition, claim: Claim) -> None:
        """Publish the holder's claim again under its own key (a tombstone was filed there): readers
        of the compacted topic then find the claim before the records re-published after it."""
        record = PartitionClaim(
            tp,
            claim.claim_id,
            claim.kind,
            claim.writer_id,
            self.clock_ms(),
            claim.topic_id,
            restates_epoch=claim.epoch,
        )
        self._publish_confirmed(record, f"claim {claim.epoch} of {tp} stated again")
