"""Reads a run of archived segments and seals them into one: the record batches as stored, one after
the other, in new blocks under a new index (I/O: the storage reads; the assembling is the copier's
own pure :class:`~processor.segment.segment_assembler.SegmentAssembler`).

Every block is verified as any reader verifies it (CRC-32C of every batch, the index's offsets, the
segment's data key where it is encrypted), and the result is checked against the sources' metadata
(the same offsets covered, the same number of records) before anyone uploads it. The merged segment
is held in memory whole: its size is bounded by the merge's target size. Sources are read
``READ_THREADS`` at a time, each source's index and data object fetched at once (small objects: the
requests' latency, not the bytes, bound a merge of many), and assembled in offset order.

Server-side copy (S3's UploadPartCopy, or a backend's compose) is not used: the merged data object
is not its sources' objects end to end (their batches are re-blocked under one new index, each
block verified, encrypted with the merged segment's own data key where the archive is encrypted,
and read for its key filter), and S3 copies parts of at least 5 MiB where the segments merged are
below ``PROCESSOR_MERGE_SMALL_BYTES`` and mostly far smaller. It would apply only to sources of
5 MiB and more, unencrypted and without key filters, whose blocks were kept as they are.
"""

from __future__ import annotations

from concurrent.futures import Executor, ThreadPoolExecutor

from processor.errors import CorruptObjectError
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.segment_keys import SegmentDecryption
from processor.rewrite.merge_plan import MergeRun
from processor.rewrite.source_segment import read_source
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler, compress_segment
from processor.storage.chunk_storage import ChunkStorage

READ_THREADS = 16  # sources read at once: small objects, so latency bound, not bandwidth


def _batches(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    source: RemoteLogSegmentMetadata,
    decryption: SegmentDecryption,
    gets: Executor,
) -> list[memoryview]:
    """One source's record batches as archived, verified (``read_source``, its data object fetched
    on ``gets``); a segment of format 1 (records, not batches) is not merged."""
    content = read_source(storage, keys, source, decryption, gets)
    if content.records:
        raise CorruptObjectError(
            "a block of records, not of batches (format 1): not merged",
            object_key=source.data_object_key,
            segment=str(source.segment_id),
        )
    return content.batches


def merged_segment(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    run: MergeRun,
    decryption: SegmentDecryption,
    block_bytes: int,
    compression: str = "keep",
) -> SealedSegment:
    """The run's batches sealed as one segment covering ``run.start_offset..run.end_offset``. Raises
    CorruptObjectError (a source that does not read back as its metadata says), SegmentKeyError."""
    first = run.segments[0]
    assembler = SegmentAssembler(first.segment_id.partition, run.start_offset, block_bytes, compression)
    threads = min(READ_THREADS, len(run.segments))
    # two pools: a source's read waits on its data GET, which must never queue behind such waits
    with (
        ThreadPoolExecutor(max_workers=threads, thread_name_prefix="merge-read") as pool,
        ThreadPoolExecutor(max_workers=threads, thread_name_prefix="merge-get") as gets,
    ):
        read = pool.map(lambda s: _batches(storage, keys, s, decryption, gets), run.segments)
        for source, batches in zip(run.segments, read, strict=True):
            for batch in batches:
                assembler.append(parse_batch_header(batch), batch)
            assembler.cover(source.end_offset)
    sealed = assembler.seal()
    if (sealed.start_offset, sealed.end_offset, sealed.record_count) != (
        run.start_offset,
        run.end_offset,
        run.record_count,
    ):
        raise CorruptObjectError(
            f"the merge covers {sealed.start_offset}..{sealed.end_offset} with {sealed.record_count} "
            f"records, its sources {run.start_offset}..{run.end_offset} with {run.record_count}",
            object_key=first.data_object_key,
            segment=str(first.segment_id),
        )
    return compress_segment(sealed)
