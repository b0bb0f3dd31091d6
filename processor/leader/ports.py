"""What the leader needs from the worker's metadata follower, as small interfaces the leader defines.

The leader never imports the follower: the composition root (processor/wiring/) hands it objects
that satisfy these, and the follower does not know it is used this way.

- :class:`AppliedBatch`: what the follower reports after each applied batch (the current claim of
  the partitions it changed), for :meth:`Leadership.on_metadata`;
- :class:`CachedRemoteState`: a caught-up follower's view of a partition's remote state, so a newly
  assigned partition resumes without re-reading the metadata topic (:class:`ResumePlanner`);
- :data:`CurrentClaim`: the partition's current claim as the follower shows it (the copier and
  leadership check it); read-your-write is :class:`processor.metadata.sink.Confirm`;
- :data:`ClaimId`: the id of that claim, which segment manifests record.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import Protocol

from processor.kafka.partition import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState


class AppliedBatch(Protocol):
    """One batch of metadata records the follower applied."""

    @property
    def claims(self) -> Mapping[TopicPartition, int | None]:
        """The current claim epoch (None: released) of each partition the batch changed."""
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


# The epoch of a partition's current claim as the follower shows it (None: nobody holds one).
CurrentClaim = Callable[[TopicPartition], int | None]

# The id of the partition's claim with this epoch, if it is the current one (None: it is not, or
# unknown): what a segment manifest records as the claim the segment was written under.
ClaimId = Callable[[TopicPartition, int], uuid.UUID | None]
