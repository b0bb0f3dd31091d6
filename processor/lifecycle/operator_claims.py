"""Operator claims: how a deleting or rewriting command (delete-before, delete-topic, merge, erase)
takes a partition from the worker leading it and hands it back.

An operator command writes to a partition like any owner does: under a claim (``ADMIN``) it appends
to the partition's metadata partition and reads back (processor/metadata/fold_claim_rules.py), every
record carrying that claim's epoch and confirmed through the command's follower. Workers that led
the partition stop writing it the moment their followers see the claim; the release (a ``RELEASE``
claim naming the epoch) lets the worker Faust assigns the partition to claim it again at once.
"""

from __future__ import annotations

import time
import uuid
from typing import Protocol

from processor.errors import FencedWriterError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import ClaimKind, MetadataRecord, PartitionClaim

# How long a claim waits to be seen accepted by the command's own follower.
CLAIM_CONFIRM_TIMEOUT_S = 60.0


class Publisher(Protocol):
    def publish(self, record: MetadataRecord) -> int: ...


class ClaimReader(Protocol):
    """What the command's follower answers about the claims it folded."""

    def outcome(self, partition: int, offset: int, timeout_s: float) -> bool | None: ...

    def current_epoch(self, tp: TopicPartition) -> int | None: ...


class OperatorClaims:
    """The operator claims one command holds; every one still held is released by ``release_all``."""

    def __init__(
        self, publisher: Publisher, follower: ClaimReader, metadata_partitions: int, writer_id: str
    ) -> None:
        self.publisher, self.follower = publisher, follower
        self.metadata_partitions, self.writer_id = metadata_partitions, writer_id
        self.held: dict[TopicPartition, int] = {}

    def claim(self, tp: TopicPartition) -> int:
        """Take ``tp`` (an ADMIN claim) and return the epoch to write with. Raises FencedWriterError
        if another claim came right after it."""
        record = PartitionClaim(tp, uuid.uuid4(), ClaimKind.ADMIN, self.writer_id, int(time.time() * 1000))
        offset = self.publisher.publish(record)
        part = metadata_partition_for(tp, self.metadata_partitions)
        accepted = self.follower.outcome(part, offset, CLAIM_CONFIRM_TIMEOUT_S)
        if accepted is not True or self.follower.current_epoch(tp) != offset:
            raise FencedWriterError(f"{tp}: another claim came right after this command's; try again")
        self.held[tp] = offset
        return offset

    def release(self, tp: TopicPartition) -> None:
        """Hand ``tp`` back: the worker Faust assigns it to claims it again at once."""
        epoch = self.held.pop(tp, None)
        if epoch is None:
            return
        record = PartitionClaim(
            tp, uuid.uuid4(), ClaimKind.RELEASE, self.writer_id, int(time.time() * 1000), released_epoch=epoch
        )
        self.publisher.publish(record)

    def release_all(self) -> None:
        for tp in list(self.held):
            self.release(tp)
