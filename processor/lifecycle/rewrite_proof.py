"""The proof, read from the bucket, that a rewrite (a merge, an erasure) holds every record of a segment
it supersedes: only then is the superseded segment garbage.

A rewrite's COPY_SEGMENT_FINISHED alone proves nothing (a record may be forged with the current
claim's epoch and writer id), and neither do objects at its keys (junk, or another segment's). The
proof is the rewrite's content, read and checked against its own metadata and against each source's:

1. the rewrite's index object is read (one GET) and verified as any reader verifies it
   (:func:`~processor.reader.segment_blocks.fetch_index`: keys of the segment's own partition, the
   size and CRC-32 its metadata carries, the segment id, offsets and data length it names; an
   encrypted index opened with its data key);
2. the source's index object is read and verified the same way;
3. every block of the source lies within the offsets the rewrite's verified index covers; and where
   the rewrite keeps the record batches as stored (a merge: it names several segments), the first
   and last offset of every source block lie inside one of the rewrite's blocks, so no batch of the
   source falls into a gap of the rewrite. An erasure (a rewrite naming one segment) drops the
   batches it empties, so its blocks may leave gaps where the source had only erased records: for
   it, and for any source reached through one, the offsets check of 3 is the whole check.

Every error while reading is "not proven" (the source is kept, and asked again at the next pass),
never "proven": a storage error (``storage_error``), an index that is missing, does not verify or
whose key cannot be had (``unreadable``), an index that verifies but does not cover the source
(``not_covered``). Each is counted (``processor_deletion_proofs_failed_total{reason}``) and logged.

What it does not prove: that the rewrite's data object holds the records its index names (the
blocks are not read: a writer that can forge both the metadata and a consistent index at the
rewrite's keys is believed), nor, for an erasure, which records it dropped.
"""

from __future__ import annotations

import bisect
import logging
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from processor import metrics
from processor.errors import (
    CorruptObjectError,
    InvalidRangeError,
    ProcessorError,
    SegmentKeyError,
    StorageError,
)
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.segment_blocks import fetch_index
from processor.reader.segment_keys import NO_DECRYPTION, SegmentDecryption
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)

# The reasons of processor_deletion_proofs_failed_total
PROOF_STORAGE_ERROR = "storage_error"  # the storage answered with an error while proving
PROOF_UNREADABLE = "unreadable"  # an index missing, that does not verify, or whose key cannot be had
PROOF_NOT_COVERED = "not_covered"  # a rewrite's verified index does not cover its source


def proof_failed(reason: str, what: str, detail: object) -> None:
    """Count and log one deletion left for want of proof (it waits for the next pass)."""
    metrics.DELETION_PROOFS_FAILED.labels(reason).inc()
    log.warning("not proven, kept for now (%s): %s: %s", reason, what, detail)


class NotProven(Exception):
    """Why a proof failed: one of the reasons above, and what happened."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


def uncovered(rewrite: SegmentIndex, source: SegmentIndex, keeps_batches: bool) -> str | None:
    """What of ``source`` the verified index ``rewrite`` does not cover (None: it covers every block).
    ``keeps_batches``: the rewrite holds every batch of the source as stored (a merge). Pure."""
    lo, hi = rewrite.start_offset, rewrite.end_offset
    if source.start_offset < lo or source.end_offset > hi:
        return f"its offsets {source.start_offset}..{source.end_offset} are outside the rewrite's {lo}..{hi}"
    blocks = rewrite.blocks
    firsts = [b.first_offset for b in blocks]
    for number, block in enumerate(source.blocks):
        if block.first_offset < lo or block.last_offset > hi:
            return f"its block {number} ({block.first_offset}..{block.last_offset}) is outside {lo}..{hi}"
        if not keeps_batches:
            continue
        for offset in (block.first_offset, block.last_offset):
            i = _block_at(firsts, offset)
            if i is None or blocks[i].last_offset < offset:
                return f"offset {offset} (its block {number}) is in no block of the rewrite"
    return None


def _block_at(firsts: list[int], offset: int) -> int | None:
    """The index of the last block starting at or before ``offset`` (None: none does)."""
    i = bisect.bisect_right(firsts, offset) - 1
    return i if i >= 0 else None


@dataclass(frozen=True, slots=True)
class _Failed:
    reason: str
    detail: str


class RewriteProofs:
    """Reads and verifies indexes for one round of proofs (a pass, a rewrite's deletion): each index
    at most once, a failure remembered as such."""

    def __init__(
        self, storage: ChunkStorage, keys: ObjectKeyFactory, decryption: SegmentDecryption = NO_DECRYPTION
    ) -> None:
        self.storage = storage
        self.keys = keys
        self.decryption = decryption
        self._indexes: dict[uuid.UUID, SegmentIndex | _Failed] = {}

    def index(self, segment: RemoteLogSegmentMetadata) -> SegmentIndex:
        """The segment's verified index; raises NotProven."""
        sid = segment.segment_id.id
        if sid not in self._indexes:
            self._indexes[sid] = self._read(segment)
        found = self._indexes[sid]
        if isinstance(found, _Failed):
            raise NotProven(found.reason, found.detail)
        return found

    def _read(self, segment: RemoteLogSegmentMetadata) -> SegmentIndex | _Failed:
        try:
            return fetch_index(self.storage, self.keys, segment, cipher=self.decryption.cipher(segment))
        # a missing object is a CorruptObjectError, one shorter than its metadata says an
        # InvalidRangeError: answers, not failures to answer
        except (CorruptObjectError, InvalidRangeError, SegmentKeyError) as exc:
            return _Failed(PROOF_UNREADABLE, f"the index of {segment.segment_id}: {exc}")
        except StorageError as exc:
            return _Failed(PROOF_STORAGE_ERROR, f"reading the index of {segment.segment_id}: {exc}")
        except ProcessorError as exc:
            return _Failed(PROOF_UNREADABLE, f"the index of {segment.segment_id}: {exc}")

    def covers(
        self,
        rewrite: RemoteLogSegmentMetadata,
        source: RemoteLogSegmentMetadata,
        segments: Mapping[uuid.UUID, RemoteLogSegmentMetadata],
    ) -> None:
        """Raise NotProven unless ``rewrite``'s content covers every record of ``source`` (the
        module's rules). ``segments``: the partition's known segments, to find the rewrites between
        the two (a merge of a merge): a source reached through an erasure may lack whole batches."""
        index = self.index(rewrite)
        source_index = self.index(source)
        gap = uncovered(index, source_index, keeps_batches=not _through_erasure(rewrite, source, segments))
        if gap is not None:
            what = f"{rewrite.segment_id} does not cover {source.segment_id}: {gap}"
            raise NotProven(PROOF_NOT_COVERED, what)


def _through_erasure(
    rewrite: RemoteLogSegmentMetadata,
    source: RemoteLogSegmentMetadata,
    segments: Mapping[uuid.UUID, RemoteLogSegmentMetadata],
) -> bool:
    """Whether a rewrite naming one segment (an erasure, which drops the batches it empties) lies on a
    path from ``rewrite`` down to ``source``; when none is found, True only if ``rewrite`` is one."""
    target = source.segment_id.id
    todo: list[tuple[RemoteLogSegmentMetadata, bool]] = [(rewrite, len(rewrite.supersedes) == 1)]
    seen: set[uuid.UUID] = set()
    found: list[bool] = []
    while todo:
        node, erased = todo.pop()
        if node.segment_id.id in seen:
            continue
        seen.add(node.segment_id.id)
        for sid in node.supersedes:
            if sid == target:
                found.append(erased)
                continue
            child = segments.get(sid)
            if child is not None and child.supersedes:
                todo.append((child, erased or len(child.supersedes) == 1))
    return any(found) if found else len(rewrite.supersedes) == 1
