"""Retries of the deletion topic's entries (processor/lifecycle/deletion_topic.py): a deletion whose
objects could not all be deleted waits there, and the partition's owner finishes it at a later pass
under its own claim, only where the metadata fold still shows the segment being deleted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from processor import metrics
from processor.lifecycle.ports import FINISH, UNPROVEN, DeletionOutcome, PartitionChecks, publish_all
from processor.lifecycle.retention_policy import DeleteReason
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.deletion_proof import REFUSED_ACKNOWLEDGED
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState

log = logging.getLogger(__name__)

_S = SegmentState


def retry_failed(
    deleter: SegmentDeleter,
    pending: Iterable[RemoteLogSegmentMetadata],
    writer_epoch: int,
    known: Callable[[RemoteLogSegmentMetadata], RemoteLogSegmentMetadata | None],
    log_start_offset: int = 0,
    servable: Callable[[RemoteLogSegmentMetadata], bool] | None = None,
) -> DeletionOutcome:
    """Retry entries of the deletion topic. An entry is input like any other: it is acted on only
    if the metadata fold (``known``: the segment's accepted state) says the segment is being
    deleted; an entry for a segment the fold no longer knows is resolved (already gone), one
    for a segment the fold does not show as being deleted is resolved and never deleted."""
    out = DeletionOutcome()
    todo: list[RemoteLogSegmentMetadata] = []
    for entry in pending:
        state = known(entry)
        if state is not None and state.state is _S.DELETE_SEGMENT_STARTED:
            proof = deleter.prove_deletion(state, writer_epoch, log_start_offset, PartitionChecks(servable))
            if proof == UNPROVEN:
                continue  # the entry stays for the next pass
            if proof != FINISH:
                if proof == REFUSED_ACKNOWLEDGED:
                    out.refused.append((state, proof))
                deleter.failed.resolve(entry)
                continue
        if state is None or state.state is not _S.DELETE_SEGMENT_STARTED:
            if state is not None:
                log.warning(
                    "deletion topic entry for %s ignored: the metadata shows it %s, not being deleted",
                    entry.segment_id,
                    state.state.value,
                )
            deleter.failed.resolve(entry)
            continue
        if all(t.segment_id.id != state.segment_id.id for t in todo):  # an entry found twice: once
            todo.append(state)
    # the rest as a retention pass deletes (processor/lifecycle/segment_deleter.py): every deletion
    # stated again together and confirmed, then the objects of the confirmed ones, then their FINISHED
    again, refused = deleter.state_deletions_again(todo, writer_epoch)
    for segment, exc in refused:  # left for the next pass, judged on the state it shows then
        log.warning("deletion topic entry for %s not retried: %s", segment.segment_id, exc)
    errors = deleter.delete_objects_of(again, record=False)  # their entries stay on the topic
    finished = []
    for state in again:
        error = errors.get(state.segment_id.id)
        if error is not None:
            out.failed.append((state, error))
            continue
        finished.append(
            replace(
                state,
                state=_S.DELETE_SEGMENT_FINISHED,
                event_timestamp_ms=deleter.clock_ms(),
                writer_id=deleter.writer_id,
                writer_epoch=writer_epoch,
            )
        )
    publish_all(deleter.metadata, finished)
    for done in finished:
        deleter.finished[done.segment_id.id] = done.event_timestamp_ms
        deleter.failed.resolve(done)
        metrics.SEGMENTS_DELETED.labels(DeleteReason.RETRY.value).inc()
        out.deleted.append(done)
    return out
