"""Read-your-write on the metadata topic through the worker's own follower (the copier, the deleter
and the claims confirm their records this way), and the retention pass's wait for that follower to
reach the topic's end before it plans."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from processor.follower.materializer import Materializer
from processor.kafka.partition import TopicPartition
from processor.lifecycle.retention_service import CaughtUp
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import MetadataRecord
from processor.metadata.sink import Confirm

log = logging.getLogger(__name__)

# How long a writer waits for its follower to apply its own record before it gives the partition
# up. Long: the follower normally applies a record within milliseconds, and giving up costs a
# re-claim; but never "go on as if accepted".
CONFIRM_TIMEOUT_S = 60.0


def confirm_by_follower(
    materializer: Materializer, metadata_partitions: int, timeout_s: float = CONFIRM_TIMEOUT_S
) -> Confirm:
    """True when the follower applied the record published at ``offset`` and the fold accepted it,
    False when the fold rejected it, None when that is not known in time (the follower lags, stopped,
    or does not follow the partition): the writer then stops (it never fails open)."""

    def confirm(record: MetadataRecord, offset: int) -> bool | None:
        tp = record.topic_partition
        outcome = materializer.outcome(metadata_partition_for(tp, metadata_partitions), offset, timeout_s)
        if outcome is None:
            log.warning("%s: the follower did not confirm the record at %d in %.0f s", tp, offset, timeout_s)
        return outcome

    return confirm


def caught_up_by_follower(
    materializer: Materializer, metadata_partitions: int, timeout_s: float = CONFIRM_TIMEOUT_S
) -> CaughtUp:
    """True once the follower holds every record the metadata partitions of ``tps`` had when this
    was called; False when it does not within ``timeout_s`` (the pass then deletes nothing)."""

    def caught_up(tps: Iterable[TopicPartition]) -> bool:
        parts = sorted({metadata_partition_for(tp, metadata_partitions) for tp in tps})
        return materializer.wait_caught_up(parts, timeout_s)

    return caught_up
