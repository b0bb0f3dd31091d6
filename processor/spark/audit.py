"""``processor audit``: a Structured Streaming query over ``remote_log_metadata``.

The query groups the metadata messages by source partition and keeps each partition's folded state
with ``applyInPandasWithState`` (rules in ``audit_rules``, pure); its output is new findings only.
``foreachBatch`` writes them (Parquet by default, JSON or the console on request). After each
micro-batch (and once at the end with ``--once``) the driver runs the checks that need the outside
world (``audit_storage``): objects on S3 with ``--verify-objects``, the source topic's high
watermarks with ``--max-lag-records``; the keys of what it reported are kept next to the checkpoint
so a restarted audit does not report a problem twice.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from processor.metadata.topic_io import load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.audit_rules import (
    FINDING_COLUMNS,
    FINDINGS_DDL,
    Finding,
    PartitionAudit,
    audit_partition,
)
from processor.spark.audit_storage import check_lag, check_storage, list_objects
from processor.spark.live_tail import live_ends
from processor.spark.options import Connection

log = logging.getLogger(__name__)

DRIVER_STATE_FILE = "driver-findings.json"


@dataclass(frozen=True)
class AuditOptions:
    connection: Connection
    checkpoint: Path
    output: Path
    format: str = "parquet"
    once: bool = False
    verify_objects: bool = False
    stuck_after_ms: int = 600_000
    max_lag_records: int | None = None
    sample_blocks: int = 3
    interval_s: float = 30.0


@dataclass
class AuditRun:
    findings: list[tuple[Any, ...]] = field(default_factory=list)  # rows written by this run

    @property
    def kinds(self) -> list[str]:
        return sorted(str(r[0]) for r in self.findings)


def state_function(stuck_after_ms: int) -> Any:
    """The applyInPandasWithState function (a closure over the threshold; pickled to executors)."""

    def audit_group(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
        topic = key[0] or None
        partition = None if key[1] is None or key[1] < 0 else int(key[1])
        audit = PartitionAudit.from_json(topic, partition, state.get[0] if state.exists else None)
        frames = [] if state.hasTimedOut else [p for p in pdfs if len(p)]
        rows: list[dict[str, Any]] = []
        if frames:
            rows = pd.concat(frames).sort_values(["meta_partition", "meta_offset"]).to_dict("records")
        now_ms = int(time.time() * 1000)
        new = audit_partition(audit, rows, now_ms, stuck_after_ms)
        state.update((audit.to_json(),))
        state.setTimeoutDuration(max(1000, stuck_after_ms // 2))
        detected = pd.Timestamp(now_ms, unit="ms", tz="UTC")
        yield findings_frame(new, detected)

    return audit_group


def findings_frame(findings: list[Finding], detected: pd.Timestamp) -> pd.DataFrame:
    frame = pd.DataFrame([f.row() for f in findings], columns=list(FINDING_COLUMNS))
    frame["partition"] = frame["partition"].astype("Int32")
    frame["start_offset"] = frame["start_offset"].astype("Int64")
    frame["end_offset"] = frame["end_offset"].astype("Int64")
    frame["detected_at"] = pd.Series([detected] * len(frame), dtype="datetime64[us, UTC]")
    return frame


class _DriverChecks:
    """Storage and lag checks with their reported keys persisted next to the checkpoint."""

    def __init__(self, options: AuditOptions) -> None:
        self.options = options
        self.path = options.checkpoint / DRIVER_STATE_FILE
        self.reported: set[str] = set(json.loads(self.path.read_text())) if self.path.exists() else set()

    def run(self) -> list[Finding]:
        conn = self.options.connection
        found: list[Finding] = []
        keys = ObjectKeyFactory(conn.s3_prefix)
        if self.options.verify_objects:
            storage = conn.storage()
            try:
                listed = list_objects(storage, keys)
                state, _ = load_remote_state(conn.kafka, conn.metadata_topic)
                found.extend(check_storage(storage, keys, state, listed, self.options.sample_blocks))
            finally:
                storage.close()
        if self.options.max_lag_records is not None:
            state, _ = load_remote_state(conn.kafka, conn.metadata_topic)
            topics = sorted({tp.topic for tp in state.partitions})
            highs = live_ends(conn.kafka, topics) if topics else {}
            found.extend(check_lag(state, highs, self.options.max_lag_records))
        fresh = [f for f in found if f.key not in self.reported]
        self.reported.update(f.key for f in fresh)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(sorted(self.reported)))
        return fresh


def _emit(spark: Any, rows: list[tuple[Any, ...]], options: AuditOptions, run: AuditRun) -> None:
    """Write findings rows (FINDINGS_DDL order) in the chosen format."""
    if not rows:
        return
    run.findings.extend(rows)
    if options.format == "console":
        for r in rows:
            print(
                json.dumps(dict(zip([*FINDING_COLUMNS, "detected_at"], r, strict=True)), default=str),
                flush=True,
            )
        return
    out = spark.createDataFrame(rows, FINDINGS_DDL).coalesce(1).write.mode("append")
    (out.parquet if options.format == "parquet" else out.json)(str(options.output))


def run_audit(spark: Any, options: AuditOptions) -> AuditRun:
    """Run the audit on ``spark`` (sources must be registered); with ``once``, process what is there
    and return; otherwise run until interrupted."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    conn = options.connection
    run = AuditRun()
    driver = _DriverChecks(options)
    metadata = (
        spark.readStream.format("remote_log_metadata")
        .option("kafka.bootstrap.servers", conn.bootstrap_servers)
        .options(**conn.kafka.security.spark_options())  # SASL/TLS of the audited cluster
        .option("metadata.topic", conn.metadata_topic)
        .option("startingOffsets", "earliest")
        .load()
        .withColumn("g_topic", F.coalesce(F.col("topic"), F.lit("")))
        .withColumn("g_partition", F.coalesce(F.col("partition"), F.lit(-1)))
    )
    findings = metadata.groupBy("g_topic", "g_partition").applyInPandasWithState(
        state_function(options.stuck_after_ms),
        FINDINGS_DDL,
        "state string",
        "append",
        GroupStateTimeout.ProcessingTimeTimeout,
    )

    def each_batch(df: Any, batch_id: int) -> None:
        _emit(spark, [tuple(r) for r in df.collect()], options, run)
        if not options.once:
            _write_driver(spark, driver.run(), options, run)

    writer = findings.writeStream.foreachBatch(each_batch).option(
        "checkpointLocation", str(options.checkpoint / "query")
    )
    writer = (
        writer.trigger(availableNow=True)
        if options.once
        else writer.trigger(processingTime=f"{int(options.interval_s)} seconds")
    )
    query = writer.start()
    try:
        query.awaitTermination()
    finally:
        if query.isActive:
            query.stop()
    if options.once:
        _write_driver(spark, driver.run(), options, run)
    return run


def _write_driver(spark: Any, found: list[Finding], options: AuditOptions, run: AuditRun) -> None:
    now = dt.datetime.now(dt.UTC)
    _emit(spark, [(*f.row(), now) for f in found], options, run)
