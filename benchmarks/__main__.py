"""Run the benchmarks: ``python -m benchmarks [--only SECTION,...] [--broker kafka,tansu]``, sections:
offload, memory, reads, gateway, follower, scale, snapshots, spark, restore, rebuild, encryption,
merge, erase, workers, stores (``--storage gcs,azure``: each store's writes, ranged reads and client
CPU per GB on its emulator beside SeaweedFS). With more than one broker, every section but scale and
snapshots (which need none) runs once per broker, each on
a stack of its own, one after the other, in one run."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from argparse import Namespace
from pathlib import Path

from benchmarks.encryption import bench_encryption
from benchmarks.erase import bench_erase
from benchmarks.gateway import bench_gateway
from benchmarks.merge import bench_merge
from benchmarks.offload import EXTRA_WORKER_ENV, bench_memory, bench_offload, load_topic
from benchmarks.reads import bench_follower, bench_read_latency, bench_scale
from benchmarks.rebuild import bench_rebuild
from benchmarks.report import Report
from benchmarks.restore import ROUNDS as RESTORE_ROUNDS
from benchmarks.restore import bench_restore
from benchmarks.scale import bench_snapshots
from benchmarks.spark import RUNS, bench_spark
from benchmarks.stores import bench_stores
from benchmarks.workers import bench_many_partitions
from processor.devstack import stack
from processor.runtime import tune_gc

SECTIONS = (
    "offload",
    "memory",
    "reads",
    "gateway",
    "follower",
    "scale",
    "snapshots",
    "spark",
    "restore",
    "rebuild",
    "encryption",
    "merge",
    "erase",
    "workers",
    "stores",
)
MiB = 1024 * 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--only", default=",".join(SECTIONS), help="comma-separated sections")
    parser.add_argument("--gib", type=float, default=1.0, help="size of each offload topic (default 1 GiB)")
    parser.add_argument(
        "--small-values-gib",
        type=float,
        default=None,
        help="size of the 100-byte-value topic (default: same as --gib)",
    )
    parser.add_argument("--scale-partitions", type=int, default=1000)
    parser.add_argument("--scale-segments", type=int, default=1000, help="finished segments per partition")
    parser.add_argument(
        "--snapshot-partitions", type=int, default=2_000, help="partitions of the snapshots section"
    )
    parser.add_argument(
        "--snapshot-segments",
        type=int,
        default=100,
        help="segments per partition of the snapshots section (10,000 x 1,000: the 10 M-segment run)",
    )
    parser.add_argument(
        "--worker-partitions", type=int, default=2_000, help="quiet partitions one worker leads (workers)"
    )
    parser.add_argument("--reads", type=int, default=200, help="random remote reads in the reads section")
    parser.add_argument("--follower-records", type=int, default=200_000, help="metadata records applied")
    parser.add_argument(
        "--restore-records", type=int, default=1_000_000, help="records archived and restored"
    )
    parser.add_argument("--rebuild-segments", type=int, default=10_000, help="segments the rebuild reads")
    parser.add_argument("--merge-segments", type=int, default=1000, help="small segments merged")
    parser.add_argument(
        "--key-filters",
        action="store_true",
        help="every worker run with an erasure secret (key filters built at copy time), to compare "
        "offloads with the code before filters",
    )
    parser.add_argument(
        "--erase-gib",
        type=float,
        default=0.25,
        help="size of the 100-byte-value topic the erase section offloads",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="one configuration per section: the offload section skips its 100 B and compressed runs, "
        "the memory section its 256 MiB run, the encryption and restore sections their second round "
        "(what the test suite's smoke test runs: every section's code, not every figure)",
    )
    parser.add_argument(
        "--storage",
        default="gcs,azure",
        help="stores section: the emulators measured beside SeaweedFS, comma-separated: gcs, azure "
        "(emulator figures, not cloud figures)",
    )
    parser.add_argument("--out", default="bench-results.json")
    parser.add_argument(
        "--stack",
        metavar="DIR",
        help="use the stack `processor dev up --dir DIR` runs (left running) instead of starting one",
    )
    parser.add_argument(
        "--broker",
        default=None,
        help="comma-separated brokers of the stacks to run on, in order: kafka, tansu (default: the local "
        "stack's, Apache Kafka where Java and Maven are installed; with --stack, that stack's)",
    )
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    unknown = only - set(SECTIONS)
    if unknown:
        parser.error(f"unknown sections: {', '.join(sorted(unknown))}")
    attached = stack.load(args.stack) if args.stack is not None else None
    if args.stack is not None and (attached is None or not stack.status(args.stack).get("running")):
        parser.error(f"no stack runs from {args.stack} (start one: processor dev up --dir {args.stack})")
    brokers = (
        args.broker.split(",") if args.broker else [attached.broker if attached else stack.default_broker()]
    )
    stores = [s for s in args.storage.split(",") if s]
    if set(stores) - {"gcs", "azure"}:
        parser.error(f"--storage {args.storage}: choose among gcs, azure")
    args.storage = stores
    if set(brokers) - set(stack.BROKERS) or len(set(brokers)) != len(brokers):
        parser.error(f"--broker {args.broker}: name each of {', '.join(stack.BROKERS)} at most once")
    if attached is not None and brokers != [attached.broker]:
        parser.error(f"--broker {args.broker}: the stack of {args.stack} runs {attached.broker} only")

    if args.key_filters:
        EXTRA_WORKER_ENV["PROCESSOR_ERASURE_SECRET"] = "bench erasure secret, not a real one"
    tune_gc()  # as the worker and the CLI do
    workdir = Path(tempfile.mkdtemp(prefix="processor-bench-"))
    report = Report()
    t0 = time.perf_counter()
    try:
        for broker in brokers if only - {"scale", "snapshots"} else []:
            report.broker = broker
            if attached is not None:
                run_sections(report, attached, workdir, args, only)
                continue
            print(f"[stack] starting the local stack on {broker} ...", flush=True)
            stack_dir = workdir / f"stack-{broker}"
            info = stack.start(stack_dir, broker=broker)
            try:
                run_sections(report, info, workdir, args, only)
            finally:
                stack.stop(stack_dir)
        report.broker = ""
        if "scale" in only:
            bench_scale(report, workdir, args.scale_partitions, args.scale_segments)
        if "snapshots" in only:
            bench_snapshots(report, workdir, args.snapshot_partitions, args.snapshot_segments)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        report.write(Path(args.out))  # what was measured, even when a section failed
    print(f"\n{report.table()}\n\n(all sections took {time.perf_counter() - t0:.0f} s)")
    print(f"figures written to {args.out}")
    missed = [f for f in report.figures if f.met is False]
    return 1 if missed and os.environ.get("BENCH_STRICT") else 0


def run_sections(
    report: Report, info: stack.StackInfo, workdir: Path, args: Namespace, only: set[str]
) -> None:
    """Every selected section that needs a stack, on ``info``'s."""
    os.environ.update({k: v for k, v in info.env().items() if k.startswith("AWS_")})
    big = None
    if only & {"offload", "memory", "reads", "gateway", "spark"}:
        big = bench_offload(report, info, workdir, 1024, int(args.gib * 1024 * MiB))
        if "offload" in only and not args.smoke:
            small_gib = args.small_values_gib if args.small_values_gib is not None else args.gib
            bench_offload(report, info, workdir, 100, int(small_gib * 1024 * MiB))
            bench_offload(report, info, workdir, 1024, int(args.gib * 1024 * MiB), compression="zstd")
            bench_offload(report, info, workdir, 1024, int(args.gib * 1024 * MiB), archive="zstd")
        if "memory" in only:
            bench_memory(report, info, workdir, big, smoke=args.smoke)
        if "reads" in only:
            bench_read_latency(report, info, workdir, big, reads=args.reads)
        if "gateway" in only:
            bench_gateway(report, info, workdir, big, reads=args.reads, rounds=1 if args.smoke else 3)
            if not args.smoke:
                small_gib = args.small_values_gib if args.small_values_gib is not None else args.gib
                small = load_topic(info, "bench-gateway-100b", 100, int(small_gib * 1024 * MiB))
                bench_gateway(report, info, workdir, small, reads=args.reads, rounds=3)
        if "spark" in only:
            bench_spark(report, info, workdir, big, runs=1 if args.smoke else RUNS)
    if "encryption" in only:
        # the 1 KiB topic the sections above loaded, or (run on its own) one of the same size
        total = int(args.gib * 1024 * MiB)
        bench_encryption(report, info, workdir, big, total, reads=args.reads, smoke=args.smoke)
    if "follower" in only:
        bench_follower(report, info, workdir, records=args.follower_records)
    if "restore" in only:
        restore_rounds = 1 if args.smoke else RESTORE_ROUNDS
        bench_restore(report, info, workdir, records=args.restore_records, rounds=restore_rounds)
    if "rebuild" in only:
        bench_rebuild(report, info, workdir, segments=args.rebuild_segments)
    if "merge" in only:
        bench_merge(report, info, workdir, segments=50 if args.smoke else args.merge_segments)
    if "erase" in only:
        bench_erase(report, info, workdir, int(args.erase_gib * 1024 * MiB))
    if "stores" in only:
        bench_stores(
            report,
            info,
            workdir,
            args.storage,
            objects=2 if args.smoke else 8,
            object_mib=8 if args.smoke else 32,
            reads=20 if args.smoke else 200,
        )
    if "workers" in only:
        # the smoke run: one worker on a few partitions (the second worker and its failover take
        # minutes: `make bench` runs them)
        partitions = 20 if args.smoke else args.worker_partitions
        bench_many_partitions(
            report, info, workdir, partitions, idle_s=5 if args.smoke else 180, second_worker=not args.smoke
        )


if __name__ == "__main__":
    sys.exit(main())
