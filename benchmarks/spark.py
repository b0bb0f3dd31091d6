"""Spark: ``tiered_records`` reading the archive against Spark's own Parquet scan of the same rows.

The big topic (1 KiB values, size from ``--gib``) is offloaded by the real worker; a local Spark
(``local[2]``) then reads it through ``tiered_records`` and writes the same rows to local Parquet in
the same run; both are read with the same aggregation (count and total value length, so every value
is materialised), best of two runs each. Target: tiered_records at >= 0.5x the Parquet scan.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks.offload import LoadedTopic, run_worker_offload
from benchmarks.report import Figure, Report
from processor.devstack import stack

MiB = 1024 * 1024
QUERY = ("count(*) AS n", "sum(length(value)) AS bytes")


def _session() -> Any:
    from processor.spark import local_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    return local_session("processor-bench", spark__driver__memory="2g")


def _best_of(runs: int, fn: Any) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(runs):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def bench_spark(report: Report, info: stack.StackInfo, workdir: Path, topic: LoadedTopic) -> None:
    print(f"[spark] offloading {topic.name} for the Spark benchmark ...", flush=True)
    tag = uuid.uuid4().hex[:8]
    meta, prefix = f"__bench_spark_meta_{tag}", f"bench-spark-{tag}"
    env = {
        **{k: v for k, v in info.env().items() if k.startswith("PROCESSOR_")},
        "PROCESSOR_METADATA_TOPIC": meta,
        "PROCESSOR_S3_PREFIX": prefix,
        "PROCESSOR_S3_REGION": "us-east-1",
    }
    run_worker_offload(info, topic, workdir, 256 * MiB, 64 * MiB, extra_env=env)
    spark = _session()
    try:
        options = {
            "subscribe": topic.name,
            "kafka.bootstrap.servers": info.bootstrap_servers,
            "metadata.topic": meta,
            "s3.endpoint": info.s3_endpoint_url,
            "s3.bucket": info.bucket,
            "s3.prefix": prefix,
            "s3.region": "us-east-1",
        }
        archived = spark.read.format("tiered_records").options(**options).load()
        parquet_dir = workdir / f"spark-parquet-{tag}"
        print(f"[spark] writing the same rows to {parquet_dir} ...", flush=True)
        archived.write.parquet(str(parquet_dir))
        parquet = spark.read.parquet(str(parquet_dir))

        tiered_s, tiered = _best_of(2, lambda: archived.selectExpr(*QUERY).collect()[0])
        parquet_s, scanned = _best_of(2, lambda: parquet.selectExpr(*QUERY).collect()[0])
        if (
            tiered["n"] != topic.records
            or scanned["n"] != topic.records
            or tiered["bytes"] != scanned["bytes"]
        ):
            raise RuntimeError(
                f"row counts differ: tiered {tiered}, parquet {scanned}, produced {topic.records}"
            )
    finally:
        spark.stop()
    tiered_rate, parquet_rate = topic.records / tiered_s, topic.records / parquet_s
    ratio = tiered_rate / parquet_rate
    mb = topic.payload_bytes / 1e6
    report.add(
        Figure(
            "spark",
            "tiered_records read: records/s",
            tiered_rate,
            "rec/s",
            "Spark Parquet scan",
            parquet_rate,
            ratio,
            ">= 0.5",
            ratio >= 0.5,
            note=f"{topic.records} records, {mb:.0f} MB, local[2]",
        )
    )
    report.add(Figure("spark", "tiered_records read: MB/s", mb / tiered_s, "MB/s"))
    report.add(Figure("spark", "baseline: Parquet scan MB/s", mb / parquet_s, "MB/s"))
