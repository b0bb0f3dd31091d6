"""Merging small segments: the time ``processor merge`` spends on N small archived segments of one
partition (reading every source block back from S3, checking every batch's CRC, assembling, uploading
the merged segment, proving and deleting the sources), next to a plain copy of the same bytes as one
segment in the same run (the upload alone: what the copier spends on a segment it rolled itself).

Both go through the real copier and storage on the stack's S3, and their metadata records through
the stack's broker: a metadata topic of the run's own, published by the real publisher and each
confirmed through a real follower (RocksDB cache), as ``processor merge`` confirms them. The merge's
records (a STARTED and a FINISHED for the merged segment, and the deletion's STARTED and FINISHED
of every source) are its own cost; the plain copy has its two.

Server-side copy (UploadPartCopy) does not apply to these merges: the merged data object is not a
concatenation of its sources' objects (their batches are re-blocked under one new index, each block
verified, encrypted with the merged segment's own key where the archive is encrypted, and read for
its key filter), and S3 copies parts of at least 5 MiB, where merged sources are below
``PROCESSOR_MERGE_SMALL_BYTES`` (8 MiB) and most are far smaller."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks import cpu
from benchmarks.report import Figure, Report
from processor.config import load_settings
from processor.devstack import stack
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.model import ClaimKind, PartitionClaim, RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic
from processor.reader.segment_keys import SegmentDecryption
from processor.rewrite.merge_plan import MergeLimits, MergeRun
from processor.rewrite.merge_runner import merge_partition
from processor.rewrite.merged_segment import merged_segment
from processor.segment.entries_v2 import parse_batch_header, records_as_batches
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord, TimestampType
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler
from processor.wiring.follower import build_follower
from processor.wiring.read_your_write import confirm_by_follower
from processor.wiring.storage import build_storage

KiB = 1024
MiB = 1024 * KiB
SEGMENT_BYTES = 64 * KiB  # a quiet partition's minute
BLOCK_BYTES = 1 * MiB


class _Outcomes:
    """The deletion topic and tombstones of the deleter: a merge's deletion fails nothing here."""

    def tombstone(self, segment: RemoteLogSegmentMetadata) -> int:
        return 0

    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None:
        raise AssertionError(f"a deletion failed: {segment.segment_id}")

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None:
        pass


def _timed(call: Callable[[Any], None], spent: dict[str, float], what: str) -> Callable[[Any], None]:
    def timed(arg: Any) -> None:
        t = time.perf_counter()
        try:
            call(arg)
        finally:
            spent[what] += time.perf_counter() - t

    return timed


def _named(used: dict[str, float]) -> dict[str, float]:
    """CPU-seconds by process, this one (the merge or copy, its S3 client and its follower) named."""
    return {("this process" if name == cpu.CONSUMER else name): seconds for name, seconds in used.items()}


def _segment(partition: int, start: int, size: int) -> SealedSegment:
    """About ``size`` bytes of 1 KiB records in 16 KiB batches, from offset ``start``."""
    count = max(1, size // (KiB + 40))
    records = [
        KafkaRecord(o, 1_700_000_000_000 + o, TimestampType.CREATE_TIME, b"k%d" % o, bytes([o % 251]) * KiB)
        for o in range(start, start + count)
    ]
    assembler = SegmentAssembler(partition, start, BLOCK_BYTES)
    for batch in records_as_batches(records, 16 * KiB):
        assembler.append(parse_batch_header(batch), batch)
    return assembler.seal()


def bench_merge(report: Report, info: stack.StackInfo, workdir: Path, segments: int) -> None:
    tag = uuid.uuid4().hex[:8]
    prefix = f"bench-merge-{tag}"
    settings = load_settings(
        {
            **{k: v for k, v in info.env().items() if k.startswith("PROCESSOR_")},
            "PROCESSOR_S3_PREFIX": prefix,
            "PROCESSOR_S3_REGION": "us-east-1",
            "PROCESSOR_METADATA_TOPIC": f"bench-merge-meta-{tag}",
        }
    )
    storage = build_storage(settings)
    keys = ObjectKeyFactory(prefix)
    tp = TopicPartition(f"bench-merge-{tag}", 0)
    parts = ensure_metadata_topic(settings.kafka, settings.metadata_topic, 1, 1)
    cache = workdir / f"merge-cache-{tag}"
    followed = settings.model_copy(
        update={"follow_metadata_partitions": tuple(range(parts)), "follow_topics": (tp.topic,)}
    )
    follower = build_follower(followed, parts, cache)
    follower.materializer.catch_up()
    follower.materializer.start()
    publisher = MetadataPublisher(settings.kafka, settings.metadata_topic, parts, "bench-merge")
    confirm = confirm_by_follower(follower.materializer, parts)
    meta = _Outcomes()
    claim = PartitionClaim(tp, uuid.uuid4(), ClaimKind.LEAD, "bench", int(time.time() * 1000))
    epoch = publisher.publish(claim)
    assert confirm(claim, epoch) is True, "the bench's claim was not accepted"
    copier = SegmentCopier(storage, publisher, keys, "bench", confirm=confirm)
    try:
        print(f"[merge] copying {segments} segments of ~{SEGMENT_BYTES // KiB} KiB ...", flush=True)
        start = 0
        for _ in range(segments):
            segment = _segment(tp.partition, start, SEGMENT_BYTES)
            copier.copy(tp, segment, epoch)
            start = segment.end_offset + 1

        def state() -> PartitionRemoteState:
            return follower.cache.remote_state(tp)

        before = state().finished()
        total = sum(s.segment_size_in_bytes for s in before)
        deleter = SegmentDeleter(storage, publisher, meta, meta, "bench", keys, confirm)
        spent = {"read": 0.0, "delete": 0.0, "proof": 0.0, "objects": 0.0}
        proving = deleter.proven_superseded

        def proven_superseded(*args: Any, **kwargs: Any) -> frozenset[uuid.UUID]:
            t = time.perf_counter()
            try:
                return proving(*args, **kwargs)
            finally:
                spent["proof"] += time.perf_counter() - t

        deleter.proven_superseded = proven_superseded  # type: ignore[method-assign]
        # the objects' deletes, one at a time or in batches (the same harness measures the code
        # before batch deletes, for comparisons)
        for name in ("delete", "delete_many"):
            if hasattr(storage, name):
                setattr(storage, name, _timed(getattr(storage, name), spent, "objects"))
        limits = MergeLimits(target_bytes=64 * MiB, small_bytes=8 * MiB, min_age_ms=0)
        decryption = SegmentDecryption({})

        def build(run: MergeRun) -> SealedSegment:
            t = time.perf_counter()
            try:
                return merged_segment(storage, keys, run, decryption, BLOCK_BYTES)
            finally:
                spent["read"] += time.perf_counter() - t

        def delete(
            tp: TopicPartition,
            sources: Sequence[RemoteLogSegmentMetadata],
            epoch: int,
            part: PartitionRemoteState | None,
        ) -> list[str]:
            t = time.perf_counter()
            try:
                return deleter.delete_superseded(tp, sources, epoch, part)
            finally:
                spent["delete"] += time.perf_counter() - t

        pids = cpu.stack_pids(info)
        cpu0 = cpu.snapshot(pids)
        t0 = time.perf_counter()
        merged, _runs = merge_partition(
            tp, state, epoch, limits, int(time.time() * 1000), build, copier, delete
        )
        merge_s = time.perf_counter() - t0
        merge_cpu = _named(cpu.used(cpu0, cpu.snapshot(pids)))
        assert not merged.failed and merged.segments_after < len(before), merged
        # the same bytes as one plain copy: what the copier spends on a segment it rolled itself
        plain = _segment(tp.partition, start, total)
        cpu0 = cpu.snapshot(pids)
        t0 = time.perf_counter()
        copier.copy(tp, plain, epoch)
        copy_s = time.perf_counter() - t0
        copy_cpu = _named(cpu.used(cpu0, cpu.snapshot(pids)))
    finally:
        publisher.close()
        follower.close()
        shutil.rmtree(cache, ignore_errors=True)
        for info_ in storage.list(prefix + "/"):
            storage.delete(info_.key)
        storage.close()
    mib = total / MiB
    report.add(
        Figure(
            "merge",
            f"merge {segments} segments of {SEGMENT_BYTES // KiB} KiB",
            mib / merge_s,
            "MiB/s",
            "plain copy of the same bytes",
            mib / copy_s,
            (mib / merge_s) / (mib / copy_s),
            "",
            None,
            f"{mib:.0f} MiB into {merged.segments_after} segments in {merge_s:.1f} s: sources read back "
            f"and checked {spent['read']:.1f} s, deleted {spent['delete']:.1f} s (of which the proof, "
            f"every source's index read against the merge's, {spent['proof']:.1f} s, the objects' "
            f"deletes {spent['objects']:.1f} s, the rest its records), upload the rest; "
            f"the plain copy {copy_s:.1f} s; CPU-seconds of the merge: {cpu.breakdown(merge_cpu)}, of "
            f"the plain copy: {cpu.breakdown(copy_cpu)}; load average {os.getloadavg()[0]:.1f}",
        )
    )
