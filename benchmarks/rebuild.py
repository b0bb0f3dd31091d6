"""Metadata rebuilt from the bucket: the time ``processor rebuild-metadata`` takes for N segments
(listing by folders in parallel, one manifest GET each in parallel, the fold's verdict, publishing
claims and records, and folding the published topic back to check it), next to a bare boto3 listing
plus GETs of the same manifests in the same run (the S3 work alone). The segments are spread over
at least 10 partitions and at most 1,000 segments a partition, the shape of a bucket of 10,000
partitions of 1,000 segments."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import boto3

from benchmarks.report import Figure, Report
from processor.commands.rebuild_metadata import rebuild
from processor.config import load_settings
from processor.devstack import stack
from processor.metadata.manifest import SegmentManifest, encode_manifest, manifest_key
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.rebuild.listing import LIST_THREADS
from processor.rebuild.manifests import READ_THREADS
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.storage import build_storage

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


def _write(storage: ChunkStorage, segment: RemoteLogSegmentMetadata) -> None:
    storage.create(segment.data_object_key, [b"d" * segment.segment_size_in_bytes])
    storage.create(segment.index_object_key, [b"i" * segment.index_size_in_bytes])
    storage.create(
        manifest_key(segment.data_object_key), [encode_manifest(SegmentManifest(segment, uuid.uuid4()))]
    )


def bench_rebuild(report: Report, info: stack.StackInfo, workdir: Path, segments: int) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix = f"bench-rebuild-{tag}"
    env = {
        **{k: v for k, v in info.env().items() if k.startswith("PROCESSOR_")},
        "PROCESSOR_S3_PREFIX": prefix,
        "PROCESSOR_S3_REGION": "us-east-1",
        "PROCESSOR_S3_UPLOAD_CONCURRENCY": str(READ_THREADS),
        "PROCESSOR_METADATA_PARTITIONS": "4",
    }
    settings = load_settings(env)
    storage = build_storage(settings)
    keys = ObjectKeyFactory(prefix)
    topic_id = str(uuid.uuid4())
    partitions = max(PARTITIONS, -(-segments // SEGMENTS_PER_PARTITION))
    made = [_segment(keys, topic_id, n % partitions, n // partitions) for n in range(segments)]
    print(f"[rebuild] writing {segments} segments (data, index, manifest) under {prefix} ...", flush=True)
    with ThreadPoolExecutor(max_workers=READ_THREADS) as pool:
        list(pool.map(lambda s: _write(storage, s), made))
    try:
        t0 = time.perf_counter()
        done = rebuild(settings, f"__bench_rebuilt_{tag}", dry_run=False)
        rebuilt = time.perf_counter() - t0
        served = sum(len(p.served) for p in done.plan.values())
        assert served == segments and not done.bad_manifests and not done.mismatches, done.mismatches[:3]
        baseline = _bare_list_and_get(info, prefix)
    finally:
        storage.close()
    per_thousand = rebuilt / segments * 1000
    report.add(
        Figure(
            "rebuild",
            f"rebuild {segments} segments",
            rebuilt,
            "s",
            "bare list + GETs",
            baseline,
            baseline / rebuilt if rebuilt else None,
            f"< {TARGET_SECONDS:.0f} s for 10,000",
            rebuilt * 10_000 / segments < TARGET_SECONDS,
            f"{per_thousand:.2f} s per 1,000 segments of {partitions} partitions; {READ_THREADS} reads "
            f"and {LIST_THREADS} folder listings in parallel",
        )
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
