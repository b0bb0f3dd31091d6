"""Erasing by key: what the per-segment key filters cost on the offload path and save an erasure.

1. Offload with key filters: one topic of 100-byte values (the most keys per byte, so the filters'
   worst case) offloaded by a worker with PROCESSOR_ERASURE_SECRET, next to the same topic offloaded
   without it in the same run (each into an archive of its own).
2. Erasure cost per GB archived: three keys (each in one segment of 16 MiB; load_topic spreads
   records over 8 partitions) erased from the filtered archive
   as ``processor erase`` does it, with the key filters, next to three other keys erased from the
   same archive with every segment read (what an archive without filters costs).
"""

from __future__ import annotations

import time
from pathlib import Path

from benchmarks.offload import MiB, archive_env, load_topic, run_worker_offload
from benchmarks.report import Figure, Report
from processor.commands.erase import erase_one
from processor.config import load_settings
from processor.devstack import stack
from processor.wiring.deletion_context import open_context
from processor.wiring.rewrite import FilterStats

SECRET = "bench erasure secret, not a real one"
SEGMENT_BYTES = 16 * MiB  # several segments a partition at the default size: filters skip most


def _erase(env: dict[str, str], topic: str, keys: list[bytes], filters: bool) -> tuple[float, int, int, int]:
    """(seconds, archived bytes, segments read, records removed) of one erasure of ``keys``."""
    settings = load_settings(env)
    ctx = open_context(settings, topic)
    try:
        partitions = sorted(ctx.partitions_of(topic), key=lambda tp: tp.partition)
        archived = sum(s.segment_size_in_bytes for tp in partitions for s in ctx.state(tp).finished())
        t0 = time.perf_counter()
        reports = [erase_one(ctx, settings, tp, keys, FilterStats(), False, filters) for tp in partitions]
        seconds = time.perf_counter() - t0
    finally:
        ctx.close()
    assert not any(r.failed for r in reports), [r.failed for r in reports]
    return seconds, archived, sum(r.scanned for r in reports), sum(r.records_removed for r in reports)


def bench_erase(report: Report, info: stack.StackInfo, workdir: Path, total_bytes: int) -> None:
    print(f"[erase] loading {total_bytes / MiB:.0f} MiB of 100-byte values ...", flush=True)
    topic = load_topic(info, f"bench-erase-{int(time.time())}", 100, total_bytes)
    mb = topic.payload_bytes / 1e6
    plain_env = archive_env(info, topic, "erase-plain")
    plain = run_worker_offload(
        info,
        topic,
        workdir,
        256 * MiB,
        SEGMENT_BYTES,
        extra_env=plain_env,
        unset=("PROCESSOR_ERASURE_SECRET",),
    )
    filtered_env = {**archive_env(info, topic, "erase"), "PROCESSOR_ERASURE_SECRET": SECRET}
    filtered = run_worker_offload(info, topic, workdir, 256 * MiB, SEGMENT_BYTES, extra_env=filtered_env)
    report.add(
        Figure(
            "erase",
            "offload with key filters (100 B values)",
            mb / filtered.seconds,
            "MB/s",
            "the same topic without key filters",
            mb / plain.seconds,
            plain.seconds / filtered.seconds,
            "",
            None,
            f"worker CPU {(filtered.cpu or {}).get('worker', 0.0):.1f} s with filters, "
            f"{(plain.cpu or {}).get('worker', 0.0):.1f} s without; "
            f"stored {filtered.stored_bytes / 1e6:.0f} MB vs {plain.stored_bytes / 1e6:.0f} MB",
        )
    )
    # load_topic's keys: b"k%09d" % i, record i in partition i % 8: each key in one segment
    count = topic.records
    first = [b"k%09d" % i for i in (count // 7, count // 3, count // 2)]
    second = [b"k%09d" % i for i in (count // 5, count // 4, 2 * count // 3)]
    with_s, archived, with_read, with_removed = _erase(filtered_env, topic.name, first, True)
    without_s, _, without_read, without_removed = _erase(filtered_env, topic.name, second, False)
    assert with_removed == without_removed == 3, (with_removed, without_removed)
    gb = archived / 1e9
    report.add(
        Figure(
            "erase",
            "erase 3 keys, with key filters",
            with_s / gb,
            "s/GB",
            "every segment read (no filters)",
            without_s / gb,
            without_s / with_s,
            "",
            None,
            f"{archived / 1e6:.0f} MB archived; {with_read} segments read with filters in {with_s:.1f} s, "
            f"{without_read} without in {without_s:.1f} s",
        )
    )
