"""``processor restore-groups``: move consumer groups from a source topic to its restored copy.

Each group's committed offsets on the source topic (read from the source cluster, or from a file
exported with ``kafka-consumer-groups.sh --reset-offsets --export``) are translated through the
restore's offset maps (from the progress topic on the target, or from the bucket) and committed on
the target topic: consumers resume with nothing redelivered and nothing skipped. Exit codes: 0 every
position moved, 1 some could not be (printed; nothing is committed for those partitions), 2 bad
input, 3 Kafka or S3 unreachable.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from processor.commands.restore import add_target_arguments, default_restore_id, target_from_args
from processor.config import load_settings
from processor.errors import ConfigError
from processor.kafka.admin import check_broker
from processor.restore.bucket_maps import latest_maps
from processor.restore.group_io import commit_offsets, committed_offsets
from processor.restore.group_offsets import Translation, check_one_to_one, parse_offsets_csv, translate
from processor.restore.offset_map import OffsetMap
from processor.restore.progress_record import validate_restore_id
from processor.restore.target import TargetCluster
from processor.segment.object_keys import validate_topic
from processor.wiring.storage import build_storage


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "restore-groups",
        help="move consumer group offsets from a source topic to its restored copy",
        description="Translate consumer groups' committed offsets on the source topic through the "
        "restore's offset map and commit them on the restored topic.",
    )
    p.add_argument("--group", required=True, action="append", help="a consumer group (repeat for several)")
    p.add_argument("--to-group", help="commit under this group id on the target (one --group only)")
    p.add_argument("--topic", required=True, help="the source topic the group consumed")
    p.add_argument("--to-topic", help="the restored topic (default: the source topic's name)")
    p.add_argument("--restore-id", help="the restore whose offset maps to use (default: SOURCE.TARGET)")
    p.add_argument(
        "--offsets-file",
        help="read the committed offsets from this CSV (topic,partition,offset or "
        "group,topic,partition,offset) instead of the source cluster",
    )
    p.add_argument(
        "--maps-from",
        choices=["progress", "bucket"],
        default="progress",
        help="offset maps from the progress topic on the target (default) or from the bucket",
    )
    add_target_arguments(p)
    p.add_argument("--dry-run", action="store_true", help="translate and print; commit nothing")
    p.add_argument("--json", action="store_true", help="one JSON object per partition and group")
    p.set_defaults(func=cmd_restore_groups)


def _maps(
    args: argparse.Namespace, target: TargetCluster, topic: str, restore_id: str
) -> dict[int, OffsetMap]:
    if args.maps_from == "progress":
        partitions = target.partition_count(args.progress_topic)
        if not partitions:
            raise ConfigError(
                f"no progress topic {args.progress_topic} on {target.describe()}: nothing restored"
            )
        found = target.committed_progress(args.progress_topic, partitions, restore_id)
        return {p: progress.offset_map for p, progress in found.items()}
    settings = load_settings()
    storage = build_storage(settings)
    try:
        return latest_maps(storage, settings.s3_prefix, topic, target.cluster_id(), restore_id)
    finally:
        storage.close()


def cmd_restore_groups(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    to_topic = validate_topic(args.to_topic or topic)
    groups: list[str] = args.group
    if args.to_group is not None and len(groups) != 1:
        raise ConfigError("--to-group needs exactly one --group")
    target = target_from_args(args, settings.kafka)
    restore_id = validate_restore_id(args.restore_id or default_restore_id(topic, to_topic))
    if args.offsets_file is not None:
        try:
            text = Path(args.offsets_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"--offsets-file {args.offsets_file}: {exc.strerror}") from None
        committed = parse_offsets_csv(text, topic, groups)
    else:
        source_admin = check_broker(settings.kafka)
        committed = {g: committed_offsets(source_admin, settings.kafka.describe(), g, topic) for g in groups}
    maps = _maps(args, target, topic, restore_id)
    if not maps:
        raise ConfigError(
            f"restore {restore_id} has no offset maps: was {topic} restored under another --restore-id?"
        )
    check_one_to_one(maps)
    translations = [t for g in groups for t in translate(g, committed[g], maps)]
    if not args.dry_run:
        target_admin = target.admin()
        for g in groups:
            moved = {
                t.target_partition: t.target_offset
                for t in translations
                if t.group == g
                and t.problem is None
                and t.target_partition is not None
                and t.target_offset is not None
            }
            commit_offsets(target_admin, target.describe(), args.to_group or g, to_topic, moved)
    _print(translations, topic, to_topic, args)
    return 1 if any(t.problem for t in translations) else 0


def _print(translations: list[Translation], topic: str, to_topic: str, args: argparse.Namespace) -> None:
    verb = "would commit" if args.dry_run else "committed"
    for t in translations:
        if args.json:
            print(
                json.dumps(
                    {
                        **asdict(t),
                        "topic": topic,
                        "to_topic": to_topic,
                        "committed": not args.dry_run and t.problem is None,
                    }
                )
            )
        elif t.problem:
            print(f"{t.group} {topic}-{t.source_partition} at {t.source_offset}: NOT moved: {t.problem}")
        else:
            print(
                f"{t.group} {topic}-{t.source_partition} at {t.source_offset} -> "
                f"{to_topic}-{t.target_partition} at {t.target_offset} ({verb})"
            )
    if not translations and not args.json:
        print("no committed offsets found for the group(s) on " + topic)
