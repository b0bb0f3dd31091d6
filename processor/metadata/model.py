"""RemoteLogSegmentMetadata and friends (KIP-405), as immutable values. Pure."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache

from processor.kafka.partition import TopicPartition


class SegmentState(StrEnum):
    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"


DELETE_STATES = frozenset({SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED})
_COPY_STATES = frozenset({SegmentState.COPY_SEGMENT_STARTED, SegmentState.COPY_SEGMENT_FINISHED})


class ClaimKind(StrEnum):
    """What a claim record says (record type 4, see :class:`PartitionClaim`)."""

    LEAD = "LEAD"  # a worker leads the partition (Faust assigned it)
    ADMIN = "ADMIN"  # an operator command (delete-topic, delete-before) takes it for a while
    RELEASE = "RELEASE"  # the holder of ``released_epoch`` gives the partition up


class PartitionDeleteState(StrEnum):
    DELETE_PARTITION_MARKED = "DELETE_PARTITION_MARKED"
    DELETE_PARTITION_STARTED = "DELETE_PARTITION_STARTED"
    DELETE_PARTITION_FINISHED = "DELETE_PARTITION_FINISHED"


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentId:
    topic: str
    partition: int
    id: uuid.UUID
    topic_id: str | None = None
    # The id's partition, kept (not compared, not shown): every record of a segment asks for it
    # several times on the fold's path, and a property costs a Python call each time.
    topic_partition: TopicPartition = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "topic_partition", shared_topic_partition(self.topic, self.partition))

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}/{self.id}"


@lru_cache(maxsize=65_536)
def shared_topic_partition(topic: str, partition: int) -> TopicPartition:
    """One shared TopicPartition per partition: every record of a segment asks for it, several times."""
    return TopicPartition(topic, partition)


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    event_timestamp_ms: int
    writer_id: str
    writer_epoch: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    segment_size_in_bytes: int
    state: SegmentState
    data_object_key: str
    index_object_key: str
    segment_format_version: int
    record_count: int
    index_crc32: int
    index_size_in_bytes: int
    custom_metadata: bytes | None = None
    txn_index_empty: bool = True
    # DELETE_SEGMENT_STARTED only: the state the deletion was planned on; readers accept the record
    # only while the segment is still in it (a conditional delete, processor/metadata/fold_rules.py)
    replaces_state: SegmentState | None = None
    # COPY_SEGMENT_STARTED / COPY_SEGMENT_FINISHED of a rewritten segment only (a merge, an erase):
    # the served segments whose offsets it takes over once its FINISHED is accepted
    # (processor/metadata/fold_rules.py); empty for a plain copy
    supersedes: tuple[uuid.UUID, ...] = ()

    def __post_init__(self) -> None:
        if self.start_offset < 0 or self.end_offset < self.start_offset:
            raise ValueError(f"invalid offsets {self.start_offset}..{self.end_offset} for {self.segment_id}")
        if not self.segment_leader_epochs:
            raise ValueError(f"segment {self.segment_id} has no leader epochs")

    @property
    def topic_partition(self) -> TopicPartition:
        return self.segment_id.topic_partition

    def with_state(self, state: SegmentState, event_timestamp_ms: int) -> RemoteLogSegmentMetadata:
        return replace(self, state=state, event_timestamp_ms=event_timestamp_ms, replaces_state=None)

    def deleting(
        self, event_timestamp_ms: int, writer_id: str, writer_epoch: int
    ) -> RemoteLogSegmentMetadata:
        """This segment's DELETE_SEGMENT_STARTED, conditional on the state it is in now."""
        return replace(
            self,
            state=SegmentState.DELETE_SEGMENT_STARTED,
            event_timestamp_ms=event_timestamp_ms,
            writer_id=writer_id,
            writer_epoch=writer_epoch,
            replaces_state=self.state if self.state in _COPY_STATES else None,
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    writer_id: str
    writer_epoch: int
    state: SegmentState
    custom_metadata: bytes | None = None

    @property
    def topic_partition(self) -> TopicPartition:
        return self.segment_id.topic_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_partition: TopicPartition
    state: PartitionDeleteState
    event_timestamp_ms: int
    writer_id: str
    topic_id: str | None = field(default=None)
    writer_epoch: int = -1  # the writer's claim epoch (-1: written before claims existed)


@dataclass(frozen=True, slots=True)
class RemoteLogStartOffset:
    """The earliest offset of a partition that remote storage still serves (KIP-405's
    ``earliestLogOffset``, Kafka's log start offset). Published before segments below it are
    deleted; reads below it answer "not in remote storage". Only ever moves forward."""

    topic_partition: TopicPartition
    start_offset: int
    event_timestamp_ms: int
    writer_id: str
    writer_epoch: int
    topic_id: str | None = field(default=None)

    def __post_init__(self) -> None:
        if self.start_offset < 0:
            raise ValueError(
                f"invalid remote log start offset {self.start_offset} for {self.topic_partition}"
            )


@dataclass(frozen=True, slots=True)
class PartitionClaim:
    """Ownership of a source partition, taken by appending this record to the partition's metadata
    partition (record type 4).

    The claim's **epoch is the offset this record got** in its metadata partition: unique by
    construction, and every reader of the topic sees the same claims in the same order. A ``LEAD``
    or ``ADMIN`` claim makes its writer the partition's only writer from that point of the log on;
    a ``RELEASE`` ends the claim whose epoch it names (an operator command hands the partition back).
    See :mod:`processor.metadata.fold_rules` for the rules every reader applies.
    """

    topic_partition: TopicPartition
    claim_id: uuid.UUID  # new for every claim: the record's key, so compaction keeps every claim
    kind: ClaimKind
    writer_id: str
    event_timestamp_ms: int
    topic_id: str | None = None  # the broker's topic id when the claim was made
    released_epoch: int = -1  # RELEASE only: the epoch of the claim it ends
    # LEAD or ADMIN only: the epoch of the holder's own claim this record states again (the holder
    # re-publishes its claim when a tombstone was filed under the claim's key); -1: a new claim
    restates_epoch: int = -1


MetadataRecord = (
    RemoteLogSegmentMetadata
    | RemoteLogSegmentMetadataUpdate
    | RemotePartitionDeleteMetadata
    | RemoteLogStartOffset
    | PartitionClaim
)
