"""The segment copier's read-your-write policy on the metadata topic, through the worker's follower."""

from __future__ import annotations

import logging

from processor.follower.materializer import Materializer
from processor.leader.ports import AcceptedByFollower
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import RemoteLogSegmentMetadata

log = logging.getLogger(__name__)


def accepted_by_follower(materializer: Materializer, metadata_partitions: int) -> AcceptedByFollower:
    """Wait (briefly) for the worker's follower to apply the record published at ``offset`` and tell
    whether it was accepted. Records the follower does not follow, or a follower that lags past the
    wait, count as accepted (the old behaviour)."""

    def accepted(record: RemoteLogSegmentMetadata, offset: int) -> bool:
        tp = record.topic_partition
        if materializer.source_topics is not None and tp.topic not in materializer.source_topics:
            return True
        if not materializer.wait_applied(metadata_partition_for(tp, metadata_partitions), offset):
            log.info("%s: follower did not confirm %s in time; going on", tp, record.segment_id)
            return True
        stored = materializer.cache.segment(record.segment_id.id)
        return stored is not None and (stored.state, stored.writer_epoch) == (
            record.state,
            record.writer_epoch,
        )

    return accepted
