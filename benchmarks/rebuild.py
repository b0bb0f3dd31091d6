"""Metadata rebuilt from the bucket: the time ``processor rebuild-metadata`` takes for N segments
(listing by folders in parallel, one manifest GET each in parallel, the fold's verdict, publishing
claims and records, and folding the published topic back to check it), next to a bare boto3 listing
plus GETs of the same manifests in the same run (the S3 work alone). The segments are spread over
at least 10 partitions and at most 1,000 segments a partition, the shape of a bucket of 10,000
partitions of 1,000 segments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.config

from benchmarks.report import Figure, Report
from processor.devstack import stack
from processor.metadata.manifest import SegmentManifest, encode_manifest, manifest_key
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.rebuild.listing import LIST_THREADS
from processor.rebuild.manifests import READ_THREADS
from processor.segment.object_keys import ObjectKeyFactory

PARTITIONS = 10  # at least
SEGMENTS_PER_PARTITION = 1000  # at most
TARGET_SECONDS = 60.0


def _segment(keys: ObjectKeyFactory, topic_id: str, partition: int, n: int) -> RemoteLogSegmentMetadata:
    sid = uuid.uuid4()
    start = n * 1000
    objects = keys.segment("bench-rebuild", partition, start, sid, 1, topic_id)
    return RemoteLogSegmentMetadata(
        segment_id=RemoteLogSegmentId("bench-rebuild", partition, sid, topic_id),
        start_offset=start,
        end_offset=start + 999,
        max_timestamp_ms=1_700_000_000_000 + start,
        event_timestamp_ms=1_700_000_000_000 + start,
        writer_id="bench",
        writer_epoch=1,
        segment_leader_epochs=((0, start),),
        segment_size_in_bytes=16,
        state=SegmentState.COPY_SEGMENT_FINISHED,
        data_object_key=objects.data,
        index_object_key=objects.index,
        segment_format_version=2,
        record_count=1000,
        index_crc32=0,
        index_size_in_bytes=8,
    )


WRITE_THREADS = 32
HERE = Path(__file__).resolve().parents[1]  # this worktree
BASELINE_ENV = "BENCH_REBUILD_BASELINE"  # a worktree of the code to compare with (its own .venv)
PAIRS_ENV = "BENCH_REBUILD_PAIRS"  # runs of each, alternating (default 1)


def _write(client: Any, bucket: str, segment: RemoteLogSegmentMetadata) -> None:
    """The segment's three objects (plain PUTs: the objects are the benchmark's own, written once)."""
    client.put_object(Bucket=bucket, Key=segment.data_object_key, Body=b"d" * segment.segment_size_in_bytes)
    client.put_object(Bucket=bucket, Key=segment.index_object_key, Body=b"i" * segment.index_size_in_bytes)
    body = encode_manifest(SegmentManifest(segment, uuid.uuid4()))
    client.put_object(Bucket=bucket, Key=manifest_key(segment.data_object_key), Body=body)


def _populate(info: stack.StackInfo, prefix: str, segments: int) -> int:
    """Write ``segments`` segments under ``prefix``, a partition's at a time (never all held)."""
    client = boto3.client(
        "s3",
        endpoint_url=info.s3_endpoint_url,
        region_name="us-east-1",
        config=botocore.config.Config(max_pool_connections=WRITE_THREADS),
    )
    keys = ObjectKeyFactory(prefix)
    topic_id = str(uuid.uuid4())
    partitions = max(PARTITIONS, -(-segments // SEGMENTS_PER_PARTITION))
    print(f"[rebuild] writing {segments} segments (data, index, manifest) under {prefix} ...", flush=True)
    t0, written = time.perf_counter(), 0
    with ThreadPoolExecutor(max_workers=WRITE_THREADS) as pool:
        for p in range(partitions):
            made = [_segment(keys, topic_id, p, n) for n in range(p, segments, partitions)]
            list(pool.map(lambda s: _write(client, info.bucket, s), made))
            written += len(made)
            if p % 10 == 9:
                rate = written / (time.perf_counter() - t0)
                print(f"[rebuild] {written} segments written ({rate:.0f}/s)", flush=True)
    return partitions


@dataclass
class _Run:
    wall: float
    cpu: float
    peak_rss_mib: float
    segments: int
    mismatches: list[str]
    load: float


def _run_cli(python: Path, root: Path, env: dict[str, str], topic: str, workdir: Path) -> _Run:
    """``processor rebuild-metadata`` of the worktree ``root`` run by ``python`` in a process of its
    own: its wall time, CPU time and peak RSS (os.wait4's resource usage of that process alone)."""
    load = os.getloadavg()[0]
    out_path, err_path = workdir / f"{topic}.out", workdir / f"{topic}.err"
    with out_path.open("wb") as out, err_path.open("wb") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            [str(python), "-m", "processor", "rebuild-metadata", "--to-topic", topic, "--json"],
            env={**os.environ, **env},
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=root,  # the worktree's own package first on the path
        )
        _pid, status, usage = os.wait4(proc.pid, 0)  # reaped here, with its own resource usage
        wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    proc.returncode = code
    if code != 0:
        raise RuntimeError(f"rebuild-metadata ({python}) exited {code}: {err_path.read_text()[-2000:]}")
    done = json.loads(out_path.read_text())
    return _Run(
        wall,
        usage.ru_utime + usage.ru_stime,
        usage.ru_maxrss / 1024,
        int(done["segments"]),
        list(done["mismatches"]),
        load,
    )


def bench_rebuild(report: Report, info: stack.StackInfo, workdir: Path, segments: int) -> None:
    """The rebuild of ``segments`` segments, each run a process of its own (its CPU time and peak
    RSS measured alone); with ``BENCH_REBUILD_BASELINE`` set to a worktree, that code's rebuild of
    the same bucket too, alternating, ``BENCH_REBUILD_PAIRS`` times."""
    tag = uuid.uuid4().hex[:8]
    prefix = f"bench-rebuild-{tag}"
    env = {
        **{k: v for k, v in info.env().items() if k.startswith(("PROCESSOR_", "AWS_"))},
        "PROCESSOR_S3_PREFIX": prefix,
        "PROCESSOR_S3_REGION": "us-east-1",
        "PROCESSOR_S3_UPLOAD_CONCURRENCY": str(READ_THREADS),
        "PROCESSOR_METADATA_PARTITIONS": "4",
    }
    partitions = _populate(info, prefix, segments)
    baseline_root = os.environ.get(BASELINE_ENV)
    pairs = max(1, int(os.environ.get(PAIRS_ENV, "1")))
    ours: list[_Run] = []
    theirs: list[_Run] = []
    for n in range(pairs):
        ours.append(
            _measured(Path(sys.executable), HERE, env, f"__bench_rebuilt_{tag}_{n}", segments, workdir)
        )
        if baseline_root:
            python = Path(baseline_root) / ".venv" / "bin" / "python"
            theirs.append(
                _measured(
                    python, Path(baseline_root), env, f"__bench_rebuilt_base_{tag}_{n}", segments, workdir
                )
            )
    baseline = _bare_list_and_get(info, prefix)
    best = min(ours, key=lambda r: r.wall)
    per_thousand = best.wall / segments * 1000
    runs = "; ".join(_describe("this code", r) for r in ours)
    if theirs:
        runs += "; " + "; ".join(_describe("baseline", r) for r in theirs)
    report.add(
        Figure(
            "rebuild",
            f"rebuild {segments} segments",
            best.wall,
            "s",
            "bare list + GETs",
            baseline,
            baseline / best.wall if best.wall else None,
            f"< {TARGET_SECONDS:.0f} s for 10,000",
            best.wall * 10_000 / segments < TARGET_SECONDS,
            f"{per_thousand:.2f} s per 1,000 segments of {partitions} partitions; {READ_THREADS} reads "
            f"and {LIST_THREADS} folder listings in parallel; runs: {runs}",
        )
    )
    if theirs:
        base_best = min(theirs, key=lambda r: r.wall)
        report.add(
            Figure(
                "rebuild",
                f"rebuild {segments} segments, peak RSS",
                max(r.peak_rss_mib for r in ours),
                "MiB",
                f"baseline {baseline_root}",
                max(r.peak_rss_mib for r in theirs),
                max(r.peak_rss_mib for r in theirs) / max(r.peak_rss_mib for r in ours),
                "bounded (not growing with the bucket)",
                None,
                f"time: {best.wall:.1f} s against {base_best.wall:.1f} s (best of {pairs})",
            )
        )


def _measured(
    python: Path, root: Path, env: dict[str, str], topic: str, segments: int, workdir: Path
) -> _Run:
    print(f"[rebuild] rebuild-metadata of {root} ...", flush=True)
    run = _run_cli(python, root, env, topic, workdir)
    assert run.segments == segments and not run.mismatches, (run.segments, run.mismatches[:3])
    print(f"[rebuild] {_describe(str(root), run)}", flush=True)
    return run


def _describe(who: str, run: _Run) -> str:
    return (
        f"{who} {run.wall:.1f} s wall, {run.cpu:.1f} CPU-s, peak RSS {run.peak_rss_mib:.0f} MiB "
        f"(load {run.load:.1f})"
    )


def _bare_list_and_get(info: stack.StackInfo, prefix: str) -> float:
    client = boto3.client("s3", endpoint_url=info.s3_endpoint_url, region_name="us-east-1")
    t0 = time.perf_counter()
    keys = [
        obj["Key"]
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=info.bucket, Prefix=prefix + "/")
        for obj in page.get("Contents", [])
        if obj["Key"].endswith("-manifest")
    ]
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        list(pool.map(lambda k: client.get_object(Bucket=info.bucket, Key=k)["Body"].read(), keys))
    return time.perf_counter() - t0
