"""What a rewrite (a merge, an erasure) needs of the rest of the worker, and the one step both take
first: deleting the sources an earlier rewrite superseded and left (a run killed after its FINISHED)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from typing import Protocol

from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.sealed_segment import SealedSegment


class Copier(Protocol):
    def copy(
        self,
        tp: TopicPartition,
        segment: SealedSegment,
        writer_epoch: int,
        still_leader: Callable[[], bool] = ...,
        supersedes: tuple[uuid.UUID, ...] = (),
    ) -> RemoteLogSegmentMetadata: ...


# deletes superseded segments under the claim (epoch); the view they were found in (their rewrites'
# objects are checked first), or None for the caller's own rewrite; returns what it could not delete
DeleteSuperseded = Callable[
    [TopicPartition, Sequence[RemoteLogSegmentMetadata], int, PartitionRemoteState | None], list[str]
]


def delete_leftovers(
    tp: TopicPartition, part: PartitionRemoteState, epoch: int, delete: DeleteSuperseded
) -> tuple[int, list[str]]:
    """(sources deleted, problems) of the sources earlier rewrites superseded that are still there."""
    leftovers = part.rewritten()
    if not leftovers:
        return 0, []
    errors = delete(tp, leftovers, epoch, part)
    return len(leftovers) - len(errors), errors
