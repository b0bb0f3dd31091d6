"""Erases records by key from one partition's archived segments, under the claim its caller holds
(``processor erase`` takes an ``ADMIN`` claim). First the sources an earlier rewrite superseded and
left are deleted (a run killed after a FINISHED: what makes the command resumable). Then, per served
segment, in offset order:

1. its key filter is asked (``may_hold``): a segment whose filter says none of the keys is in it is
   left alone without a read; a segment without a filter (written before filters, or without an
   erasure secret), or whose filter cannot answer, is read;
2. it is read back and rewritten without the records of the keys (:mod:`processor.rewrite.erased_segment`);
   one that holds none of them is left as it is;
3. the rewrite is copied like any segment, COPY_SEGMENT_FINISHED naming the source in
   ``supersedes`` (readers switch from the source to the rewrite in one step: never both, never
   neither), then the source is deleted once the view read after that FINISHED shows it superseded
   and the rewrite's index, read back and verified, covers its offsets (as anyone deletes it).

Killed anywhere, the rules of a merge hold (processor/rewrite/merge_runner.py): before 3's FINISHED
the source is served and the attempt is a dangling copy; after it the rewrite is served and the
source is garbage the next run (or the owner's next pass) deletes. A second run finds nothing to
rewrite: the rewrites hold no record of the keys (their filters say so, or a read does).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from processor.errors import ProcessorError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.rewrite.erased_segment import Erasure
from processor.rewrite.ports import Copier, DeleteSuperseded, delete_leftovers

log = logging.getLogger(__name__)


@dataclass
class EraseReport:
    tp: TopicPartition
    segments: int = 0  # served segments looked at
    skipped_by_filter: int = 0  # of those, left alone on their key filter's word, unread
    scanned: int = 0  # read back (a filter's "maybe", or no filter)
    scanned_bytes: int = 0
    rewritten: int = 0  # replaced by a rewrite without the keys' records (or would be, dry run)
    records_removed: int = 0
    leftovers_deleted: int = 0  # sources an earlier run's rewrites superseded, deleted now
    failed: list[str] = field(default_factory=list)


def erase_partition(
    tp: TopicPartition,
    state: Callable[[], PartitionRemoteState],
    epoch: int | None,
    may_hold: Callable[[RemoteLogSegmentMetadata], bool],
    build: Callable[[RemoteLogSegmentMetadata], Erasure],
    copier: Copier | None,
    delete: DeleteSuperseded | None,
) -> EraseReport:
    """Erase from ``tp`` under claim ``epoch``. Dry run: ``epoch``, ``copier`` and ``delete`` None
    (segments are read and counted, nothing is written). Raises FencedWriterError when the claim is
    lost; a segment that does not read back is reported in ``failed`` and left as it is."""
    part = state()
    report = EraseReport(tp)
    if epoch is not None and delete is not None:
        report.leftovers_deleted, errors = delete_leftovers(tp, part, epoch, delete)
        report.failed += errors
        part = state()
    waiting = part.named_by_deleting_rewrites()  # a rewrite being deleted may take them over again
    for source in part.finished():
        report.segments += 1
        if source.segment_id.id in waiting:
            report.failed.append(f"{source.segment_id}: named by a rewrite being deleted; run again later")
            continue
        if not may_hold(source):
            report.skipped_by_filter += 1
            continue
        report.scanned += 1
        report.scanned_bytes += source.segment_size_in_bytes
        try:
            erasure = build(source)
        except ProcessorError as exc:  # a source that does not read back: left as it is, reported
            log.error("%s: not erasing from %s: %s", tp, source.segment_id, exc)
            report.failed.append(f"{source.segment_id} ({source.start_offset}..{source.end_offset}): {exc}")
            continue
        if erasure.sealed is None:
            continue
        report.rewritten += 1
        report.records_removed += erasure.removed
        if epoch is None or copier is None or delete is None:
            continue
        rewrite = copier.copy(tp, erasure.sealed, epoch, supersedes=(source.segment_id.id,))
        log.info(
            "%s: erased %d of %d records of %s (%d..%d) into %s",
            tp,
            erasure.removed,
            erasure.records,
            source.segment_id,
            source.start_offset,
            source.end_offset,
            rewrite.segment_id,
        )
        # by the proof anyone deletes it by: the view after the FINISHED, the rewrite read back
        report.failed += delete(tp, [source], epoch, state())
    return report
