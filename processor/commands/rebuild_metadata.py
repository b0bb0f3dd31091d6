"""``processor rebuild-metadata [--to-topic NAME] [--dry-run] [--json]``: the metadata topic rebuilt
from the bucket alone.

It lists the configured bucket prefix (its folders in parallel), reads every segment's manifest
(in parallel, one GET each), a source partition's folders at a time (memory bounded by the largest
partition, not the bucket), decides through the metadata fold what is served
(processor/rebuild/resolve.py) and publishes it to the metadata topic (created when missing;
``--to-topic`` for another): per partition a claim, the served
segments' COPY_SEGMENT_FINISHED records under its epoch, a release. Then it folds what it published
(a throwaway follower on disk: from snapshots where the topic has them, then the topic) and checks
that readers serve exactly the planned segments. Followers rebuild their caches from the
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
from dataclasses import dataclass, field
from typing import Any

from processor.commands.progress import progress
from processor.config import Settings, load_settings
from processor.errors import ServiceUnavailableError
from processor.kafka.admin import check_broker, topic_ids
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for
from processor.metadata.topic_io import ensure_metadata_topic
from processor.rebuild.inventory import Inventory
from processor.rebuild.manifests import READ_THREADS, Problem
from processor.rebuild.publish import Publisher
from processor.rebuild.resolve import PartitionRebuild
from processor.rebuild.stream import (
    GroupRead,
    PartitionSummary,
    ServedDigest,
    candidate_topics,
    list_groups,
    plan_groups,
    topic_ids_from_folders,
)
from processor.segment.object_keys import ObjectKeyFactory, validate_topic
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.read_side import scratch_follower
from processor.wiring.storage import build_storage

log = logging.getLogger(__name__)

SHOWN = 20  # inconsistencies listed one by one in text output (all of them in --json)


BATCH_SEGMENTS = 5_000  # segments planned before a batch is published (memory: ~3 KiB each held)


@dataclass
class RebuildReport:
    metadata_topic: str
    dry_run: bool
    objects_listed: int = 0
    partitions: dict[TopicPartition, PartitionSummary] = field(default_factory=dict)
    inventory: Inventory = field(default_factory=Inventory)  # problems only: its complete list stays empty
    bad_manifests: list[Problem] = field(default_factory=list)
    claims: dict[TopicPartition, int] = field(default_factory=dict)
    mismatches: list[str] = field(default_factory=list)  # published vs planned, after folding
    seconds: float = 0.0

    @property
    def segments(self) -> int:
        return sum(p.segments for p in self.partitions.values())

    @property
    def inconsistent(self) -> bool:
        return bool(
            self.inventory.without_manifest
            or self.inventory.manifest_without_objects
            or self.bad_manifests
            or any(p.not_served for p in self.partitions.values())
        )

    def take(self, read: GroupRead, plan: dict[TopicPartition, PartitionRebuild]) -> None:
        """Keep what the report says of one group read and planned (not its segments)."""
        self.inventory.without_manifest += read.inventory.without_manifest
        self.inventory.manifest_without_objects += read.inventory.manifest_without_objects
        self.inventory.other_objects += read.inventory.other_objects
        self.bad_manifests += read.problems
        for tp, part in plan.items():
            self.partitions[tp] = PartitionSummary.of(part)

    def to_json(self) -> dict[str, Any]:
        parts = sorted(self.partitions.items())
        return {
            "metadata_topic": self.metadata_topic,
            "dry_run": self.dry_run,
            "objects_listed": self.objects_listed,
            "segments": self.segments,
            "partitions": [
                {
                    "topic": tp.topic,
                    "partition": tp.partition,
                    "topic_id": p.topic_id,
                    "segments": p.segments,
                    # sources a served rewrite replaces: published superseded, for the owner to delete
                    "superseded": p.superseded,
                    "start_offset": p.start_offset,
                    "end_offset": p.end_offset,
                    "claim_epoch": self.claims.get(tp),
                }
                for tp, p in parts
            ],
            "not_served": [{"key": key, "reason": why} for _tp, p in parts for key, why in p.not_served],
            "objects_without_manifest": sorted(o.data_key for o in self.inventory.without_manifest),
            "manifests_without_objects": sorted(
                o.manifest_key for o in self.inventory.manifest_without_objects
            ),
            "bad_manifests": [
                {"key": b.key, "problem": b.what} for b in sorted(self.bad_manifests, key=lambda b: b.key)
            ],
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


class _Batches:
    """Plans gathered until ``BATCH_SEGMENTS`` segments, then published (nothing, in a dry run)."""

    def __init__(self, publisher: Publisher | None) -> None:
        self.publisher = publisher
        self.plan: dict[TopicPartition, PartitionRebuild] = {}
        self.segments = 0

    def add(self, plan: dict[TopicPartition, PartitionRebuild]) -> None:
        if self.publisher is None:
            return
        self.plan.update(plan)
        self.segments += sum(len(p.published) for p in plan.values())
        if self.segments >= BATCH_SEGMENTS:
            self.flush()

    def flush(self) -> None:
        if self.publisher is not None and self.plan:
            self.publisher.publish(self.plan)
        self.plan, self.segments = {}, 0


def rebuild(settings: Settings, to_topic: str, dry_run: bool) -> RebuildReport:
    """List, read, plan and publish a source partition at a time (processor/rebuild/stream.py): what
    is held at once is one partition's listing and manifests, a batch of planned records and a
    summary a partition. A topic the broker does not know (deleted, or a dry run without a broker)
    takes the topic id of its newest segment anywhere in the bucket: the one its folders carry when
    they carry one, else its partitions are read once for that and planned in a second read."""
    started = time.monotonic()
    report = RebuildReport(to_topic, dry_run)
    # enough S3 connections for the parallel manifest reads
    storage = build_storage(settings.model_copy(update={"s3_upload_concurrency": READ_THREADS}))
    try:
        keys = ObjectKeyFactory(settings.s3_prefix)
        root = f"{keys.prefix}/" if keys.prefix else ""
        groups = list_groups(storage, root)
        candidates = {
            topic
            for group in groups
            for folder in group.folders
            for topic in candidate_topics(folder[len(root) :].split("/")[0])
        }
        for group in groups:  # a store listed once: the topics of its keys
            for info in group.listed or ():
                candidates.update(candidate_topics(info.key[len(root) :].split("/")[0]))
        # a topic the broker lacks (deleted; a dry run without a broker) whose folders carry one
        # topic id is of that id; only one with several is read twice (its newest segment decides)
        broker_ids: dict[str, str | None] = {
            **topic_ids_from_folders(root, groups),
            **_broker_topic_ids(settings, sorted(candidates), required=not dry_run),
        }
        partitions = 0
        publisher = None
        if not dry_run:
            partitions = ensure_metadata_topic(
                settings.kafka,
                to_topic,
                settings.metadata_partitions,
                settings.metadata_replication_factor,
            )
            publisher = Publisher(settings.kafka, to_topic, partitions)
        batches = _Batches(publisher)
        with progress("rebuilding partition folders", len(groups)) as bar:
            planned = plan_groups(storage, keys, groups, broker_ids, int(time.time() * 1000), bar)
            for read, plan in planned:
                report.objects_listed += read.objects_listed
                report.take(read, plan)
                batches.add(plan)
        batches.flush()
        if publisher is not None:
            report.claims = publisher.epochs
        if not dry_run:
            report.mismatches = _check_published(settings, to_topic, partitions, report.partitions, storage)
    finally:
        storage.close()
    report.seconds = round(time.monotonic() - started, 3)
    return report


CHECK_TIMEOUT_S = 3600.0  # folding what was published back: an absolute deadline, sized for millions


def _check_published(
    settings: Settings,
    topic: str,
    partitions: int,
    planned: dict[TopicPartition, PartitionSummary],
    storage: ChunkStorage | None,
) -> list[str]:
    """Fold the published metadata partitions and compare every partition's served set with the
    plan, by their digests. The fold is a throwaway follower's (processor/wiring/read_side.py): its
    cache on disk, from the metadata partitions' newest valid snapshots when the topic had any (a
    topic published into again), then the topic; a partition's state is read from it one at a time."""
    wanted = {tp for tp, p in planned.items() if p.segments}
    if not wanted:
        return []
    meta_parts = {metadata_partition_for(tp, partitions) for tp in wanted}
    scoped = settings.model_copy(update={"metadata_topic": topic})
    out: list[str] = []
    with scratch_follower(
        scoped, partitions, meta_parts, {tp.topic for tp in wanted}, storage, CHECK_TIMEOUT_S
    ) as follower:
        for tp in sorted(wanted):
            served = ServedDigest()
            for s in follower.cache.remote_state(tp).finished():
                served.add(s.segment_id.id.bytes)
            if served != planned[tp].served:
                out.append(
                    f"{tp}: readers serve {served.count} segments, {planned[tp].segments} were published"
                )
    return out


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
    for tp, part in sorted(report.partitions.items()):
        if part.segments:
            epoch = "" if tp not in report.claims else f" under claim {report.claims[tp]}"
            offsets = f"{part.start_offset}..{part.end_offset}"
            print(f"{tp}: {verb} {part.segments} segments, offsets {offsets}{epoch}")
        for key, why in part.not_served[:SHOWN]:
            print(f"{tp}: not served ({why}): {key}")
    inv = report.inventory
    for label, keys in (
        ("objects without a manifest", sorted(o.data_key for o in inv.without_manifest)),
        ("manifests without their objects", sorted(o.manifest_key for o in inv.manifest_without_objects)),
        (
            "manifests that do not check out",
            [f"{b.key}: {b.what}" for b in sorted(report.bad_manifests, key=lambda b: b.key)],
        ),
    ):
        if keys:
            print(f"{len(keys)} {label}:")
            for key in keys[:SHOWN]:
                print(f"  {key}")
    for mismatch in report.mismatches:
        print(f"published topic differs from the plan: {mismatch}")
    print(
        f"{verb} {report.segments} segments of {len(report.partitions)} partitions to "
        f"{report.metadata_topic} ({report.objects_listed} objects listed) in {report.seconds:.1f} s"
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
