"""One archived segment rewritten without the records of some keys (``processor erase``). The I/O is
the source's read (:mod:`processor.rewrite.source_segment`); the rewriting is pure
(:func:`erase_from`).

Each record batch goes through :func:`~processor.segment.batch_rewrite.rewrite_batch`: the records
of an erased key removed, every other record kept at its offset, the batch's offsets, producer fields
and codec kept, a batch left empty dropped, control batches (transaction markers) untouched. The
new segment covers exactly the source's offsets (the gaps are Kafka's compacted-topic gaps, which
clients step over); should every batch be dropped, the last one stays as Kafka's log cleaner keeps
one, an empty batch header (no record), so the segment still holds a batch. A segment of format 1
(records re-encoded by earlier versions) is rewritten as batches built from its kept records, as a
reader serves them (``records_as_batches``). The result is checked against the source (the same
offsets, its record count less the removed ones) before anyone uploads it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from processor.errors import CorruptObjectError, FormatError
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.rewrite.source_segment import SourceContent
from processor.segment.batch_rewrite import KeyPredicate, rewrite_batch
from processor.segment.entries_v2 import parse_batch_header, records_as_batches
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler, compress_segment


@dataclass(frozen=True, slots=True)
class Erasure:
    """``sealed``: the segment to publish in the source's place, None when none of its records was
    erased (nothing to do); ``records``: data records read; ``removed``: of those, erased."""

    sealed: SealedSegment | None
    records: int
    removed: int


def erase_from(
    source: RemoteLogSegmentMetadata,
    content: SourceContent,
    erase: KeyPredicate,
    block_bytes: int,
    compression: str = "keep",
) -> Erasure:
    """``source`` rewritten without the records ``erase`` accepts. Raises CorruptObjectError
    (FormatError for a batch that does not verify, wrapped with the segment's name)."""
    name = str(source.segment_id)
    batches: list[bytes | memoryview] = list(content.batches)
    removed = 0
    if content.records:  # format 1: the kept records as batches, as a reader serves them
        kept = [r for r in content.records if not erase(r.key)]
        removed = len(content.records) - len(kept)
        if not removed:
            return Erasure(None, len(content.records), 0)
        batches = list(records_as_batches(kept) or records_as_batches(content.records[-1:]))
    assembler = SegmentAssembler(source.segment_id.partition, source.start_offset, block_bytes, compression)
    records = len(content.records)
    last_dropped: bytes | memoryview | None = None
    for batch in batches:
        try:
            rewrite = rewrite_batch(batch, erase, where=f"segment {name}")
        except FormatError as exc:  # a batch that does not verify is never re-signed
            raise CorruptObjectError(str(exc), object_key=source.data_object_key, segment=name) from exc
        if not content.records:
            records += rewrite.records
            removed += rewrite.removed
        if rewrite.batch is None:
            last_dropped = batch
            continue
        assembler.append(parse_batch_header(rewrite.batch), rewrite.batch)
    if not removed:
        return Erasure(None, records, 0)
    if assembler.empty and last_dropped is not None:  # every record erased: one empty batch stays
        empty = rewrite_batch(last_dropped, erase, keep_if_empty=True).batch
        assert empty is not None
        assembler.append(parse_batch_header(empty), empty)
    assembler.cover(source.end_offset)
    sealed = assembler.seal()
    expected = (source.start_offset, source.end_offset, source.record_count - removed)
    if (sealed.start_offset, sealed.end_offset, sealed.record_count) != expected:
        raise CorruptObjectError(
            f"the rewrite covers {sealed.start_offset}..{sealed.end_offset} with {sealed.record_count} "
            f"records, expected {expected[0]}..{expected[1]} with {expected[2]}",
            object_key=source.data_object_key,
            segment=name,
        )
    # the source's leader epochs, whole: an epoch whose every record was erased still began where
    # it began (clients validate fetch positions against these)
    sealed = dataclasses.replace(sealed, leader_epochs=list(source.segment_leader_epochs))
    return Erasure(compress_segment(sealed), records, removed)
