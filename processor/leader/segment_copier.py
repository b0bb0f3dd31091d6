"""Copies one sealed segment to remote storage, following KIP-405's copy path.

1. Publish COPY_SEGMENT_STARTED (a new segment UUID for every attempt).
2. Upload the data object, then the index object (conditional creates: never overwrite).
3. Publish COPY_SEGMENT_FINISHED.
On failure after step 1: delete what was uploaded and publish DELETE_SEGMENT_STARTED and
DELETE_SEGMENT_FINISHED for that attempt (best effort: whatever is left is a dangling
COPY_SEGMENT_STARTED that the next leader of the partition cleans up), then raise.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Protocol

from processor.errors import ProcessorError
from processor.logs import segment_fields
from processor.metadata.model import (
    MetadataRecord,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
    TopicPartition,
)
from processor.segment.block_format import BLOCK_FORMAT_VERSION, SealedSegment
from processor.segment.index_format import encode_index, index_crc
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)


class MetadataSink(Protocol):
    def publish(self, record: MetadataRecord) -> int: ...


class CopyCancelledError(ProcessorError):
    """The partition was revoked while its segment was being copied; FINISHED was not published."""


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
    ) -> None:
        self.storage = storage
        self.sink = sink
        self.keys = keys
        self.writer_id = writer_id
        self.clock_ms = clock_ms

    def build_metadata(
        self, tp: TopicPartition, segment: SealedSegment, writer_epoch: int
    ) -> tuple[RemoteLogSegmentMetadata, bytes]:
        segment_id = RemoteLogSegmentId(tp.topic, tp.partition, uuid.uuid4())
        keys = self.keys.segment(tp.topic, tp.partition, segment.start_offset, segment_id.id, writer_epoch)
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
            segment_format_version=BLOCK_FORMAT_VERSION,
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
        started, index = self.build_metadata(tp, segment, writer_epoch)
        self.sink.publish(started)
        try:
            self.storage.create(started.data_object_key, segment.blocks)
            self.storage.create(started.index_object_key, [index])
            if not still_leader():
                raise CopyCancelledError(f"{tp} was revoked during the copy of {started.segment_id}")
            finished = started.with_state(SegmentState.COPY_SEGMENT_FINISHED, self.clock_ms())
            self.sink.publish(finished)
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
