"""Carries out deletions in KIP-405's order; storage and Kafka sit behind the small protocols below.

For one partition: publish the new remote log start offset first (readers stop serving below it at
once), then for each segment, oldest first: DELETE_SEGMENT_STARTED (readers stop serving it), delete
its data and index objects (a missing object is success), DELETE_SEGMENT_FINISHED, and a tombstone so
the compacted metadata topic forgets the key.

Failures: a storage error leaves the segment in DELETE_SEGMENT_STARTED, is counted
(``processor_remote_delete_failures_total``) and is published to the deletion topic, from where the
next pass retries it; the pass goes on with the other segments. A metadata topic error is raised:
without its records the deletion cannot be made visible, and the next pass starts over.

Epochs: state changes carry this writer's id and an epoch no lower than any epoch already written
for the partition, so a fold that fences stale epochs accepts them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from processor import metrics
from processor.errors import StorageError
from processor.lifecycle.retention_policy import DeleteReason, RetentionPlan
from processor.metadata.model import (
    MetadataRecord,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
    TopicPartition,
)
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)


class MetadataWriter(Protocol):
    def publish(self, record: MetadataRecord) -> int: ...


class Tombstones(Protocol):
    def tombstone(self, segment: RemoteLogSegmentMetadata) -> int: ...


class FailedDeletions(Protocol):
    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None: ...

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class DeletionOutcome:
    deleted: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    failed: list[tuple[RemoteLogSegmentMetadata, str]] = field(default_factory=list)
    log_start_offset: int | None = None

    def merge(self, other: DeletionOutcome) -> None:
        self.deleted += other.deleted
        self.failed += other.failed
        if other.log_start_offset is not None:
            self.log_start_offset = other.log_start_offset


class SegmentDeleter:
    def __init__(
        self,
        storage: ChunkStorage,
        metadata: MetadataWriter,
        tombstones: Tombstones,
        failed: FailedDeletions,
        writer_id: str,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.storage = storage
        self.metadata = metadata
        self.tombstones = tombstones
        self.failed = failed
        self.writer_id = writer_id
        self.clock_ms = clock_ms

    def move_log_start_offset(self, tp: TopicPartition, offset: int, writer_epoch: int) -> None:
        self.metadata.publish(RemoteLogStartOffset(tp, offset, self.clock_ms(), self.writer_id, writer_epoch))

    def execute(self, tp: TopicPartition, plan: RetentionPlan, writer_epoch: int) -> DeletionOutcome:
        """Carry out one partition's plan in order; see the module docstring."""
        out = DeletionOutcome()
        everything = [*plan.requeue, *plan.dangling, *(s for s, _ in plan.expired)]
        epoch = max([writer_epoch, *(s.writer_epoch for s in everything)])
        if plan.new_log_start_offset is not None:
            self.move_log_start_offset(tp, plan.new_log_start_offset, epoch)
            out.log_start_offset = plan.new_log_start_offset
        work: list[tuple[RemoteLogSegmentMetadata, DeleteReason]] = [
            *((s, DeleteReason.RETRY) for s in plan.requeue),
            *((s, DeleteReason.DANGLING) for s in plan.dangling),
            *plan.expired,
        ]
        for segment, reason in work:
            error = self.delete_segment(segment, reason, epoch)
            if error is None:
                out.deleted.append(segment)
            else:
                out.failed.append((segment, error))
        return out

    def delete_segment(
        self, segment: RemoteLogSegmentMetadata, reason: DeleteReason, writer_epoch: int
    ) -> str | None:
        """Delete one segment; returns None when done, or the storage error (recorded for retry)."""
        epoch = max(writer_epoch, segment.writer_epoch)
        deleting = replace(
            segment,
            state=SegmentState.DELETE_SEGMENT_STARTED,
            event_timestamp_ms=self.clock_ms(),
            writer_id=self.writer_id,
            writer_epoch=epoch,
        )
        if segment.state is not SegmentState.DELETE_SEGMENT_STARTED:
            self.metadata.publish(deleting)
        error = self.delete_objects(deleting)
        if error is not None:
            return error
        self.metadata.publish(deleting.with_state(SegmentState.DELETE_SEGMENT_FINISHED, self.clock_ms()))
        self.tombstones.tombstone(deleting)
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
        return None

    def delete_objects(self, segment: RemoteLogSegmentMetadata) -> str | None:
        """Delete the segment's objects; on a storage error count it, record the segment on the
        deletion topic and return the error."""
        try:
            self.storage.delete(segment.data_object_key)
            self.storage.delete(segment.index_object_key)
        except StorageError as exc:
            metrics.DELETE_FAILURES.inc()
            log.warning("could not delete the objects of %s (%s); queued for retry", segment.segment_id, exc)
            self.failed.record_failed(segment)
            return str(exc)
        return None

    def retry_failed(self, pending: Iterable[RemoteLogSegmentMetadata], writer_epoch: int) -> DeletionOutcome:
        """Retry entries of the deletion topic: delete the objects, finish the segment's metadata,
        resolve the entry. Entries that fail again stay (they are not published a second time)."""
        out = DeletionOutcome()
        for segment in pending:
            try:
                self.storage.delete(segment.data_object_key)
                self.storage.delete(segment.index_object_key)
            except StorageError as exc:
                metrics.DELETE_FAILURES.inc()
                out.failed.append((segment, str(exc)))
                continue
            finished = replace(
                segment,
                state=SegmentState.DELETE_SEGMENT_FINISHED,
                event_timestamp_ms=self.clock_ms(),
                writer_id=self.writer_id,
                writer_epoch=max(writer_epoch, segment.writer_epoch),
            )
            self.metadata.publish(finished)
            self.tombstones.tombstone(finished)
            self.failed.resolve(segment)
            metrics.SEGMENTS_DELETED.labels(DeleteReason.RETRY.value).inc()
            out.deleted.append(segment)
        return out
