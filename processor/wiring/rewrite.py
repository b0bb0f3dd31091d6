"""Rewrites built from the settings: what `processor merge` and `processor erase` run with under
their operator claims (the source reader, a copier whose uploads are rate-limited like the worker's,
the deleter of the superseded sources, erase's key filter lookups), and the worker's own merges of
the partitions it leads (PROCESSOR_MERGE_CHECK_MS; run by processor/rewrite/merge_passes.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from processor.config import Settings
from processor.errors import FormatError
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.reader.segment_blocks import fetch_key_filter
from processor.rewrite.erased_segment import Erasure, erase_from
from processor.rewrite.merge_passes import MergeTools, WorkerMerges
from processor.rewrite.merge_plan import MergeLimits, MergeRun
from processor.rewrite.merged_segment import merged_segment
from processor.rewrite.ports import Copier
from processor.rewrite.source_segment import read_source
from processor.segment.batch_rewrite import KeyPredicate
from processor.segment.key_filter import FilterSecret, KeyFilterSecretError, summarise
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.sealed_segment import SealedSegment
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.rate_limited import rate_limited
from processor.wiring.deletion_context import DeletionContext
from processor.wiring.encryption import segment_decryption, segment_encryption
from processor.wiring.erasure import key_filter_secret
from processor.wiring.read_your_write import confirm_by_follower

log = logging.getLogger(__name__)


def merge_limits(settings: Settings) -> MergeLimits:
    return MergeLimits(settings.merge_target_bytes, settings.merge_small_bytes, settings.merge_min_age_ms)


def merge_builder(
    settings: Settings, storage: ChunkStorage, keys: ObjectKeyFactory
) -> Callable[[MergeRun], SealedSegment]:
    """A run's sources read back and sealed as one segment, with the settings' blocks and compression."""
    decryption = segment_decryption(settings)
    return lambda run: merged_segment(
        storage, keys, run, decryption, settings.block_bytes, settings.archive_compression
    )


def rewrite_copier(settings: Settings, ctx: DeletionContext, topic_ids: dict[str, str]) -> SegmentCopier:
    """The copier an operator command's rewrites go through: uploads rate-limited like the worker's,
    records confirmed by the command's own follower, sealed and filtered as the settings say."""
    return SegmentCopier(
        rate_limited(ctx.storage, settings.upload_bytes_per_second),
        ctx.publisher,
        ctx.keys,
        ctx.writer_id,
        topic_ids=topic_ids,
        current_claim=ctx.follower.materializer.current_epoch,
        confirm=confirm_by_follower(ctx.follower.materializer, ctx.metadata_partitions),
        claim_id=ctx.follower.materializer.claim_id,
        encryption=segment_encryption(settings),
        key_filter_secret=key_filter_secret(settings),
    )


def merge_tools(settings: Settings, ctx: DeletionContext, topic_ids: dict[str, str]) -> MergeTools:
    """What `processor merge` writes with under its operator claim."""
    build = merge_builder(settings, ctx.storage, ctx.keys)
    return MergeTools(build, rewrite_copier(settings, ctx, topic_ids), ctx.deleter.delete_superseded)


def worker_merges(
    settings: Settings,
    storage: ChunkStorage,
    state: Callable[[TopicPartition], PartitionRemoteState],
    copier: Copier,
    deleter: SegmentDeleter,
    on_fenced: Callable[[list[TopicPartition]], None],
) -> WorkerMerges:
    """The worker's own merges (PROCESSOR_MERGE_CHECK_MS), with the leader's copier and the retention
    pass's deleter."""
    tools = MergeTools(
        merge_builder(settings, storage, ObjectKeyFactory(settings.s3_prefix)),
        copier,
        deleter.delete_superseded,
    )
    return WorkerMerges(merge_limits(settings), settings.merge_check_ms / 1000.0, tools, state, on_fenced)


@dataclass
class FilterStats:
    """How the key filters answered during one erasure."""

    missing: int = 0  # segments without a filter (written before filters or without a secret): read
    unusable: int = 0  # filters that could not answer (corrupt, too big, another secret): read


def key_filter_lookup(
    storage: ChunkStorage, secret: FilterSecret | None, erased: Sequence[bytes], stats: FilterStats
) -> Callable[[RemoteLogSegmentMetadata], bool]:
    """Whether a segment may hold one of ``erased``, by its key filter object (``{data}-keys``). A
    filter is bucket input: read only when its size is one a filter can have, decoded and checked in
    one place (``decode_key_filter``); whenever it cannot answer, the answer is "maybe" (the segment is
    read), never "no" (which would leave a key's records in it)."""
    wanted = list(erased)
    # once a filter version: only the sealing depends on a filter's salt
    summaries: dict[int, np.ndarray] = {}

    def may_hold(segment: RemoteLogSegmentMetadata) -> bool:
        if secret is None:
            stats.missing += 1
            return True
        try:
            found = fetch_key_filter(storage, segment.data_object_key)
            if found is None:
                stats.missing += 1
                return True
            if found.version not in summaries:
                summaries[found.version] = summarise(wanted, found.version)
            return found.might_contain_summarised(summaries[found.version], secret)
        except (FormatError, KeyFilterSecretError) as exc:
            stats.unusable += 1
            log.warning("key filter of %s cannot answer (%s): reading the segment", segment.segment_id, exc)
            return True

    return may_hold


def erase_builder(
    settings: Settings, storage: ChunkStorage, keys: ObjectKeyFactory, erase: KeyPredicate
) -> Callable[[RemoteLogSegmentMetadata], Erasure]:
    """A segment read back and rewritten without the erased keys' records, with the settings' blocks
    and compression."""
    decryption = segment_decryption(settings)
    return lambda source: erase_from(
        source,
        read_source(storage, keys, source, decryption),
        erase,
        settings.block_bytes,
        settings.archive_compression,
    )
