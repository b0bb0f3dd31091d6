"""``processor snapshot [--partition P ...] [--keep N] [--json]``: write a snapshot of the folded
metadata of each metadata partition to the bucket now (workers write them every
PROCESSOR_SNAPSHOT_INTERVAL_MS). A throwaway follower reads the metadata (from the newest valid
snapshot and the topic's tail), then each partition's state is written and older snapshots beyond
PROCESSOR_SNAPSHOTS_KEPT are deleted. Followers, gateways, CLI calls and Spark jobs whose cache never
read a partition start from its newest snapshot instead of the topic's first record."""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from processor.config import load_settings
from processor.errors import ConfigError
from processor.wiring.follower import build_follower
from processor.wiring.startup import check_shared


def cmd_snapshot(args: argparse.Namespace) -> int:
    settings = load_settings()
    started = check_shared(settings)
    parts = started.metadata_partitions
    wanted = sorted(set(args.partition)) if args.partition else list(range(parts))
    bad = [p for p in wanted if not 0 <= p < parts]
    if bad:
        raise ConfigError(f"--partition {bad[0]}: the metadata topic has partitions 0..{parts - 1}")
    keep = args.keep if args.keep is not None else settings.snapshots_kept
    if keep < 1:
        raise ConfigError(f"--keep {keep}: at least the snapshot just written is kept")
    scoped = settings.model_copy(update={"follow_metadata_partitions": tuple(wanted), "follow_topics": ()})
    try:
        with tempfile.TemporaryDirectory(prefix="processor-snapshot-") as cache_dir:
            follower = build_follower(scoped, parts, cache_dir=Path(cache_dir), storage=started.storage)
            try:
                follower.materializer.catch_up()
                written = follower.write_snapshots(wanted, keep)
            finally:
                follower.close()
    finally:
        started.storage.close()
    missing = sorted(set(wanted) - {w.partition for w in written})
    for w in written:
        if args.json:
            print(json.dumps({**w.__dict__, "seconds": round(w.seconds, 3)}))
        else:
            print(
                f"metadata partition {w.partition}: {w.entries} entries, {w.size} bytes, the topic from "
                f"offset {w.next_offset} ({w.seconds:.2f} s; {w.pruned} older deleted): {w.key}"
            )
    for p in missing:
        message = f"metadata partition {p}: no snapshot (no record yet, or its last one was not readable)"
        print(json.dumps({"partition": p, "skipped": message}) if args.json else message)
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    snap = sub.add_parser(
        "snapshot",
        help="write a snapshot of the folded metadata to the bucket now (new followers start from it)",
    )
    snap.add_argument(
        "--partition", type=int, action="append", help="a metadata partition (repeatable; default: all)"
    )
    snap.add_argument(
        "--keep", type=int, help="snapshots kept per partition (default PROCESSOR_SNAPSHOTS_KEPT)"
    )
    snap.add_argument("--json", action="store_true", help="one JSON object per partition")
    snap.set_defaults(func=cmd_snapshot)
