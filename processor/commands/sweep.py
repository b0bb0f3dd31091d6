"""``processor sweep --topic T [--partition P ...] [--older-than-ms N] [--dry-run] [--json]``: delete
archived objects that no metadata record names, with the proof the rules ask for
(processor/metadata/deletion_proof.py), as an operator's step.

Workers sweep only what their own claim wrote. What else is unreferenced (a writer that lost its
claim and uploaded after its attempt was cleaned up, a crash between an upload and its record) is
left to this command: only in each partition's folder of the live topic id, never a manifest nor an
object whose segment has a manifest, only objects older than ``--older-than-ms`` (default 7 days) by
the storage's own clock (a probe object's LastModified, not this machine's clock). The listing is
taken before the metadata is read to its end, so a copy that could still finish is named by a
record the view holds. ``--dry-run`` lists what would go and deletes nothing. Exit codes: 0 done,
2 bad input or the live topic id cannot be read, 3 Kafka or S3 unreachable.
"""

from __future__ import annotations

import argparse
import json
import logging

from processor.commands.delete_topic import read_live_topic
from processor.config import load_settings
from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.lifecycle.sweep import UNREFERENCED_MIN_AGE_MS, storage_now_ms
from processor.metadata.codec import metadata_partition_for
from processor.metadata.deletion_proof import plan_sweep
from processor.segment.object_keys import validate_topic
from processor.wiring.deletion_context import open_context

log = logging.getLogger(__name__)

DEFAULT_GRACE_MS = 7 * 24 * 3600 * 1000
CAUGHT_UP_TIMEOUT_S = 60.0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "sweep", help="delete archived objects no metadata record names (with proof; --dry-run first)"
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, action="append", help="only these partitions (repeatable)")
    p.add_argument(
        "--older-than-ms",
        type=int,
        default=DEFAULT_GRACE_MS,
        help=f"only objects at least this old by the storage's clock (default {DEFAULT_GRACE_MS}, 7 days)",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would be deleted, delete nothing")
    p.add_argument("--json", action="store_true", help="one JSON document on stdout")
    p.set_defaults(func=cmd_sweep)


def cmd_sweep(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    if args.older_than_ms < 0:
        raise ConfigError("--older-than-ms must be >= 0")
    if args.older_than_ms < UNREFERENCED_MIN_AGE_MS:
        log.warning(
            "--older-than-ms %d is below %d: objects of uploads that are still in progress are young; "
            "the listing-before-metadata order still keeps them, but no margin is left",
            args.older_than_ms,
            UNREFERENCED_MIN_AGE_MS,
        )
    if args.partition and any(p < 0 for p in args.partition):
        raise ConfigError("--partition must be >= 0")
    ctx = open_context(settings, topic)
    try:
        live = read_live_topic(settings.kafka, topic)
        if live.unreadable is not None or live.topic_id is None:
            why = live.unreadable or "the topic does not exist, or the broker reports no topic ids"
            raise ConfigError(
                f"the live topic id of {topic} is unknown ({why}): nothing swept; "
                "`processor delete-topic` removes a deleted topic's archive"
            )
        partitions = sorted(set(args.partition or ()) or {tp.partition for tp in ctx.partitions_of(topic)})
        now_ms = storage_now_ms(ctx.storage, ctx.keys.prefix)
        report: dict[str, dict[str, list[str]]] = {}
        for p in partitions:
            tp = TopicPartition(topic, p)
            listed = list(ctx.storage.list(ctx.keys.partition_prefix(topic, p, live.topic_id)))
            # the metadata read to its end after the listing (see the module docstring)
            part_no = metadata_partition_for(tp, ctx.metadata_partitions)
            if not ctx.follower.materializer.wait_caught_up([part_no], CAUGHT_UP_TIMEOUT_S):
                raise ConfigError(f"{tp}: the metadata could not be read to its end; nothing swept")
            state = ctx.state(tp)
            state.current_topic_id = live.topic_id
            plan = plan_sweep(listed, state, ctx.keys, now_ms, args.older_than_ms)
            if not args.dry_run:
                for key in plan.delete:
                    ctx.storage.delete(key)
            report[str(tp)] = {
                "deleted" if not args.dry_run else "would_delete": plan.delete,
                "kept": plan.kept,
            }
    finally:
        ctx.close()
    if args.json:
        print(
            json.dumps(
                {"topic": topic, "topic_id": live.topic_id, "dry_run": args.dry_run, "partitions": report}
            )
        )
        return 0
    verb = "would delete" if args.dry_run else "deleted"
    for tp_name, found in report.items():
        for key in next(iter(found.values())):
            print(f"{tp_name}: {verb} {key}")
        for key in found["kept"]:
            print(f"{tp_name}: kept {key} (a manifest: acknowledged data the metadata does not name)")
    total = sum(len(next(iter(f.values()))) for f in report.values())
    kept = sum(len(f["kept"]) for f in report.values())
    print(f"{topic}: {verb} {total} unreferenced objects in {len(report)} partitions; {kept} kept")
    return 0
