"""Retries of the deletion topic's entries (processor/lifecycle/deletion_topic.py): a deletion whose
objects could not all be deleted waits there, and the partition's owner finishes it at a later pass
under its own claim, only where the metadata fold still shows the segment being deleted."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace

from processor import metrics
from processor.errors import FencedWriterError, InvalidNameError, StorageError
from processor.lifecycle.ports import FINISH, UNPROVEN, DeletionOutcome
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
    for entry in pending:
        state = known(entry)
        if state is not None and state.state is _S.DELETE_SEGMENT_STARTED:
            proof = deleter.prove_deletion(state, writer_epoch, log_start_offset, servable)
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
        try:
            state = deleter.state_deletion_again(state, writer_epoch)
        except FencedWriterError as exc:  # left for the next pass, judged on the state it shows then
            log.warning("deletion topic entry for %s not retried: %s", entry.segment_id, exc)
            continue
        try:
            keys = deleter.owned_objects(state)
            for key in keys.in_delete_order():
                deleter.storage.delete(key)
        except (StorageError, InvalidNameError) as exc:
            metrics.DELETE_FAILURES.inc()
            out.failed.append((state, str(exc)))
            continue
        finished = replace(
            state,
            state=_S.DELETE_SEGMENT_FINISHED,
            event_timestamp_ms=deleter.clock_ms(),
            writer_id=deleter.writer_id,
            writer_epoch=writer_epoch,
        )
        deleter.metadata.publish(finished)
        deleter.finished[state.segment_id.id] = finished.event_timestamp_ms
        deleter.failed.resolve(state)
        metrics.SEGMENTS_DELETED.labels(DeleteReason.RETRY.value).inc()
        out.deleted.append(state)
    return out
