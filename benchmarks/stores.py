"""The stores section: the archive's storage operations on each store, in one run. Segment-sized
objects written (conditional creates, chunked above the part size) and 1 MiB ranged reads at random
offsets, on SeaweedFS (S3, the stack's), and on the GCS and Azure emulators (``--storage gcs,azure``);
for each, the write and read throughput and the CPU this process spends per GB (the client library's
cost: boto3, google-cloud-storage, azure-storage-blob; the servers run in other processes).

Emulator figures are not cloud figures: fake-gcs-server and Azurite keep objects on the local disk
and answer on loopback, so throughput and latency say what the emulator costs on this machine, not
what GCS or Azure would answer. The client's CPU per GB is the figure that carries over."""

from __future__ import annotations

import os
import random
import resource
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from benchmarks.report import Figure, Report
from processor.devstack import emulators
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.s3 import s3_storage

MiB = 1024 * 1024
SECTION = "stores"
NOTE = "emulators on loopback: not cloud figures; CPU is this process's (the client library's)"


def _cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _measure(storage: ChunkStorage, objects: int, object_mib: int, reads: int) -> dict[str, float]:
    """Write ``objects`` objects of ``object_mib`` MiB, then ``reads`` 1 MiB ranged reads at random."""
    body = [os.urandom(MiB) for _ in range(object_mib)]  # incompressible, as archived blocks are
    prefix = f"bench-stores/{uuid.uuid4()}"
    keys = [f"{prefix}/{i:04d}" for i in range(objects)]
    cpu, wall = _cpu_s(), time.perf_counter()
    for key in keys:
        storage.create(key, body)
    write_s, write_cpu = time.perf_counter() - wall, _cpu_s() - cpu
    rng = random.Random(7)
    latencies: list[float] = []
    cpu = _cpu_s()
    for _ in range(reads):
        key = rng.choice(keys)
        offset = rng.randrange(0, (object_mib - 1) * MiB)
        started = time.perf_counter()
        data = storage.read(key, offset, MiB)
        latencies.append(time.perf_counter() - started)
        assert len(data) == MiB
    read_cpu = _cpu_s() - cpu
    for key in keys:
        storage.delete(key)
    written_gb = objects * object_mib * MiB / 1e9
    read_gb = reads * MiB / 1e9
    latencies.sort()
    return {
        "write_mb_s": objects * object_mib * MiB / 1e6 / write_s,
        "write_cpu_s_per_gb": write_cpu / written_gb,
        "read_mb_s": read_gb * 1e3 / sum(latencies),
        "read_p50_ms": latencies[len(latencies) // 2] * 1e3,
        "read_cpu_s_per_gb": read_cpu / read_gb,
    }


def bench_stores(
    report: Report,
    info: StackInfo,
    workdir: Path,
    kinds: list[str],
    objects: int = 8,
    object_mib: int = 32,
    reads: int = 200,
) -> None:
    """SeaweedFS (the baseline) and each emulator of ``kinds``, measured one after the other."""
    part = 16 * MiB
    results: dict[str, dict[str, float]] = {}

    def run(name: str, make: Callable[[], ChunkStorage]) -> None:
        storage = make()
        try:
            print(
                f"[stores] {name}: {objects} x {object_mib} MiB written, {reads} ranged reads ...", flush=True
            )
            results[name] = _measure(storage, objects, object_mib, reads)
        finally:
            storage.close()

    run(
        "s3",
        lambda: s3_storage(
            info.bucket, info.s3_endpoint_url, "us-east-1", part_size=part, multipart_threshold=part
        ),
    )
    for kind in kinds:
        root = workdir / f"stores-{kind}"
        root.mkdir(parents=True, exist_ok=True)
        with emulators.running(kind, root, "bench-stores", free_port()) as emulator:
            run(
                kind,
                lambda: emulators.storage_for(
                    emulator, "bench-stores", part_size=part, multipart_threshold=part
                ),
            )
    base = results["s3"]
    load = os.getloadavg()[0]
    for name, got in results.items():
        label = {"s3": "SeaweedFS (boto3)", "gcs": "fake-gcs-server", "azure": "Azurite"}[name]
        for metric, unit, higher_better in (
            ("write_mb_s", "MB/s", True),
            ("read_mb_s", "MB/s", True),
            ("read_p50_ms", "ms", False),
            ("write_cpu_s_per_gb", "CPU-s/GB", False),
            ("read_cpu_s_per_gb", "CPU-s/GB", False),
        ):
            value, baseline = got[metric], base[metric]
            ratio = (value / baseline if higher_better else baseline / value) if value and baseline else None
            report.add(
                Figure(
                    SECTION,
                    f"{label} {metric}",
                    round(value, 3),
                    unit,
                    baseline_name="SeaweedFS (boto3)" if name != "s3" else "",
                    baseline=round(baseline, 3) if name != "s3" else None,
                    ratio=round(ratio, 3) if ratio is not None and name != "s3" else None,
                    note=f"{NOTE}; load {load:.1f}",
                )
            )
