"""What a restore run keeps: its options, each source partition's committed state, and what the
open transaction holds (to turn the target's base offsets into offset map chunks). Pure."""

from __future__ import annotations

import concurrent.futures
import time
from dataclasses import dataclass, field

from processor.restore.archive import Chunk, ChunkStream
from processor.restore.offset_map import OffsetMap
from processor.restore.plan import PartitionPlan

DEFAULT_TRANSACTION_RECORDS = 50_000
DEFAULT_TRANSACTION_MS = 5_000
DEFAULT_MAX_BATCH_BYTES = 1024 * 1024  # Kafka's default max.message.bytes is 1 MiB + 12


@dataclass(frozen=True, slots=True)
class RestoreOptions:
    transaction_records: int = DEFAULT_TRANSACTION_RECORDS
    transaction_bytes: int = 32 * 1024 * 1024
    transaction_ms: int = DEFAULT_TRANSACTION_MS
    parallel_partitions: int = 4
    max_bytes_per_second: int | None = None
    max_records_per_second: int | None = None
    retries: int = 5
    max_batch_bytes: int = (
        DEFAULT_MAX_BATCH_BYTES  # larger archived batches are split (target's max.message.bytes)
    )


@dataclass
class PartitionRun:
    """One source partition's state during a run (committed values only)."""

    plan: PartitionPlan
    position: int
    sequence: int
    records_total: int
    bytes_total: int
    offset_map: OffsetMap | None
    records_run: int = 0
    bytes_run: int = 0
    transactions_run: int = 0
    stream: ChunkStream | None = None
    exhausted: bool = False  # the stream ended: this run has read everything up to plan.stop

    @property
    def done(self) -> bool:
        return self.position >= self.plan.stop


@dataclass
class Transaction:
    """What the open transaction holds, to turn the target's base offsets into offset map chunks."""

    started: float = field(default_factory=time.monotonic)
    records: int = 0
    bytes: int = 0
    records_by_source: dict[int, int] = field(default_factory=dict)
    bytes_by_source: dict[int, int] = field(default_factory=dict)
    positions: dict[int, int] = field(default_factory=dict)
    # source partition -> its batches in produce order: (source offsets, future target base offset)
    sent: dict[int, list[tuple[range | list[int], concurrent.futures.Future[int]]]] = field(
        default_factory=dict
    )

    def add(self, source_partition: int, records: int, chunk: Chunk) -> None:
        self.records += records
        self.bytes += chunk.size_bytes
        self.records_by_source[source_partition] = self.records_by_source.get(source_partition, 0) + records
        self.bytes_by_source[source_partition] = (
            self.bytes_by_source.get(source_partition, 0) + chunk.size_bytes
        )
        self.positions[source_partition] = chunk.position
