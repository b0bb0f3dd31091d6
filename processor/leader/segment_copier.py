"""Copies one sealed segment to remote storage, following KIP-405's copy path.

1. Publish COPY_SEGMENT_STARTED (a new segment UUID for every attempt).
2. Upload the data object, then the index object (conditional creates: never overwrite).
3. Publish COPY_SEGMENT_FINISHED.
Before 1 and 3 the copier checks the epoch fence: if a newer writer epoch than its own has written to
the partition (seen by the worker's follower), it publishes nothing (FencedWriterError). After
publishing STARTED and FINISHED it checks, through its own follower, that readers accepted the
record: a zombie learns it was fenced before uploading, or deletes what it uploaded.
On failure after step 1: delete what was uploaded and publish DELETE_SEGMENT_STARTED and
DELETE_SEGMENT_FINISHED for that attempt (best effort: whatever is left is a dangling
COPY_SEGMENT_STARTED that the next leader of the partition cleans up), then raise.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Mapping

from processor.errors import ProcessorError
from processor.leader.ports import AcceptedByFollower, NewestEpoch
from processor.logs import segment_fields
from processor.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
    TopicPartition,
)
from processor.metadata.sink import MetadataSink
from processor.segment.index_format import encode_index, index_crc
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.sealed_segment import SealedSegment
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)


class CopyCancelledError(ProcessorError):
    """The partition was revoked while its segment was being copied; FINISHED was not published."""


class FencedWriterError(ProcessorError):
    """A newer writer epoch than this copy's has written to the partition: this worker is a zombie
    and must not publish. The revocation that follows (the worker's follower sees the newer epoch)
    ends the retries; until then a retry is fenced again before it publishes anything."""

    retriable = True


def _now_ms() -> int:
    return int(time.time() * 1000)


class SegmentCopier:
    def __init__(
        self,
        storage: ChunkStorage,
        sink: MetadataSink,
        keys: ObjectKeyFactory,
        writer_id: str,
        clock_ms: Callable[[], int] = _now_ms,
        topic_ids: Mapping[str, str] | None = None,
        newest_epoch: NewestEpoch | None = None,
        accepted: AcceptedByFollower | None = None,
    ) -> None:
        self.storage = storage
        self.sink = sink
        self.keys = keys
        self.writer_id = writer_id
        self.clock_ms = clock_ms
        # the broker's current topic ids (kept fresh by the worker on every assignment)
        self.topic_ids: Mapping[str, str] = topic_ids if topic_ids is not None else {}
        # the newest writer epoch seen on the metadata topic per partition (the follower cache)
        self.newest_epoch = newest_epoch
        # read-your-write: did the metadata topic's readers accept the record published at this
        # offset (the worker's own follower applies the same fencing as every other reader)?
        self.accepted = accepted

    def _publish_accepted(self, record: RemoteLogSegmentMetadata) -> None:
        offset = self.sink.publish(record)
        if self.accepted is not None and not self.accepted(record, offset):
            raise FencedWriterError(
                f"{record.state.value} of {record.segment_id} (writer epoch {record.writer_epoch}) was "
                "fenced out on the metadata topic: a newer epoch leads the partition"
            )

    def check_fence(self, tp: TopicPartition, writer_epoch: int) -> None:
        """Raise FencedWriterError if a newer epoch than ``writer_epoch`` wrote to ``tp``."""
        if self.newest_epoch is None:
            return
        newest = self.newest_epoch(tp)
        if newest > writer_epoch:
            raise FencedWriterError(
                f"{tp}: writer epoch {newest} has written; this worker's epoch {writer_epoch} is stale"
            )

    def build_metadata(
        self, tp: TopicPartition, segment: SealedSegment, writer_epoch: int
    ) -> tuple[RemoteLogSegmentMetadata, bytes]:
        topic_id = self.topic_ids.get(tp.topic)
        segment_id = RemoteLogSegmentId(tp.topic, tp.partition, uuid.uuid4(), topic_id)
        keys = self.keys.segment(
            tp.topic, tp.partition, segment.start_offset, segment_id.id, writer_epoch, topic_id
        )
        index = encode_index(
            topic=tp.topic,
            partition=tp.partition,
            segment_id=segment_id.id,
            start_offset=segment.start_offset,
            end_offset=segment.end_offset,
            record_count=segment.record_count,
            max_timestamp=segment.max_timestamp,
            data_object_length=segment.size_bytes,
            blocks=segment.block_infos,
        )
        metadata = RemoteLogSegmentMetadata(
            segment_id=segment_id,
            start_offset=segment.start_offset,
            end_offset=segment.end_offset,
            max_timestamp_ms=segment.max_timestamp,
            event_timestamp_ms=self.clock_ms(),
            writer_id=self.writer_id,
            writer_epoch=writer_epoch,
            segment_leader_epochs=tuple(segment.leader_epochs),
            segment_size_in_bytes=segment.size_bytes,
            state=SegmentState.COPY_SEGMENT_STARTED,
            data_object_key=keys.data,
            index_object_key=keys.index,
            segment_format_version=segment.format_version,
            record_count=segment.record_count,
            index_crc32=index_crc(index),
            index_size_in_bytes=len(index),
        )
        return metadata, index

    def copy(
        self,
        tp: TopicPartition,
        segment: SealedSegment,
        writer_epoch: int,
        still_leader: Callable[[], bool] = lambda: True,
    ) -> RemoteLogSegmentMetadata:
        """One copy attempt. Returns the FINISHED metadata or raises (after cleaning up)."""
        self.check_fence(tp, writer_epoch)
        started, index = self.build_metadata(tp, segment, writer_epoch)
        # A STARTED the readers rejected means a newer leader: upload nothing (no orphan objects).
        self._publish_accepted(started)
        try:
            self.storage.create(started.data_object_key, segment.blocks)
            if not still_leader():  # revoked during the data upload: do not go on
                raise CopyCancelledError(f"{tp} was revoked during the copy of {started.segment_id}")
            self.storage.create(started.index_object_key, [index])
            if not still_leader():
                raise CopyCancelledError(f"{tp} was revoked during the copy of {started.segment_id}")
            self.check_fence(tp, writer_epoch)
            finished = started.with_state(SegmentState.COPY_SEGMENT_FINISHED, self.clock_ms())
            # A rejected FINISHED: the objects are nobody's; the cleanup below deletes them.
            self._publish_accepted(finished)
            log.info("segment copied", extra=segment_fields(finished))
            return finished
        except BaseException:
            self.delete_segment(started)
            raise

    def delete_segment(self, metadata: RemoteLogSegmentMetadata) -> bool:
        """Delete a segment's objects and record it (DELETE_SEGMENT_STARTED, then _FINISHED).

        Used for failed attempts and for dangling copies found on assignment. Best effort: returns
        False if something failed; the segment then stays for the next cleanup.
        """
        try:
            deleting = metadata.with_state(SegmentState.DELETE_SEGMENT_STARTED, self.clock_ms())
            if metadata.state != SegmentState.DELETE_SEGMENT_STARTED:
                self.sink.publish(deleting)
            self.storage.delete(metadata.data_object_key)
            self.storage.delete(metadata.index_object_key)
            deleted = deleting.with_state(SegmentState.DELETE_SEGMENT_FINISHED, self.clock_ms())
            self.sink.publish(deleted)
            log.info("segment deleted", extra=segment_fields(deleted))
            return True
        except ProcessorError as exc:
            log.warning(
                "could not clean up segment %s (%s); it is retried on the next assignment",
                metadata.segment_id,
                exc,
            )
            return False
