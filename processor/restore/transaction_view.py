"""Which batches of a partition's log a read_committed consumer sees, from the log's own markers. Pure.

Kafka brokers answer a read_committed fetch with the last stable offset and a list of the aborted
transactions overlapping the response, built from the transaction markers (control batches) in the
log. Not every broker sends that list (Tansu, the embedded broker of the test stack, does not), so
the restore computes the same answer from the markers themselves: walking a partition's batches in
offset order, a producer's transactional batches wait until its next control batch, which says
COMMIT (they are visible) or ABORT (they are not); control batches are never visible;
non-transactional batches are visible at once. Batches still waiting at the end of what was read
belong to open transactions: they, and everything after the first of them, are past the last stable
offset.

This is what Kafka's own aborted-transaction index records, so on a Kafka broker the answer is the
same as a read_committed fetch. Compaction keeps it true: Kafka's log cleaner removes a
transaction's marker only after every batch of that transaction is gone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from processor.segment.entries_v2 import BatchHeader
from processor.segment.read_committed import is_abort_marker


class Outcome(Enum):
    COMMITTED = "committed"  # visible to read_committed consumers (non-transactional included)
    ABORTED = "aborted"
    CONTROL = "control"  # a transaction marker
    OPEN = "open"  # its transaction has no marker yet


@dataclass(frozen=True, slots=True)
class ResolvedBatch:
    header: BatchHeader
    batch: memoryview
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class TransactionView:
    batches: list[ResolvedBatch]
    last_stable_offset: int | None  # first offset of an open transaction; None when none is open

    def visible(self) -> list[ResolvedBatch]:
        """The batches a read_committed consumer gets: committed ones below the last stable offset."""
        lso = self.last_stable_offset
        return [
            b
            for b in self.batches
            if b.outcome is Outcome.COMMITTED and (lso is None or b.header.base_offset < lso)
        ]


def resolve(batches: Iterable[tuple[BatchHeader, memoryview]]) -> TransactionView:
    read: list[tuple[BatchHeader, memoryview]] = []
    outcomes: list[Outcome] = []
    waiting: dict[int, list[int]] = {}  # producer id -> indexes of its batches waiting for a marker
    for header, batch in batches:
        if header.is_control:
            decided = Outcome.ABORTED if is_abort_marker(batch) else Outcome.COMMITTED
            for j in waiting.pop(header.producer_id, ()):
                outcomes[j] = decided
            outcomes.append(Outcome.CONTROL)
        elif header.is_transactional:
            waiting.setdefault(header.producer_id, []).append(len(read))
            outcomes.append(Outcome.OPEN)
        else:
            outcomes.append(Outcome.COMMITTED)
        read.append((header, batch))
    resolved = [ResolvedBatch(h, b, o) for (h, b), o in zip(read, outcomes, strict=True)]
    open_starts = [read[idxs[0]][0].base_offset for idxs in waiting.values()]
    return TransactionView(resolved, min(open_starts) if open_starts else None)
