"""``processor merge --topic T [--partition P] [--dry-run] [--json]``: merge runs of a topic's small
adjacent archived segments into segments near PROCESSOR_MERGE_TARGET_BYTES (processor/rewrite/).

Per partition with something to merge, the command takes the partition with an ADMIN claim (workers
leading it pause their copies until it is released, as for delete-before), first deletes what an
earlier merge superseded and left (a run that was killed), then merges each run: the merged segment
is published like a copy, naming its sources, and the sources are deleted once readers serve it.
Idempotent and resumable: a second run finds nothing to merge. ``--dry-run`` lists the runs only.
Each partition's report says why the segments in no run stay as they are (too young for
PROCESSOR_MERGE_MIN_AGE_MS, big enough, alone, a format or transactions that are never merged) and
what setting would change it: on a fresh archive every segment is younger than the minimum age.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from typing import Any

from processor.config import Settings, load_settings
from processor.errors import ConfigError, ProcessorError
from processor.kafka.partition import TopicPartition
from processor.rewrite.merge_passes import merge_claimed
from processor.rewrite.merge_plan import LeftAlone, MergeLimits, MergeRun, left_alone
from processor.rewrite.merge_runner import MergeReport, merge_candidates, planned_runs
from processor.segment.object_keys import validate_topic
from processor.units import format_duration_ms, format_size
from processor.wiring.deletion_context import DeletionContext, open_context
from processor.wiring.rewrite import merge_limits, merge_tools

log = logging.getLogger(__name__)

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
            report, runs, left, claim = _merge(ctx, settings, tp, limits, args.dry_run)
            failed += len(report.failed)
            reports.append(
                {
                    **{k: v for k, v in dataclasses.asdict(report).items() if k != "tp"},
                    "partition": tp.partition,
                    "segments_after": report.segments_after,
                    "runs_planned": [_run_json(r) for r in runs],
                    "left_alone": dataclasses.asdict(left),
                    "operator_claim": claim,
                }
            )
    finally:
        ctx.close()
    if args.json:
        print(json.dumps({"topic": topic, "dry_run": args.dry_run, "partitions": reports}))
    else:
        for line in report_lines(topic, reports, limits, args.dry_run):
            print(line)
    if failed:
        raise ProcessorError(f"{failed} run(s) or deletion(s) failed; run the command again")
    return 0


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _rough(ms: int) -> str:
    """A duration to the unit a person reads it in: ``40 s``, ``12 min``, ``3 h``, ``2 d``."""
    for unit, factor in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000)):
        if ms >= factor:
            return f"{ms // factor} {unit}"
    return f"{ms // 1000} s"


def why_left_alone(left: LeftAlone, limits: MergeLimits) -> list[str]:
    """One line per reason segments stay as they are, with the setting that decides it."""
    lines = []
    if left.young:
        wait = max(0, limits.min_age_ms - (left.oldest_young_age_ms or 0))
        which = "it is" if left.young == 1 else "the oldest is"
        lines.append(
            f"{_plural(left.young, 'segment')} younger than PROCESSOR_MERGE_MIN_AGE_MS "
            f"({format_duration_ms(limits.min_age_ms)}; {which} old enough in {_rough(wait)}): "
            "PROCESSOR_MERGE_MIN_AGE_MS=0 merges them now"
        )
    if left.single:
        lines.append(
            f"{_plural(left.single, 'segment')} without a small adjacent neighbour to merge with "
            f"(a run is two or more adjacent segments, together at most PROCESSOR_MERGE_TARGET_BYTES, "
            f"{format_size(limits.target_bytes)})"
        )
    if left.big:
        lines.append(
            f"{_plural(left.big, 'segment')} at least PROCESSOR_MERGE_SMALL_BYTES "
            f"({format_size(limits.small_bytes)}): big enough already"
        )
    if left.other_format:
        lines.append(
            f"{_plural(left.other_format, 'segment')} of block format 1 (written by earlier versions): "
            "never merged"
        )
    if left.transactional:
        lines.append(
            f"{_plural(left.transactional, 'segment')} with aborted transactions indexed: never merged"
        )
    return lines


def report_lines(topic: str, reports: list[dict[str, Any]], limits: MergeLimits, dry_run: bool) -> list[str]:
    """The text report: a line per partition, what failed, and why segments were left alone."""
    if not reports:
        return [f"{topic}: no archived segment, nothing to merge"]
    lines = []
    for r in reports:
        planned = r["runs_planned"]
        name = f"{topic}-{r['partition']}"
        if dry_run and planned:
            merging = sum(p["segments"] for p in planned)
            lines.append(f"{name}: {_plural(len(planned), 'run')} would merge {_plural(merging, 'segment')}")
        elif dry_run or not (r["runs"] or r["failed"]):
            verb = "would merge" if dry_run else "merged"
            lines.append(f"{name}: nothing {verb} ({_plural(r['segments_before'], 'segment')} served)")
        else:
            lines.append(
                f"{name}: {_plural(r['merged_segments'], 'segment')} merged into {r['runs']} "
                f"({r['segments_before']} -> {r['segments_after']} served)"
            )
        if r["operator_claim"] is not None:
            lines.append(
                f"  under operator claim {r['operator_claim']}: taken from the worker leading it, "
                "handed back when done"
            )
        if r["leftovers_deleted"]:
            lines.append(f"  {_plural(r['leftovers_deleted'], 'segment')} an earlier merge replaced: deleted")
        for problem in r["failed"]:
            lines.append(f"  failed: {problem}")
        for reason in why_left_alone(LeftAlone(**r["left_alone"]), limits):
            lines.append(f"  left as they are: {reason}")
    return lines


def _merge(
    ctx: DeletionContext, settings: Settings, tp: TopicPartition, limits: MergeLimits, dry_run: bool
) -> tuple[MergeReport, list[MergeRun], LeftAlone, int | None]:
    """The partition's report, the runs planned, why the rest stays, the operator claim taken."""
    now = int(time.time() * 1000)
    state = ctx.state(tp)
    runs = planned_runs(state, limits, now)
    left = left_alone(merge_candidates(state), runs, limits, now)
    if dry_run or (not runs and not state.rewritten()):
        return MergeReport(tp, segments_before=len(state.finished())), runs, left, None
    epoch = ctx.claim(tp)  # workers leading tp stop writing it until the claim is released
    log.info(
        "%s: taken from the worker leading it with an operator claim (epoch %d) for this merge; "
        "handed back when it is done",
        tp,
        epoch,
    )
    try:
        topic_ids = {tp.topic: state.lineage.topic_id} if state.lineage.topic_id else {}
        tools = merge_tools(settings, ctx, topic_ids)
        report, merged, fenced = merge_claimed(tp, lambda: ctx.state(tp), epoch, limits, now, tools)
        return report, runs if fenced else merged, left, epoch
    finally:
        ctx.release(tp)
        log.info("%s: operator claim %d released: the worker Faust assigns it claims it again", tp, epoch)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("merge", help=HELP)
    p.add_argument("--topic", required=True)
    p.add_argument("--partition", type=int, help="only this partition (default: every one)")
    p.add_argument("--dry-run", action="store_true", help="list the runs that would be merged")
    p.add_argument("--json", action="store_true", help="one JSON report on stdout")
    p.set_defaults(func=cmd_merge)
