"""The deleter's answer to a deletion it finds started
(:class:`~processor.lifecycle.segment_deleter.SegmentDeleter`): whether a segment in
DELETE_SEGMENT_STARTED may be finished here, must be served again (stated FINISHED under this
writer's claim: a forged deletion, or one a process left before deleting anything), or is left as
it is. Fail closed: a storage error proves nothing."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Sequence
from dataclasses import replace

from processor.errors import FencedWriterError, StorageError
from processor.lifecycle.deletion_evidence import DeletionEvidence
from processor.lifecycle.ports import FINISH, LEFT, NO_CHECKS, RESTORED, UNPROVEN, PartitionChecks
from processor.lifecycle.rewrite_proof import PROOF_STORAGE_ERROR, proof_failed
from processor.metadata.deletion_proof import REFUSED_ACKNOWLEDGED
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState

log = logging.getLogger("processor.lifecycle.segment_deleter")  # the deleter's log, as before

_S = SegmentState


class DeletionsFoundStarted:
    """The proof step of a deleter; the deleter sets these in its constructor."""

    evidence: DeletionEvidence
    started: dict[uuid.UUID, tuple[int, int]]  # segment -> (epoch, event time) of its own STARTED

    def repair(self, segment: RemoteLogSegmentMetadata, writer_epoch: int) -> None:
        raise NotImplementedError

    def prove_deletion(
        self,
        segment: RemoteLogSegmentMetadata,
        writer_epoch: int,
        log_start_offset: int = 0,
        checks: PartitionChecks = NO_CHECKS,
        restored: Sequence[RemoteLogSegmentMetadata] = (),
    ) -> str:
        """Whether a deletion found in DELETE_SEGMENT_STARTED may be finished here: one this deleter
        started (its own confirmed record), one of a segment below the remote log start offset
        (retention moves it past the segments it deletes first), one the fold accepted while the
        copy was unfinished (never served; refused if the segment has a manifest), one a served
        rewrite supersedes (``rewritten``: the owner's accepted rewrite names it), or one whose data
        or index is gone already (its deletion is under way). Any other deletion of a served segment
        of the partition's history, with all its objects in place (a record forged with the claim's
        epoch and writer id, or left by a process that crashed before deleting anything), is undone:
        the segment is published again as COPY_SEGMENT_FINISHED under this writer's claim and served
        again (``RESTORED``; when the readers do not accept that, ``LEFT``). One of a segment the
        partition would not serve (a retired topic id's: ``processor delete-topic`` deletes those),
        or any when ``servable`` is not given (the caller does not know the partition's history), is
        left as it is (``LEFT``), as is one that ``restorable`` says readers would not serve again
        (a served segment it does not name overlaps it: the segments it named were given back, and
        their offsets are served). A storage error while asking (a HEAD that fails) proves nothing:
        ``UNPROVEN``, the deletion waits for the next pass."""
        if self.started.get(segment.segment_id.id) == (segment.writer_epoch, segment.event_timestamp_ms):
            return FINISH
        if segment.replaces_state is _S.COPY_SEGMENT_STARTED:
            found = self.evidence.acknowledged_or_unknown(segment)
            if found is None:
                return UNPROVEN
            return REFUSED_ACKNOWLEDGED if found else FINISH
        servable, corrupt, restorable = checks.servable, checks.corrupt, checks.restorable
        if segment.segment_id.id in checks.rewritten:
            return FINISH  # a served rewrite supersedes it: its offsets are read from the rewrite
        if servable is None or not servable(segment):
            return LEFT
        if segment.end_offset < log_start_offset:
            return FINISH
        try:
            complete = self.evidence.has_objects(segment)  # keys not its own: not complete
        except StorageError as exc:  # no answer is no proof: a failed HEAD never finishes a deletion
            proof_failed(PROOF_STORAGE_ERROR, f"the deletion of {segment.segment_id}", exc)
            return UNPROVEN
        if not complete:
            return FINISH
        if segment.supersedes and corrupt is not None:
            # a rewrite is served again only if its index verifies: junk at its keys (a forged
            # rewrite the holder found unreadable and began to delete) would hide the segments it
            # names, which hold its offsets and are served while its deletion stands
            try:
                fault = corrupt(segment)
            except StorageError as exc:
                proof_failed(PROOF_STORAGE_ERROR, f"the deletion of rewrite {segment.segment_id}", exc)
                return UNPROVEN
            if fault is not None:
                why, named_finished = fault
                # the segments it names finished: they hold its offsets, its deletion loses nothing;
                # one of them gone or being deleted: it is left as it is, objects kept, not served
                log.error(
                    "the deletion of rewrite %s (%d..%d) was not started by this worker; its index does "
                    "not verify (%s): %s",
                    segment.segment_id,
                    segment.start_offset,
                    segment.end_offset,
                    why,
                    "the segments it names are finished: finishing it"
                    if named_finished
                    else "not served again, its objects kept (a segment it names is not finished)",
                )
                return FINISH if named_finished else LEFT
        if restorable is not None and not restorable(segment, restored):
            # stated again it would be refused: what it named was given back and is served (its
            # deletion forged, or a rewrite of one whose deletion was): its objects are left
            log.warning(
                "the deletion of %s (%d..%d) was not started by this worker, but served segments it "
                "does not name hold its offsets now: left as it is",
                segment.segment_id,
                segment.start_offset,
                segment.end_offset,
            )
            return LEFT
        log.error(
            "the deletion of %s (%d..%d) was not started by this worker and all its objects are in "
            "place (a forged record, or a worker that stopped before deleting anything): serving it again",
            segment.segment_id,
            segment.start_offset,
            segment.end_offset,
        )
        try:
            self.repair(replace(segment, state=_S.COPY_SEGMENT_FINISHED, replaces_state=None), writer_epoch)
        except FencedWriterError as exc:  # taken over, or it overlaps what is served now: left as it is
            log.error("%s stays unserved: %s", segment.segment_id, exc)
            return LEFT
        return RESTORED
