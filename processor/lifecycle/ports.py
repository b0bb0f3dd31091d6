"""What the deleter (processor/lifecycle/segment_deleter.py) talks to, and what it answers: the
metadata and deletion topics behind small protocols, a pass's outcome, a deletion's proof verdicts."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass, field
from typing import Protocol

from processor.metadata.model import MetadataRecord, RemoteLogSegmentMetadata


class MetadataWriter(Protocol):
    def publish(self, record: MetadataRecord) -> int: ...


def publish_all(writer: MetadataWriter, records: Sequence[MetadataRecord]) -> list[int]:
    """Publish ``records`` in order; their offsets. A writer with ``publish_many`` (the metadata
    topic's publisher: one wait for all the acknowledgements) sends them together, any other one
    by one."""
    many: Callable[[Sequence[MetadataRecord]], list[int]] | None = getattr(writer, "publish_many", None)
    if many is not None:
        return many(records)
    return [writer.publish(r) for r in records]


class Tombstones(Protocol):
    def tombstone(self, segment: RemoteLogSegmentMetadata) -> int: ...


class FailedDeletions(Protocol):
    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None: ...

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None: ...


@dataclass(frozen=True)
class PartitionChecks:
    """What the deleter asks of the partition's view when it finds a deletion it did not start
    (:meth:`~processor.lifecycle.segment_deleter.SegmentDeleter.prove_deletion`); each left out
    proves nothing. ``servable``: whether a segment belongs to the history the partition serves;
    ``rewritten``: the segments a served rewrite was read and shown to hold; ``corrupt``: why a
    rewrite's index does not verify, and whether every segment it names is FINISHED (None: it
    verifies); ``restorable``: whether a segment stated FINISHED again would be served (after
    those given, stated again in the same pass);
    ``served_over``: the served segments over a segment's offsets that do not name it (stated again
    after a deletion found started is stated again: see ``SegmentDeleter.execute``); ``given_back``:
    the segments a served rewrite's deletion gives back that a reader may hold without their claim
    (stated again after the deletion); ``held_by``: the finished segments a served rewrite holds
    (stated again before it is)."""

    servable: Callable[[RemoteLogSegmentMetadata], bool] | None = None
    rewritten: Set[uuid.UUID] = frozenset()
    corrupt: Callable[[RemoteLogSegmentMetadata], tuple[str, bool] | None] | None = None
    restorable: Callable[[RemoteLogSegmentMetadata, Sequence[RemoteLogSegmentMetadata]], bool] | None = None
    served_over: Callable[[RemoteLogSegmentMetadata], list[RemoteLogSegmentMetadata]] | None = None
    given_back: Callable[[RemoteLogSegmentMetadata], list[RemoteLogSegmentMetadata]] | None = None
    held_by: Callable[[RemoteLogSegmentMetadata], list[RemoteLogSegmentMetadata]] | None = None


NO_CHECKS = PartitionChecks()

FINISH = "finish"  # prove_deletion: the deletion may be finished
RESTORED = "restored"  # prove_deletion: not proven; the segment is served again
LEFT = "left"  # prove_deletion: not proven, of a history the partition does not serve: left alone
UNPROVEN = "unproven"  # prove_deletion: the proof could not be read (a storage error): the next pass


@dataclass
class DeletionOutcome:
    deleted: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    failed: list[tuple[RemoteLogSegmentMetadata, str]] = field(default_factory=list)
    refused: list[tuple[RemoteLogSegmentMetadata, str]] = field(default_factory=list)  # no proof
    # served segments whose deletion started with their objects kept (an unreadable rewrite that
    # may hold the only copy of its records, over unserved segments that hold its offsets)
    unserved: list[RemoteLogSegmentMetadata] = field(default_factory=list)
    log_start_offset: int | None = None
    rewrites_unchecked: bool = False  # a served rewrite's objects could not be checked (asked again)

    def merge(self, other: DeletionOutcome) -> None:
        self.deleted += other.deleted
        self.failed += other.failed
        self.refused += other.refused
        self.unserved += other.unserved
        self.rewrites_unchecked = self.rewrites_unchecked or other.rewrites_unchecked
        if other.log_start_offset is not None:
            self.log_start_offset = other.log_start_offset
