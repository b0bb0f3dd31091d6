"""``processor delete-topic --topic T``: delete every remote segment and object of a topic.

Each partition walks KIP-405's partition delete states: DELETE_PARTITION_MARKED, then
DELETE_PARTITION_STARTED, then every segment goes (DELETE_SEGMENT_STARTED, objects,
DELETE_SEGMENT_FINISHED, tombstone), pending entries of the deletion topic are retried, objects left
under the partition's prefix by crashed writers are deleted and its multipart uploads aborted, and
only then DELETE_PARTITION_FINISHED. The states are durable on the metadata topic, so a run that
crashes half way is resumed by running the command again; the prefix ends empty.
"""

from __future__ import annotations

import argparse
import logging
import time

from processor.commands.deletion_context import DeletionContext, open_context
from processor.config import load_settings
from processor.errors import StorageError
from processor.kafka_clients import new_admin, partition_counts
from processor.lifecycle.multipart_sweep import sweep_multipart_uploads
from processor.lifecycle.retention_policy import DeleteReason
from processor.metadata.model import (
    PartitionDeleteState,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicPartition,
)
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.object_keys import validate_topic

log = logging.getLogger(__name__)
P = PartitionDeleteState


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("delete-topic", help="delete all of a topic's remote data (resumable)")
    p.add_argument("--topic", required=True)
    p.set_defaults(func=cmd_delete_topic)


def cmd_delete_topic(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    ctx: DeletionContext = open_context(settings)
    try:
        if topic in partition_counts(new_admin(settings.bootstrap_servers, "processor-admin"), [topic]):
            print(
                f"warning: topic {topic} still exists in Kafka; workers offloading it will copy new "
                "segments after this deletion"
            )
        state = ctx.load()
        found = (
            ctx.keys.partition_of(topic, info.key)
            for info in ctx.storage.list(ctx.keys.topic_listing_prefix(topic))
        )
        in_bucket = {p for p in found if p is not None}
        partitions = sorted({tp.partition for tp in state.partitions if tp.topic == topic} | in_bucket)
        unfinished = []
        for p in partitions:
            tp = TopicPartition(topic, p)
            if not delete_partition(ctx, tp, state.partition(tp)):
                unfinished.append(p)
    finally:
        ctx.close()
    if unfinished:
        print(
            f"{topic}: partitions {unfinished} not finished (deletions failed; queued on "
            f"{settings.deletion_topic}); run the command again"
        )
        return 1
    print(f"{topic}: {len(partitions)} partitions deleted from remote storage")
    return 0


def delete_partition(ctx: DeletionContext, tp: TopicPartition, part: PartitionRemoteState) -> bool:
    """Walk one partition through the delete states; True when it reached DELETE_PARTITION_FINISHED."""

    def mark(state: PartitionDeleteState) -> None:
        ctx.publisher.publish(
            RemotePartitionDeleteMetadata(tp, state, int(time.time() * 1000), ctx.writer_id)
        )

    current = part.delete_state
    if current in (None, P.DELETE_PARTITION_FINISHED):
        mark(P.DELETE_PARTITION_MARKED)
        current = P.DELETE_PARTITION_MARKED
    if current is P.DELETE_PARTITION_MARKED:
        mark(P.DELETE_PARTITION_STARTED)
    epoch = max(part.max_epoch, 0)  # the partition's newest writer epoch: older ones are fenced
    ok = True
    live = sorted(
        (s for s in part.segments.values() if s.state is not SegmentState.DELETE_SEGMENT_FINISHED),
        key=lambda s: s.start_offset,
    )
    for segment in live:
        reason = (
            DeleteReason.RETRY
            if segment.state is SegmentState.DELETE_SEGMENT_STARTED
            else DeleteReason.TOPIC_DELETED
        )
        if ctx.deleter.delete_segment(segment, reason, epoch) is not None:
            ok = False
    if ctx.deleter.retry_failed(ctx.deletion_topic.pending({tp}), epoch).failed:
        ok = False
    prefix = ctx.keys.topic_listing_prefix(tp.topic)
    try:
        for info in list(ctx.storage.list(prefix)):  # objects no metadata names (crashed writers)
            if ctx.keys.partition_of(tp.topic, info.key) == tp.partition:  # any topic id
                ctx.storage.delete(info.key)
        for folder in {ctx.keys.partition_prefix(tp.topic, tp.partition)} | {
            ctx.keys.partition_prefix(tp.topic, tp.partition, s.segment_id.topic_id)
            for s in part.segments.values()
        }:
            sweep_multipart_uploads(ctx.storage, folder, older_than_ms=0)
    except StorageError as exc:
        log.warning("could not empty %s: %s", prefix, exc)
        ok = False
    if ok:
        mark(P.DELETE_PARTITION_FINISHED)
    return ok
