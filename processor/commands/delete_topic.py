"""``processor delete-topic --topic T [--topic-id ID | --include-live]``: delete a topic's remote data,
one topic id at a time.

A topic deleted and re-created under the same name is a new history with a new topic id (KIP-516);
its objects live in their own folders (``{topic}-{topic_id}/``). By default the command deletes the
histories that are *not* the live topic's: every topic id except the one the broker reports now,
and the segments written before ids were recorded if the live topic's history no longer includes
them. ``--topic-id ID`` deletes that one id only (``legacy`` for the segments without an id);
``--include-live`` deletes everything, the live topic's archive too. It says what it will delete
before it starts.

Each partition is taken for the command with an ADMIN claim (workers leading it stop writing it
until the command releases it; processor/metadata/fold.py). When everything of the partition goes
(the topic is gone, or ``--include-live``), the partition walks KIP-405's partition delete states:
DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, then every segment goes (DELETE_SEGMENT_STARTED,
objects, DELETE_SEGMENT_FINISHED, tombstone), pending entries of the deletion topic are retried,
objects left under the deleted ids' folders by crashed writers are deleted and their multipart
uploads aborted, and only then DELETE_PARTITION_FINISHED. The states are durable on the metadata
topic, so a run that crashes half way is resumed by running the command again.
"""

from __future__ import annotations

import argparse
import logging
import time

from processor.commands.deletion_context import DeletionContext, open_context
from processor.config import load_settings
from processor.errors import ConfigError, StorageError
from processor.kafka_clients import new_admin, topic_ids
from processor.lifecycle.multipart_sweep import sweep_multipart_uploads
from processor.lifecycle.retention_policy import DeleteReason
from processor.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    SegmentState,
    TopicPartition,
)
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.object_keys import validate_topic, validate_topic_id

log = logging.getLogger(__name__)
P = PartitionDeleteState
LEGACY = "legacy"  # --topic-id for segments written before topic ids were recorded


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "delete-topic",
        help="delete a topic's remote data: by default earlier topics of that name (resumable)",
    )
    p.add_argument("--topic", required=True)
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--topic-id", help=f"delete only this topic id's history ({LEGACY!r}: segments without one)"
    )
    which.add_argument(
        "--include-live", action="store_true", help="also delete the live topic's archive (everything)"
    )
    p.set_defaults(func=cmd_delete_topic)


class Scope:
    """Which histories of the topic go: a set of topic ids (None standing for the legacy folder)."""

    def __init__(self, ids: set[str | None], everything: bool) -> None:
        self.ids = ids
        self.everything = everything  # the partition as a whole goes (delete states, every folder)

    def covers(self, segment: RemoteLogSegmentMetadata) -> bool:
        return self.everything or segment.segment_id.topic_id in self.ids


def choose_scope(
    args: argparse.Namespace, live_id: str | None, found: set[str | None], legacy_live: bool
) -> Scope:
    """The histories to delete (see the module docstring). Pure."""
    if args.include_live or (live_id is None and args.topic_id is None):
        return Scope(set(found), True)
    if args.topic_id is not None:
        wanted: str | None = None if args.topic_id == LEGACY else validate_topic_id(args.topic_id)
        if wanted is not None and wanted == live_id:
            raise ConfigError(f"--topic-id {wanted} is the live topic's id: to delete it, use --include-live")
        return Scope({wanted}, False)
    ids = {i for i in found if i != live_id}
    if legacy_live:
        ids.discard(None)
    return Scope(ids, False)


def _describe(scope: Scope) -> str:
    if scope.everything:
        return "everything (every topic id and the segments without one)"
    if not scope.ids:
        return "nothing (only the live topic's history is archived)"
    return ", ".join(
        sorted("segments without a topic id" if i is None else f"topic id {i}" for i in scope.ids)
    )


def cmd_delete_topic(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    ctx: DeletionContext = open_context(settings, topic)
    unfinished: list[int] = []
    try:
        live_id = topic_ids(new_admin(settings.kafka, "processor-admin"), [topic]).get(topic)
        found_keys = [
            ctx.keys.folder_of(topic, info.key)
            for info in ctx.storage.list(ctx.keys.topic_listing_prefix(topic))
        ]
        partitions = sorted(
            {tp.partition for tp in ctx.partitions_of(topic)} | {f[1] for f in found_keys if f is not None}
        )
        states = {p: ctx.state(TopicPartition(topic, p)) for p in partitions}
        found_ids: set[str | None] = {f[0] for f in found_keys if f is not None}
        found_ids |= {s.segment_id.topic_id for st in states.values() for s in st.segments.values()}
        legacy_live = live_id is not None and any(
            not st.lineage.legacy_retired and st.lineage.topic_id in (None, live_id) for st in states.values()
        )
        scope = choose_scope(args, live_id, found_ids, legacy_live)
        print(
            f"{topic}: live topic id {live_id or '(none: the topic does not exist)'}; "
            f"deleting {_describe(scope)} in {len(partitions)} partitions"
        )
        if not scope.everything and not scope.ids:
            return 0
        for p in partitions:
            tp = TopicPartition(topic, p)
            if not delete_partition(ctx, tp, scope):
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


def delete_partition(ctx: DeletionContext, tp: TopicPartition, scope: Scope) -> bool:
    """Delete what ``scope`` covers of one partition, under an ADMIN claim; True when done."""
    epoch = ctx.claim(tp)
    part: PartitionRemoteState = ctx.state(tp)

    def mark(state: PartitionDeleteState) -> None:
        record = RemotePartitionDeleteMetadata(
            tp, state, int(time.time() * 1000), ctx.writer_id, writer_epoch=epoch
        )
        ctx.publisher.publish(record)

    if scope.everything:
        current = part.delete_state
        if current in (None, P.DELETE_PARTITION_FINISHED):
            mark(P.DELETE_PARTITION_MARKED)
            current = P.DELETE_PARTITION_MARKED
        if current is P.DELETE_PARTITION_MARKED:
            mark(P.DELETE_PARTITION_STARTED)
    ok = True
    live = sorted((s for s in part.segments.values() if scope.covers(s)), key=lambda s: s.start_offset)
    ctx.deleter.forget_manifests(live)  # first: a rebuild never brings back a half-deleted topic
    for segment in live:
        reason = (
            DeleteReason.RETRY
            if segment.state is SegmentState.DELETE_SEGMENT_STARTED
            else DeleteReason.TOPIC_DELETED
        )
        if ctx.deleter.delete_segment(segment, reason, epoch) is not None:
            ok = False
    pending = [s for s in ctx.deletion_topic.pending({tp}) if scope.covers(s)]
    if ctx.deleter.retry_failed(pending, epoch, part.accepted_state).failed:
        ok = False
    for orphan in part.orphans.values():
        if scope.covers(orphan) and ctx.deleter.delete_orphan(orphan) is not None:
            ok = False
    prefix = ctx.keys.topic_listing_prefix(tp.topic)
    ids: set[str | None] = set(scope.ids)
    if scope.everything:
        ids |= {s.segment_id.topic_id for s in part.segments.values()} | {None}
    try:
        for info in list(ctx.storage.list(prefix)):  # objects no metadata names (crashed writers)
            folder = ctx.keys.folder_of(tp.topic, info.key)
            if folder is None or folder[1] != tp.partition:
                continue
            if scope.everything:
                ids.add(folder[0])
            if folder[0] in ids:
                ctx.storage.delete(info.key)
        for tid in ids:
            sweep_multipart_uploads(
                ctx.storage, ctx.keys, ctx.keys.partition_prefix(tp.topic, tp.partition, tid), older_than_ms=0
            )
    except StorageError as exc:
        log.warning("could not empty %s: %s", prefix, exc)
        ok = False
    if ok and scope.everything:
        mark(P.DELETE_PARTITION_FINISHED)
    ctx.release(tp)
    return ok
