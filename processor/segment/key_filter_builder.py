"""A sealed segment's key filter (the format: ``key_filter``), built from its own blocks before they are
encrypted. Pure.

The copier calls :func:`segment_key_filter` for every segment it uploads while an erasure secret is
configured (PROCESSOR_ERASURE_SECRET), so offloads, merges and erasures all leave one filter object
``{data object key}-keys`` beside the index. It reads the blocks as stored: a block that archive
compression turned into one zstd frame is decompressed (cheap next to the upload), and each batch's
keys are read and summarised by a compiled walk (``key_kernels``: CRC-32C checked, control batches
skipped). The copy scheduler has the keys summarised before archive compression
(:func:`with_key_summaries`), once a segment whatever its copy attempts; a merge or an erasure hands
the copier blocks as stored. Only format 2 segments (whole Kafka batches) get a filter: the leader
writes nothing else, and erasure scans a segment without one.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from processor.segment.block_header import BLOCK_FORMAT_V2
from processor.segment.key_filter import FilterSecret, build_summarised_key_filter
from processor.segment.sealed_segment import SealedSegment


def segment_key_filter(segment: SealedSegment, secret: FilterSecret, segment_id: uuid.UUID) -> bytes | None:
    """The encoded filter of the segment's keys, salted with its id; None for a segment that is
    not of format 2 (nothing to build it from without decoding records another way)."""
    if segment.format_version != BLOCK_FORMAT_V2:
        return None
    summaries = segment.key_summaries
    if summaries is None:
        # numba comes with key_kernels: loaded by the first filter a process builds, never without one
        from processor.segment.key_kernels import segment_key_summaries

        summaries = segment_key_summaries(segment)
    return build_summarised_key_filter(summaries, secret, segment_id.bytes).encode()


def with_key_summaries(segment: SealedSegment) -> SealedSegment:
    """``segment`` carrying its keys' summaries, read from its blocks as they are now: called
    before archive compression, it spares the filter a decompression of every block (measured:
    ~1.7 CPU-s per GB of 1 KiB records), and the copy's retries a second walk. Raises FormatError
    as ``segment_key_filter`` does."""
    if segment.format_version != BLOCK_FORMAT_V2:
        return segment
    from processor.segment.key_kernels import segment_key_summaries  # numba: see key_kernels

    return replace(segment, key_summaries=segment_key_summaries(segment))


def warm_up_key_filters() -> None:
    """Load numba and compile the filter's kernels (~1.5 s of CPU) ahead of the first segment: a
    worker with an erasure secret calls it before it takes a record."""
    import processor.segment.key_kernels  # noqa: F401  (compiled as it is imported)
