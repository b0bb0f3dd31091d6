"""Spark: ``tiered_records`` reading the archive, against the ceiling of Spark's Python data source
path and against Spark's own Parquet scan, all on the same rows in the same run.

The big topic (1 KiB values, size from ``--gib``) is offloaded by the real worker. Then, in one local
Spark (``local[2]``):

- ``tiered_records`` reads the archive (S3 ranged GETs, block decoding, CRCs, Arrow conversion);
- the stand-in ``standin_records`` yields the very same rows as ready Arrow batches (written once
  beforehand to Arrow IPC files, memory-mapped when read: no S3, no decoding), with the same schema
  (the 7 Kafka-source columns) and the same input partitions: what any Python data source costs
  here, the Arrow transfer to the JVM and the conversion to rows;
- Spark's Parquet scan of the same rows (written in the same run).

Each is read with the same aggregation (count and total value length, so every value is
materialised), ``RUNS`` times, interleaved (a shared machine's noise hits all three alike), best
of those. Targets: ``tiered_records`` >= 0.9 of the stand-in; the Parquet ratio is reported beside
it. An empty query (a filter no offset passes) shows the cost of planning and of a job.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from benchmarks.offload import LoadedTopic, read_archive
from benchmarks.report import Figure, Report
from processor.devstack import stack

MiB = 1024 * 1024
QUERY = ("count(*) AS n", "sum(length(value)) AS bytes")
RUNS = 5


class StandInReader(DataSourceReader):
    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def partitions(self) -> Sequence[InputPartition]:
        return [InputPartition(p) for p in self.paths]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        with pa.memory_map(partition.value) as source:
            reader = pa.ipc.open_file(source)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


class StandInDataSource(DataSource):
    """``standin_records``: ready Arrow batches from IPC files (option ``paths``, a JSON list)."""

    @classmethod
    def name(cls) -> str:
        return "standin_records"

    def schema(self) -> str:
        from processor.spark.arrow_records import SCHEMA_DDL_NO_HEADERS

        return SCHEMA_DDL_NO_HEADERS

    def reader(self, schema: Any) -> DataSourceReader:
        return StandInReader(json.loads(self.options["paths"]))


def _session() -> Any:
    from processor.spark_sources import local_session

    os.environ["PYSPARK_PYTHON"] = sys.executable
    # the Python workers import benchmarks.spark (the stand-in) as well as processor
    root = str(Path(__file__).resolve().parent.parent)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)
    spark = local_session("processor-bench", spark__driver__memory="2g")
    spark.dataSource.register(StandInDataSource)
    return spark


def write_standin(options: dict[str, str], folder: Path) -> list[str]:
    """The rows tiered_records returns, one Arrow IPC file per input partition it plans."""
    from processor.spark.arrow_records import ARROW_SCHEMA_NO_HEADERS
    from processor.spark.tiered_records import TieredRecordsReader
    from processor.spark_sources.entry import record_options

    folder.mkdir(parents=True, exist_ok=True)
    reader = TieredRecordsReader(record_options(options))
    paths = []
    for i, part in enumerate(reader.partitions()):
        path = folder / f"part-{i:05d}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, ARROW_SCHEMA_NO_HEADERS) as writer:
            for batch in reader.read(part):
                writer.write_batch(batch)
        paths.append(str(path))
    return paths


def process_tree_cpu_s(roots: set[int]) -> float:
    """CPU seconds (user + system, reaped children included) of ``roots`` and their descendants:
    on a shared machine, what a query cost is clearer in CPU than in wall time."""
    hz = os.sysconf("SC_CLK_TCK")
    procs: dict[int, tuple[int, int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        fields = stat[stat.rindex(")") + 2 :].split()
        procs[int(entry)] = (int(fields[1]), sum(int(x) for x in fields[11:15]))

    def under(pid: int) -> bool:
        seen: set[int] = set()
        while pid in procs and pid not in seen:
            if pid in roots:
                return True
            seen.add(pid)
            pid = procs[pid][0]
        return pid in roots

    return sum(ticks for pid, (_ppid, ticks) in procs.items() if under(pid)) / hz


def _aggregate(df: Any) -> Any:
    return df.selectExpr(*QUERY).collect()[0]


def _timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    result = fn()
    return time.perf_counter() - t0, result


def bench_spark(
    report: Report, info: stack.StackInfo, workdir: Path, topic: LoadedTopic, runs: int = RUNS
) -> None:
    """``runs``: each query's repetitions (the smoke test runs one)."""
    tag = uuid.uuid4().hex[:8]
    env = read_archive(info, topic, workdir)
    meta, prefix = env["PROCESSOR_METADATA_TOPIC"], env["PROCESSOR_S3_PREFIX"]
    options = {
        "subscribe": topic.name,
        "kafka.bootstrap.servers": info.bootstrap_servers,
        "metadata.topic": meta,
        "s3.endpoint": info.s3_endpoint_url,
        "s3.bucket": info.bucket,
        "s3.prefix": prefix,
        "s3.region": "us-east-1",
        "metadata.cacheDir": str(workdir / f"spark-metadata-{tag}"),
    }
    print("[spark] writing the same rows as ready Arrow batches for the stand-in ...", flush=True)
    paths = write_standin(options, workdir / f"standin-{tag}")
    spark = _session()
    try:
        archived = spark.read.format("tiered_records").options(**options).load()
        standin = spark.read.format("standin_records").option("paths", json.dumps(paths)).load()
        parquet_dir = workdir / f"spark-parquet-{tag}"
        print(f"[spark] writing the same rows to {parquet_dir} ...", flush=True)
        archived.write.parquet(str(parquet_dir))
        parquet = spark.read.parquet(str(parquet_dir))
        sources = {"tiered_records": archived, "stand-in": standin, "parquet": parquet}
        best = dict.fromkeys(sources, float("inf"))
        cpu = dict.fromkeys(sources, float("inf"))
        answers: dict[str, Any] = {}
        roots = {os.getpid(), *info.pids.values()}  # Spark's JVM and workers, and the S3 server
        for _ in range(runs):
            for name, df in sources.items():
                before = process_tree_cpu_s(roots)
                seconds, answers[name] = _timed(functools.partial(_aggregate, df))
                used = process_tree_cpu_s(roots) - before
                best[name], cpu[name] = min(best[name], seconds), min(cpu[name], used)
                print(f"[spark] {name}: {seconds:.2f} s, {used:.2f} CPU s", flush=True)
        empty_s = min(
            _timed(lambda: archived.where("offset < 0").selectExpr(*QUERY).collect())[0] for _ in range(runs)
        )
        for name, got in answers.items():
            if got["n"] != topic.records or got["bytes"] != answers["parquet"]["bytes"]:
                raise RuntimeError(f"{name} answered {got}, produced {topic.records} records")
    finally:
        spark.stop()
    rate = {name: topic.records / s for name, s in best.items()}
    mb = topic.payload_bytes / 1e6
    vs_standin = rate["tiered_records"] / rate["stand-in"]
    load = os.getloadavg()[0]  # every source waits for a core alike on a loaded machine
    note = f"{topic.records} records, {mb:.0f} MB, local[2], best of {runs}, load average {load:.1f}"
    report.add(
        Figure(
            "spark",
            "tiered_records read: records/s",
            rate["tiered_records"],
            "rec/s",
            "stand-in (ready Arrow batches, same rows)",
            rate["stand-in"],
            vs_standin,
            ">= 0.9",
            vs_standin >= 0.9,
            note=note,
        )
    )
    report.add(
        Figure(
            "spark",
            "tiered_records vs Parquet scan: records/s",
            rate["tiered_records"],
            "rec/s",
            "Spark Parquet scan",
            rate["parquet"],
            rate["tiered_records"] / rate["parquet"],
            note=f"stand-in / Parquet: {rate['stand-in'] / rate['parquet']:.2f}",
        )
    )
    report.add(Figure("spark", "tiered_records read: MB/s", mb / best["tiered_records"], "MB/s"))
    per_record = {name: used / topic.records * 1e6 for name, used in cpu.items()}
    report.add(
        Figure(
            "spark",
            "tiered_records: CPU per record (Spark, workers, S3 server)",
            per_record["tiered_records"],
            "us",
            "stand-in",
            per_record["stand-in"],
            per_record["stand-in"] / per_record["tiered_records"],
            note=f"Parquet scan {per_record['parquet']:.2f} us; least of {runs}",
        )
    )
    report.add(Figure("spark", "tiered_records: an empty query (planning and job)", empty_s, "s"))
