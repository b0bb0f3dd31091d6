"""The RemoteLogMetadataManager API (KIP-405) over the follower's cache.

Reads come from the local cache, which the materializer keeps up to date; writes go to the metadata
topic (the single source of truth) through the leader's and the lifecycle's publishers, not here.
Lookups by offset or time return only COPY_SEGMENT_FINISHED segments; listings return every segment
not yet DELETE_SEGMENT_FINISHED.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

from processor.follower.metadata_cache import MetadataCache
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentMetadata


class RemoteLogMetadataManager:
    def __init__(self, cache: MetadataCache) -> None:
        self.cache = cache

    def remote_log_segment_metadata(self, tp: TopicPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        """The finished segment of ``tp`` that contains ``offset``."""
        return self.cache.finished_segment_for_offset(tp, offset)

    def segment_metadata(self, segment_id: uuid.UUID) -> RemoteLogSegmentMetadata | None:
        return self.cache.segment(segment_id)

    def earliest_log_offset(self, tp: TopicPartition) -> int | None:
        r = self.cache.offset_range(tp)
        return None if r is None else r[0]

    def log_start_offset(self, tp: TopicPartition) -> int:
        """The remote log start offset: reads below it answer "not in remote storage"."""
        return self.cache.log_start_offset(tp)

    def highest_log_offset(self, tp: TopicPartition) -> int | None:
        r = self.cache.offset_range(tp)
        return None if r is None else r[1]

    def list_remote_log_segments(
        self, tp: TopicPartition, min_offset: int = 0
    ) -> Iterator[RemoteLogSegmentMetadata]:
        """Segments of ``tp`` (any state but DELETE_SEGMENT_FINISHED) ending at or after ``min_offset``,
        by start offset."""
        return self.cache.listed_segments(tp, min_offset)

    def remote_log_segment_for_timestamp(
        self, tp: TopicPartition, timestamp: int
    ) -> RemoteLogSegmentMetadata | None:
        return self.cache.segment_for_timestamp(tp, timestamp)

    # what the remote reader needs
    def finished_segment_for_offset(self, tp: TopicPartition, offset: int) -> RemoteLogSegmentMetadata | None:
        return self.cache.finished_segment_for_offset(tp, offset)

    def finished_segments(self, tp: TopicPartition, from_offset: int) -> Iterator[RemoteLogSegmentMetadata]:
        return self.cache.finished_segments(tp, from_offset)

    def segment_for_timestamp(self, tp: TopicPartition, timestamp: int) -> RemoteLogSegmentMetadata | None:
        return self.cache.segment_for_timestamp(tp, timestamp)
