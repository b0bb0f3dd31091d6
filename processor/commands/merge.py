"""``processor merge --topic T [--partition P] [--dry-run] [--json]``: merge runs of a topic's small
adjacent archived segments into segments near PROCESSOR_MERGE_TARGET_BYTES (processor/rewrite/).

Per partition with something to merge, the command takes the partition with an ADMIN claim (workers
leading it pause their copies until it is released, as for delete-before), first deletes what an
earlier merge superseded and left (a run that was killed), then merges each run: the merged segment
is published like a copy, naming its sources, and the sources are deleted once readers serve it.
Idempotent and resumable: a second run finds nothing to merge. ``--dry-run`` lists the runs only.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from typing import Any

from processor.config import Settings, load_settings
from processor.errors import ConfigError, FencedWriterError, ProcessorError
from processor.kafka.partition import TopicPartition
from processor.rewrite.merge_plan import MergeLimits, MergeRun
from processor.rewrite.merge_runner import MergeReport, merge_partition, planned_runs
from processor.segment.object_keys import validate_topic
from processor.wiring.deletion_context import DeletionContext, open_context
from processor.wiring.rewrite import merge_limits, merge_tools

HELP = "merge a topic's small adjacent archived segments into bigger ones (resumable; --dry-run first)"


def _run_json(run: MergeRun) -> dict[str, Any]:
    return {
        "start_offset": run.start_offset,
        "end_offset": run.end_offset,
        "segments": len(run.segments),
        "bytes": run.size_bytes,
    }


def cmd_merge(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    try:
        limits = merge_limits(settings)
    except ValueError as exc:  # PROCESSOR_MERGE_SMALL_BYTES above PROCESSOR_MERGE_TARGET_BYTES
        raise ConfigError(str(exc)) from exc
    ctx = open_context(settings, topic)
    reports: list[dict[str, Any]] = []
    failed = 0
    try:
        partitions = sorted(ctx.partitions_of(topic), key=lambda tp: tp.partition)
        if args.partition is not None:
            partitions = [tp for tp in partitions if tp.partition == args.partition]
        for tp in partitions:
            report, runs = _merge(ctx, settings, tp, limits, args.dry_run)
            failed += len(report.failed)
            reports.append(
                {
                    **{k: v for k, v in dataclasses.asdict(report).items() if k != "tp"},
                    "partition": tp.partition,
                    "segments_after": report.segments_after,
                    "runs_planned": [_run_json(r) for r in runs],
                }
            )
    finally:
        ctx.close()
    if args.json:
        print(json.dumps({"topic": topic, "dry_run": args.dry_run, "partitions": reports}))
    else:
        for r in reports:
            planned = r["runs_planned"]
            if args.dry_run:
                merging = sum(p["segments"] for p in planned)
                print(f"{topic}-{r['partition']}: {len(planned)} runs would merge {merging} segments")
            else:
                print(
                    f"{topic}-{r['partition']}: {r['merged_segments']} segments merged into {r['runs']} "
                    f"({r['segments_before']} -> {r['segments_after']} served)"
                )
            for problem in r["failed"]:
                print(f"  failed: {problem}")
    if failed:
        raise ProcessorError(f"{failed} run(s) or deletion(s) failed; run the command again")
    return 0


def _merge(
    ctx: DeletionContext, settings: Settings, tp: TopicPartition, limits: MergeLimits, dry_run: bool
) -> tuple[MergeReport, list[MergeRun]]:
    now = int(time.time() * 1000)
    state = ctx.state(tp)
    runs = planned_runs(state, limits, now)
    if dry_run or (not runs and not state.rewritten()):
        return MergeReport(tp, segments_before=len(state.finished())), runs
    epoch = ctx.claim(tp)  # workers leading tp stop writing it until the claim is released
    try:
        topic_ids = {tp.topic: state.lineage.topic_id} if state.lineage.topic_id else {}
        tools = merge_tools(settings, ctx, topic_ids)
        return merge_partition(
            tp, lambda: ctx.state(tp), epoch, limits, now, tools.build, tools.copier, tools.delete
        )
    except FencedWriterError as exc:
        return MergeReport(tp, segments_before=len(state.finished()), failed=[str(exc)]), runs
    finally:
        ctx.release(tp)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("merge", help=HELP)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="only this partition (default: every one)")
    p.add_argument("--dry-run", action="store_true", help="list the runs that would be merged")
    p.add_argument("--json", action="store_true", help="one JSON report on stdout")
    p.set_defaults(func=cmd_merge)
