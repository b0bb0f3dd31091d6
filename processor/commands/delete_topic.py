"""``processor delete-topic --topic T [--topic-id ID | --include-live]``: delete a topic's remote data,
one topic id at a time, and never what it cannot prove is garbage.

A topic deleted and re-created under the same name is a new history with a new topic id (KIP-516);
its objects live in their own folders (``{topic}-{topic_id}/``). What goes depends on what the
broker says about the topic name now (DescribeTopics):

- it cannot say (the lookup keeps failing: a timeout, the connection, authorization): the command
  refuses (exit 2) and deletes nothing, whatever the options;
- the topic does not exist (UNKNOWN_TOPIC_OR_PART): by default every history the metadata knows goes
  (KIP-405's topic deletion: every topic id a segment record or a lineage names, the segments
  without one);
- the topic exists with an id: by default the earlier histories go, the topic ids the metadata
  fold knows for the topic's partitions other than the live one (retired in their lineage, or named
  by a segment record), and the segments written before ids were recorded if the live topic's
  history no longer includes them. A folder found only in the bucket listing (no metadata record
  names its id) is never deleted by default: it is printed, with the ``--topic-id`` to pass;
- the topic exists but the broker reports no topic ids: the live archive cannot be told apart, so
  the default refuses (exit 2).

``--topic-id ID`` deletes that one id only (``legacy`` for the segments without an id; never the
live id, nor ``legacy`` while those segments are part of the live topic's history);
``--include-live`` deletes every history the metadata knows, the live topic's archive too.
A folder found only in the bucket listing (another deployment sharing the bucket and prefix, say) is
deleted only when named with ``--topic-id``, in every mode. It says what it will delete before it
starts.

Each partition is taken for the command with an ADMIN claim (workers leading it stop writing it
until the command releases it; processor/metadata/fold_rules.py). When everything of the partition goes
(the topic is gone, or ``--include-live``), the partition walks KIP-405's partition delete states:
DELETE_PARTITION_MARKED, DELETE_PARTITION_STARTED, then every segment goes (DELETE_SEGMENT_STARTED,
objects, DELETE_SEGMENT_FINISHED; the tombstones once every rejected record of the partition is
neutralised), pending entries of the deletion topic are retried,
objects left under the deleted ids' folders by crashed writers are deleted and their multipart
uploads aborted, and only then DELETE_PARTITION_FINISHED. The states are durable on the metadata
topic, so a run that crashes half way is resumed by running the command again.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass

from processor.config import load_settings
from processor.errors import ConfigError, StorageError, TopicIdUnknownError
from processor.kafka.admin import topic_ids
from processor.kafka.clients import KafkaTarget, new_admin
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_retries import retry_failed
from processor.lifecycle.multipart_sweep import sweep_multipart_uploads
from processor.lifecycle.retention_policy import DeleteReason
from processor.metadata.model import (
    PartitionDeleteState,
    RemoteLogSegmentMetadata,
    RemotePartitionDeleteMetadata,
    SegmentState,
)
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.object_keys import validate_topic, validate_topic_id
from processor.wiring.deletion_context import DeletionContext, open_context

log = logging.getLogger(__name__)
P = PartitionDeleteState
LEGACY = "legacy"  # --topic-id for segments written before topic ids were recorded


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "delete-topic",
        help="delete a topic's remote data: by default the earlier topics of that name the metadata "
        "knows (every history once the topic is gone); refuses while the live topic id cannot be read "
        "(resumable)",
        description="By default: when the topic no longer exists, every history of the name; when it "
        "exists, the earlier topic ids the metadata knows for it (folders found only in the bucket are "
        "listed, not deleted). Refuses (exit 2, nothing deleted) when the broker cannot say the live "
        "topic id, and by default when the topic exists without one.",
    )
    p.add_argument("--topic", required=True)
    which = p.add_mutually_exclusive_group()
    which.add_argument(
        "--topic-id",
        help=f"delete only this topic id's history ({LEGACY!r}: segments without one), also one found "
        "only in the bucket; never the live id",
    )
    which.add_argument(
        "--include-live", action="store_true", help="also delete the live topic's archive (everything)"
    )
    p.set_defaults(func=cmd_delete_topic)


@dataclass(frozen=True, slots=True)
class LiveTopic:
    """What the broker says about the topic name now."""

    exists: bool
    topic_id: str | None = None  # None while it exists: the broker reports no topic ids
    unreadable: str | None = None  # DescribeTopics kept failing (why): nothing is known


def read_live_topic(kafka: KafkaTarget, topic: str) -> LiveTopic:
    """Ask the broker (retried inside topic_ids); a failure is a LiveTopic that is ``unreadable``."""
    absent: set[str] = set()
    try:
        ids = topic_ids(new_admin(kafka, "processor-admin"), [topic], absent=absent)
    except TopicIdUnknownError as exc:
        return LiveTopic(exists=True, unreadable=str(exc))
    return LiveTopic(topic not in absent, ids.get(topic))


class Scope:
    """Which histories of the topic go: a set of topic ids (None standing for the legacy folder)."""

    def __init__(
        self, ids: set[str | None], everything: bool, listed_only: set[str | None] | None = None
    ) -> None:
        self.ids = ids
        self.everything = everything  # the partition as a whole goes (delete states, every folder)
        self.listed_only = listed_only or set()  # folders no metadata names: left, and printed

    def covers(self, segment: RemoteLogSegmentMetadata) -> bool:
        return self.everything or segment.segment_id.topic_id in self.ids


def choose_scope(
    args: argparse.Namespace,
    live: LiveTopic,
    listed: set[str | None],
    known: set[str | None],
    legacy_live: bool,
) -> Scope:
    """The histories to delete (see the module docstring). Pure. ``listed``: the topic ids of the
    folders in the bucket listing; ``known``: the ids the metadata fold knows for the topic (segment
    records, retired in a lineage; None when the legacy segments are known or retired);
    ``legacy_live``: the segments without an id belong to the live topic's history. Raises
    ConfigError when it refuses."""
    if live.unreadable is not None:
        raise ConfigError(
            f"the live topic id of {args.topic} could not be read, so what is garbage cannot be told: "
            f"nothing deleted; run the command again once the broker answers ({live.unreadable})"
        )
    if args.include_live:
        return Scope(set(known), True, set(listed) - set(known))
    if args.topic_id is not None:
        wanted: str | None = None if args.topic_id == LEGACY else validate_topic_id(args.topic_id)
        if wanted is not None and wanted == live.topic_id:
            raise ConfigError(f"--topic-id {wanted} is the live topic's id: to delete it, use --include-live")
        if wanted is None and legacy_live:
            raise ConfigError(
                f"--topic-id {LEGACY}: the segments without a topic id are part of the live topic's "
                "history (written before topic ids were recorded): to delete them, use --include-live"
            )
        return Scope({wanted}, False)
    if not live.exists:  # KIP-405's topic deletion: the broker says the topic is gone
        return Scope(set(known), True, set(listed) - set(known))
    if live.topic_id is None:
        raise ConfigError(
            f"topic {args.topic} exists but the broker reports no topic id, so the live topic's "
            "archive cannot be told apart from earlier ones: nothing deleted; pass --topic-id ID "
            f"(or {LEGACY!r}) to delete one history, or --include-live to delete everything"
        )
    live_ids: set[str | None] = {live.topic_id, None} if legacy_live else {live.topic_id}
    ids = set(known) - live_ids
    return Scope(ids, False, set(listed) - ids - live_ids)


def _describe(scope: Scope) -> str:
    if scope.everything:
        return "everything (every topic id and the segments without one)"
    if not scope.ids:
        return "nothing (the metadata knows no earlier history of the topic)"
    return ", ".join(
        sorted("segments without a topic id" if i is None else f"topic id {i}" for i in scope.ids)
    )


def _live_line(live: LiveTopic) -> str:
    if live.topic_id is not None:
        return f"live topic id {live.topic_id}"
    if live.exists:
        return "live topic id (none: the broker reports no topic ids)"
    return "live topic id (none: the topic does not exist)"


def cmd_delete_topic(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    ctx: DeletionContext = open_context(settings, topic)  # fails fast when Kafka or S3 is unreachable
    unfinished: list[int] = []
    try:
        live = read_live_topic(settings.kafka, topic)
        found_keys = [
            ctx.keys.folder_of(topic, info.key)
            for info in ctx.storage.list(ctx.keys.topic_listing_prefix(topic))
        ]
        partitions = sorted(
            {tp.partition for tp in ctx.partitions_of(topic)} | {f[1] for f in found_keys if f is not None}
        )
        states = {p: ctx.state(TopicPartition(topic, p)) for p in partitions}
        listed: set[str | None] = {f[0] for f in found_keys if f is not None}
        known: set[str | None] = {
            s.segment_id.topic_id for st in states.values() for s in st.segments.values()
        }
        for st in states.values():
            known |= set(st.lineage.retired)
            if st.lineage.topic_id is not None:
                known.add(st.lineage.topic_id)
            if st.lineage.legacy_retired and None in listed:  # the lineage retired the legacy folder
                known.add(None)
        legacy_live = live.topic_id is not None and any(
            not st.lineage.legacy_retired and st.lineage.topic_id in (None, live.topic_id)
            for st in states.values()
        )
        scope = choose_scope(args, live, listed, known, legacy_live)
        print(f"{topic}: {_live_line(live)}; deleting {_describe(scope)} in {len(partitions)} partitions")
        for tid in sorted(scope.listed_only, key=lambda i: "" if i is None else i):
            name = LEGACY if tid is None else tid
            print(
                f"{topic}: {'segments without a topic id' if tid is None else f'topic id {tid}'} "
                f"not deleted: found only in the bucket; pass --topic-id {name} to delete"
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
    live = sorted(
        (
            s
            for s in part.segments.values()
            if scope.covers(s) and s.state is not SegmentState.DELETE_SEGMENT_FINISHED
        ),
        key=lambda s: s.start_offset,
    )
    ctx.deleter.forget_manifests(live)  # first: a rebuild never brings back a half-deleted topic
    done = [
        s
        for s in part.segments.values()
        if scope.covers(s) and s.state is SegmentState.DELETE_SEGMENT_FINISHED
    ]
    for segment in live:
        reason = (
            DeleteReason.RETRY
            if segment.state is SegmentState.DELETE_SEGMENT_STARTED
            else DeleteReason.TOPIC_DELETED
        )
        if ctx.deleter.delete_segment(segment, reason, epoch) is not None:
            ok = False
        else:
            done.append(segment)
    pending = [s for s in ctx.deletion_topic.pending({tp}) if scope.covers(s)]
    if retry_failed(ctx.deleter, pending, epoch, part.accepted_state).failed:
        ok = False
    orphans_left = False
    for orphan in part.orphans.values():
        if scope.covers(orphan) and ctx.deleter.delete_orphan(orphan, epoch) is not None:
            ok, orphans_left = False, True
    if not orphans_left:
        # the deleted segments' keys go last, once no rejected record judged against them remains
        for segment in done:
            ctx.deleter.forget(segment)
    prefix = ctx.keys.topic_listing_prefix(tp.topic)
    ids: set[str | None] = set(scope.ids)
    if scope.everything:  # every history the metadata knows; a folder only listed needs --topic-id
        ids |= {s.segment_id.topic_id for s in part.segments.values()}
        ids |= set(part.lineage.retired) | {part.lineage.topic_id}
        ids -= scope.listed_only  # what the command printed it keeps
    try:
        for info in list(ctx.storage.list(prefix)):  # objects no metadata names (crashed writers)
            folder = ctx.keys.folder_of(tp.topic, info.key)
            if folder is None or folder[1] != tp.partition:
                continue
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
