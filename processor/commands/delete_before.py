"""``processor delete-before --topic T --partition P --offset O``: Kafka's DeleteRecords for remote
storage. Moves the partition's remote log start offset to O (reads below it answer "not in remote
storage" at once), then deletes every segment that ends below O, in Kafka's order."""

from __future__ import annotations

import argparse
import dataclasses
import time

from processor.config import load_settings
from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.lifecycle.retention_policy import RetentionLimits, plan_retention
from processor.segment.object_keys import validate_topic
from processor.wiring.deletion_context import open_context


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "delete-before",
        help="delete a partition's remote records below an offset (like Kafka's DeleteRecords)",
    )
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, required=True)
    p.add_argument("--offset", type=int, required=True, help="the new earliest remote offset")
    p.set_defaults(func=cmd_delete_before)


def cmd_delete_before(args: argparse.Namespace) -> int:
    settings = load_settings()
    tp = TopicPartition(validate_topic(args.topic), args.partition)
    if tp.partition < 0 or args.offset < 0:
        raise ConfigError("--partition and --offset must be >= 0")
    ctx = open_context(settings, tp.topic)
    try:
        epoch = ctx.claim(tp)  # workers leading tp stop writing it until the claim is released
        part = ctx.state(tp)
        highest = max((s.end_offset for s in part.finished()), default=None)
        limit = highest + 1 if highest is not None else part.log_start_offset
        if args.offset > limit:
            raise ConfigError(
                f"--offset {args.offset} is beyond what {tp} has in remote storage "
                f"(the highest offset there + 1 is {limit})"
            )
        # only the offset asked for deletes: a start offset beyond it on the topic may be forged
        plan = plan_retention(
            part.segments.values(),
            RetentionLimits(),
            int(time.time() * 1000),
            min(part.log_start_offset, args.offset),
            requested_start_offset=args.offset,
            served=part.served,
            current_epoch=epoch,
        )
        if plan.new_log_start_offset is not None and plan.new_log_start_offset <= part.log_start_offset:
            plan = dataclasses.replace(plan, new_log_start_offset=None)
        outcome = ctx.deleter.execute(tp, plan, epoch)
    finally:
        ctx.close()
    start = max(part.log_start_offset, args.offset)
    print(f"{tp}: remote log start offset {start}; {len(outcome.deleted)} segments deleted")
    if outcome.failed:
        print(
            f"{len(outcome.failed)} segment deletions failed; queued on {settings.deletion_topic} "
            "for the partition's leader to retry"
        )
        return 1
    return 0
