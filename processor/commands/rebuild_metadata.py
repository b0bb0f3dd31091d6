"""``processor rebuild-metadata [--to-topic NAME] [--dry-run] [--json]``: the metadata topic rebuilt
from the bucket alone.

It lists the configured bucket prefix (its folders in parallel), reads every segment's manifest
(in parallel, one GET each), decides through the metadata fold what is served
(processor/rebuild/resolve.py) and publishes it to the metadata topic (created when missing;
``--to-topic`` for another): per partition a claim, the served
segments' COPY_SEGMENT_FINISHED records under its epoch, a release. Then it folds what it published
and checks that readers serve exactly the planned segments. Followers rebuild their caches from the
topic as usual.

``--dry-run`` prints what would be published and every inconsistency: objects without a manifest,
manifests without their objects, manifests that do not check out, manifested segments not served.
Exit codes: 0 published (or, for a dry run, nothing inconsistent), 1 inconsistencies in a dry run or
a published topic that does not fold to the plan, 2 bad input, 3 Kafka or S3 unreachable.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from processor import metrics
from processor.commands.progress import progress
from processor.config import Settings, load_settings
from processor.errors import ServiceUnavailableError
from processor.kafka.admin import check_broker, topic_ids
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import ensure_metadata_topic, read_partitions
from processor.rebuild.inventory import Inventory, take_inventory
from processor.rebuild.listing import list_in_parallel
from processor.rebuild.manifests import READ_THREADS, Problem, read_manifests
from processor.rebuild.publish import publish_rebuild
from processor.rebuild.resolve import PartitionRebuild, plan_rebuild
from processor.rebuild.served_index import indexed_fold
from processor.segment.object_keys import ObjectKeyFactory, validate_topic
from processor.wiring.storage import build_storage

log = logging.getLogger(__name__)

SHOWN = 20  # inconsistencies listed one by one in text output (all of them in --json)


@dataclass
class RebuildReport:
    metadata_topic: str
    dry_run: bool
    objects_listed: int = 0
    plan: dict[TopicPartition, PartitionRebuild] = field(default_factory=dict)
    inventory: Inventory = field(default_factory=Inventory)
    bad_manifests: list[Problem] = field(default_factory=list)
    claims: dict[TopicPartition, int] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)  # published vs planned, after folding
    seconds: float = 0.0

    @property
    def inconsistent(self) -> bool:
        return bool(
            self.inventory.without_manifest
            or self.inventory.manifest_without_objects
            or self.bad_manifests
            or any(p.not_served for p in self.plan.values())
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "metadata_topic": self.metadata_topic,
            "dry_run": self.dry_run,
            "objects_listed": self.objects_listed,
            "segments": sum(len(p.served) for p in self.plan.values()),
            "partitions": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "topic_id": p.topic_id,
                    "segments": len(p.served),
                    # sources a served rewrite replaces: published superseded, for the owner to delete
                    "superseded": len(p.superseded),
                    "start_offset": min((s.start_offset for s in p.served), default=None),
                    "end_offset": max((s.end_offset for s in p.served), default=None),
                    "claim_epoch": self.claims.get(tp),
                }
                for tp, p in sorted(self.plan.items())
            ],
            "not_served": [
                {"key": m.segment.data_object_key, "reason": why}
                for p in self.plan.values()
                for m, why in p.not_served
            ],
            "objects_without_manifest": [o.data_key for o in self.inventory.without_manifest],
            "manifests_without_objects": [o.manifest_key for o in self.inventory.manifest_without_objects],
            "bad_manifests": [{"key": b.key, "problem": b.what} for b in self.bad_manifests],
            "mismatches": self.mismatches,
            "seconds": self.seconds,
        }


def _broker_topic_ids(settings: Settings, topics: list[str], required: bool) -> dict[str, str]:
    """The source cluster's topic ids (the current history of a re-created topic); without a
    reachable cluster a dry run goes on with the manifests' own."""
    try:
        admin = check_broker(settings.kafka)
    except ServiceUnavailableError:
        if required:
            raise
        return {}
    return topic_ids(admin, topics)


def rebuild(settings: Settings, to_topic: str, dry_run: bool) -> RebuildReport:
    started = time.monotonic()
    report = RebuildReport(to_topic, dry_run)
    # enough S3 connections for the parallel manifest reads
    storage = build_storage(settings.model_copy(update={"s3_upload_concurrency": READ_THREADS}))
    try:
        keys = ObjectKeyFactory(settings.s3_prefix)
        root = f"{keys.prefix}/" if keys.prefix else ""
        listed = [0]

        def listing() -> Iterator[tuple[str, int]]:
            for info in list_in_parallel(storage, root):
                listed[0] += 1
                yield info.key, info.size

        report.inventory = take_inventory(listing())
        report.objects_listed = listed[0]
        with progress("reading manifests", len(report.inventory.complete)) as bar:
            manifests, report.bad_manifests = read_manifests(
                storage, keys, report.inventory.complete, on_read=bar
            )
    finally:
        storage.close()
    topics = sorted({m.segment.segment_id.topic for m in manifests})
    broker_ids = _broker_topic_ids(settings, topics, required=not dry_run)
    report.plan = plan_rebuild(manifests, broker_ids, int(time.time() * 1000))
    del manifests  # the plan holds what it publishes and what it does not serve
    if not dry_run:
        partitions = ensure_metadata_topic(
            settings.kafka,
            to_topic,
            settings.metadata_partitions,
            settings.metadata_replication_factor,
        )
        report.claims = publish_rebuild(settings.kafka, to_topic, partitions, report.plan)
        report.mismatches = _check_published(settings, to_topic, partitions, report.plan)
    report.seconds = round(time.monotonic() - started, 3)
    return report


def _check_published(
    settings: Settings, topic: str, partitions: int, plan: dict[TopicPartition, PartitionRebuild]
) -> list[str]:
    """Fold the published metadata partitions and compare every partition's served set with the plan
    (the fold of :func:`processor.metadata.topic_io.load_remote_state`, its served segments indexed
    by offset: the rebuild's partitions are large), one metadata partition at a time: the fold of
    one is dropped before the next is read."""
    wanted = {tp for tp, p in plan.items() if p.served}
    by_meta: dict[int, list[TopicPartition]] = {}
    for tp in sorted(wanted):
        by_meta.setdefault(metadata_partition_for(tp, partitions), []).append(tp)
    out: list[tuple[TopicPartition, str]] = []
    for meta_part, tps in sorted(by_meta.items()):
        fold = indexed_fold(frozenset(tp.topic for tp in wanted))
        for msg in read_partitions(settings.kafka, topic, [meta_part]):
            verdict = fold.apply_raw(msg.offset, msg.key, msg.value)
            if not verdict.accepted:
                metrics.METADATA_REJECTED.labels(verdict.reason).inc()
                log.warning("metadata record %d@%d rejected (%s)", msg.partition, msg.offset, verdict.reason)
        for tp in tps:
            served = {s.segment_id.id for s in PartitionRemoteState.of(fold.partition(tp)).finished()}
            planned = {s.segment_id.id for s in plan[tp].served}
            if served != planned:
                out.append((tp, f"{tp}: readers serve {len(served)} segments, {len(planned)} were published"))
    return [line for _tp, line in sorted(out)]


def cmd_rebuild_metadata(args: argparse.Namespace) -> int:
    settings = load_settings()
    to_topic = validate_topic(args.to_topic or settings.metadata_topic)
    report = rebuild(settings, to_topic, args.dry_run)
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        _print(report)
    if report.mismatches:
        return 1
    return 1 if args.dry_run and report.inconsistent else 0


def _print(report: RebuildReport) -> None:
    verb = "would publish" if report.dry_run else "published"
    for tp, part in sorted(report.plan.items()):
        if part.served:
            first, last = part.served[0].start_offset, part.served[-1].end_offset
            epoch = "" if tp not in report.claims else f" under claim {report.claims[tp]}"
            print(f"{tp}: {verb} {len(part.served)} segments, offsets {first}..{last}{epoch}")
        for manifest, why in part.not_served[:SHOWN]:
            print(f"{tp}: not served ({why}): {manifest.segment.data_object_key}")
    inv = report.inventory
    for label, keys in (
        ("objects without a manifest", [o.data_key for o in inv.without_manifest]),
        ("manifests without their objects", [o.manifest_key for o in inv.manifest_without_objects]),
        ("manifests that do not check out", [f"{b.key}: {b.what}" for b in report.bad_manifests]),
    ):
        if keys:
            print(f"{len(keys)} {label}:")
            for key in keys[:SHOWN]:
                print(f"  {key}")
    for mismatch in report.mismatches:
        print(f"published topic differs from the plan: {mismatch}")
    segments = sum(len(p.served) for p in report.plan.values())
    print(
        f"{verb} {segments} segments of {len(report.plan)} partitions to {report.metadata_topic} "
        f"({report.objects_listed} objects listed) in {report.seconds:.1f} s"
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "rebuild-metadata",
        help="rebuild the metadata topic from the bucket's segment manifests",
        description="List the bucket prefix, read every segment manifest, and publish what the metadata "
        "fold serves to the metadata topic (created when missing).",
    )
    p.add_argument("--to-topic", help="publish to this topic instead of PROCESSOR_METADATA_TOPIC")
    p.add_argument(
        "--dry-run", action="store_true", help="print what would be published and every inconsistency"
    )
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.set_defaults(func=cmd_rebuild_metadata)
