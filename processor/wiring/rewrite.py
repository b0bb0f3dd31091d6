"""What `processor merge` runs with, built from the settings and a command's context: the source
reader, the copier that publishes the merged segment under the command's claim (uploads
rate-limited like the worker's) and the deleter of the superseded sources."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from processor.config import Settings
from processor.leader.segment_copier import SegmentCopier
from processor.rewrite.merge_plan import MergeLimits, MergeRun
from processor.rewrite.merge_runner import DeleteSuperseded
from processor.rewrite.merged_segment import merged_segment
from processor.segment.sealed_segment import SealedSegment
from processor.storage.rate_limited import rate_limited
from processor.wiring.deletion_context import DeletionContext
from processor.wiring.encryption import segment_decryption, segment_encryption
from processor.wiring.read_your_write import confirm_by_follower


@dataclass
class MergeTools:
    build: Callable[[MergeRun], SealedSegment]
    copier: SegmentCopier
    delete: DeleteSuperseded


def merge_limits(settings: Settings) -> MergeLimits:
    return MergeLimits(settings.merge_target_bytes, settings.merge_small_bytes, settings.merge_min_age_ms)


def merge_tools(settings: Settings, ctx: DeletionContext, topic_ids: dict[str, str]) -> MergeTools:
    decryption = segment_decryption(settings)

    def build(run: MergeRun) -> SealedSegment:
        return merged_segment(
            ctx.storage, ctx.keys, run, decryption, settings.block_bytes, settings.archive_compression
        )

    copier = SegmentCopier(
        rate_limited(ctx.storage, settings.upload_bytes_per_second),
        ctx.publisher,
        ctx.keys,
        ctx.writer_id,
        topic_ids=topic_ids,
        current_claim=ctx.follower.materializer.current_epoch,
        confirm=confirm_by_follower(ctx.follower.materializer, ctx.metadata_partitions),
        claim_id=ctx.follower.materializer.claim_id,
        encryption=segment_encryption(settings),
    )

    return MergeTools(build, copier, ctx.deleter.delete_superseded)
