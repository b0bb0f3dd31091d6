"""What the metadata fold keeps of a partition and how one record changes it: the partition's header
(its current claim, lineage, remote log start offset and delete state), the change one record makes,
and the store protocol the fold commits changes to (dicts in :mod:`processor.metadata.memory_store`,
RocksDB in the follower cache)."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from processor.kafka.partition import TopicPartition
from processor.metadata.fencing import Lineage
from processor.metadata.model import ClaimKind, PartitionDeleteState, RemoteLogSegmentMetadata


@dataclass(frozen=True, slots=True)
class Claim:
    """The current claim of a partition: who holds it and since which point of the log."""

    epoch: int  # the claim record's offset in its metadata partition
    claim_id: uuid.UUID
    kind: ClaimKind
    writer_id: str
    topic_id: str | None
    at_ms: int


@dataclass(frozen=True, slots=True)
class PartitionHeader:
    """The small per-partition state of the fold; the follower cache keeps it as one value."""

    claimed: bool = False  # a claim was seen: claim rules apply from then on
    claim: Claim | None = None  # the current claim (None: no claim yet, or released)
    lineage: Lineage = field(default_factory=Lineage)  # topic ids (and, before claims, epochs)
    log_start_offset: int = 0  # remote log start offset; only grows
    delete_state: PartitionDeleteState | None = None  # of the whole partition (delete-topic)
    # the highest epoch any claim of the partition had (a released one included): a claim stated
    # again with an older epoch is a zombie's, never current again
    highest_claim_epoch: int = -1

    @property
    def current_epoch(self) -> int | None:
        return self.claim.epoch if self.claim is not None else None


@dataclass(slots=True)
class Change:
    """What applying one record changes; decided first, committed to the store in one step."""

    header: PartitionHeader | None = None
    put: RemoteLogSegmentMetadata | None = None  # the segment's new state
    put_raw: bytes | None = None  # its encoded bytes when ``put`` is the record as received
    served: bool = False  # whether ``put`` is served
    dropped: RemoteLogSegmentMetadata | None = None  # a segment forgotten (its tombstone)
    unserve: tuple[RemoteLogSegmentMetadata, ...] = ()  # served ones that stop being served
    reserve: tuple[RemoteLogSegmentMetadata, ...] = ()  # finished ones served again (a rewrite deleted)
    shadow: tuple[bytes, bool] | None = None  # key shadowed by a rejected record (True) or no more
    shadows: tuple[tuple[bytes, bool], ...] = ()  # more of them (a claim's records to re-publish)
    orphan: tuple[uuid.UUID, RemoteLogSegmentMetadata | None] | None = None  # rejected, of an unknown segment


class FoldStore(Protocol):
    """Where the fold keeps its state: dicts (:class:`~processor.metadata.memory_store.MemoryStore`)
    or RocksDB (the follower cache)."""

    def header(self, tp: TopicPartition) -> PartitionHeader: ...

    def segment(self, sid: uuid.UUID) -> RemoteLogSegmentMetadata | None: ...

    def served_overlapping(
        self, tp: TopicPartition, start: int, end: int
    ) -> Iterable[RemoteLogSegmentMetadata]:
        """Served segments of ``tp`` with at least one offset in ``start..end``."""
        ...

    def served(self, tp: TopicPartition) -> Iterable[RemoteLogSegmentMetadata]: ...

    def unserved(self, tp: TopicPartition) -> Iterable[RemoteLogSegmentMetadata]:
        """Segments of ``tp`` the store lists that are not served: in a delete state, or finished and
        superseded (rare: a claim's records are being re-published)."""
        ...

    def shadowed_keys(self, tp: TopicPartition) -> Iterable[bytes]: ...

    def is_shadowed(self, tp: TopicPartition, key: bytes) -> bool: ...

    def is_orphan(self, tp: TopicPartition, sid: uuid.UUID) -> bool: ...

    def commit(self, tp: TopicPartition, change: Change) -> None: ...
