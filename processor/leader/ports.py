"""What the leader needs from the worker's metadata follower, as small interfaces the leader defines.

The leader never imports the follower: the composition root (processor/wiring/) hands it objects
that satisfy these, and the follower does not know it is used this way.

- :class:`AppliedBatch`: what the follower reports after each applied batch (the newest writer epoch
  per source partition), for :meth:`Leadership.on_metadata`;
- :class:`CachedRemoteState`: a caught-up follower's view of a partition's remote state, so a newly
  assigned partition resumes without re-reading the metadata topic (:class:`ResumePlanner`);
- :data:`NewestEpoch` and :data:`AcceptedByFollower`: what the segment copier asks of the follower
  (the newest writer epoch seen of a partition; read-your-write on the metadata topic).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from processor.metadata.model import RemoteLogSegmentMetadata, TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState


class AppliedBatch(Protocol):
    """One batch of metadata records the follower applied."""

    @property
    def epochs(self) -> Mapping[TopicPartition, int]:
        """The newest writer epoch among the batch's segment records, per source partition."""
        ...


class CachedRemoteState(Protocol):
    """The worker's own follower as the resume planner uses it."""

    @property
    def source_topics(self) -> frozenset[str] | None:
        """The source topics it keeps (None: all)."""
        ...

    def wait_caught_up(self, partitions: list[int], timeout_s: float = 10.0) -> bool:
        """Wait until every record the metadata ``partitions`` hold now is applied; False if not
        within ``timeout_s`` (or the follower does not run or follow them all)."""
        ...

    def remote_state(self, tp: TopicPartition) -> PartitionRemoteState:
        """The partition's remote state, as the leader's fold of the metadata topic would build it."""
        ...


# The newest writer epoch the follower has seen for a partition (-1: none).
NewestEpoch = Callable[[TopicPartition], int]
# Read-your-write: did the follower apply (and accept) the record published at this offset?
AcceptedByFollower = Callable[[RemoteLogSegmentMetadata, int], bool]
