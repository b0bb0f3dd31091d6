"""``processor audit``: a scrubber of the archive, as a Spark Structured Streaming query.

Each pass (a micro-batch of the query; with ``--once`` the query runs to the end of the metadata
topic, and one pass runs even when nothing new arrived):

1. The metadata messages of the micro-batch are folded per source partition by a stateful step
   (``applyInPandasWithState``; the state is the project's fold of the partition,
   ``rules.RecordVerdicts``): each record the fold rejects is a finding named by the fold's
   reason, and the rejections are counted by reason (``AuditRun.rejected``, the pass's log line).
2. With ``--verify-objects`` the objects under the prefix are listed (before the metadata is read).
3. The metadata topic is applied to a materialized view kept in the checkpoint (the follower's
   cache format); every partition's archive is checked (``rules.state_findings``).
4. With ``--verify-objects``, a bounded share of the segments (a byte and a request quota per
   pass, going on where the last pass stopped) is checked by Spark tasks (``storage``); with
   ``--full-crc`` every block is read, otherwise samples.
5. The topic's offsets against the archive's (``expired_before_offload``, ``offload_lag``).
6. The pass's findings are written under ``<output>/findings/pass_id=<pass>/`` (a replayed pass
   overwrites its own file, nothing is appended twice); then, in one atomic write, the open
   problems and the scrub position (``problems.AuditState``), and the problems view under
   ``<output>/problems``.
"""

from __future__ import annotations

import datetime as dt
import functools
import json
import logging
import os
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from processor import metrics
from processor.kafka.partition import TopicPartition
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.audit.problems import PROBLEM_COLUMNS, AuditState, PassOutcome, Problem
from processor.spark.audit.rules import (
    FINDING_COLUMNS,
    MARKER,
    STATE_SCOPE,
    Finding,
    fold_group,
    records_scope,
    segment_scope,
    state_findings,
)
from processor.spark.audit.scrub import plan_pass, progress, scrub_items
from processor.spark.audit.storage import (
    ScrubStats,
    lag_findings,
    list_objects,
    manifest_findings,
    orphan_findings,
    segment_findings,
)
from processor.spark.connection import Connection
from processor.spark.live_tail import broker_partitions, watermarks
from processor.spark.metadata_view import MaterializedMetadata
from processor.spark.options import Subscription

log = logging.getLogger(__name__)

STATE_FILE = "audit-state.json"
GROUP_OUTPUT_DDL = (
    "key string, kind string, severity string, scope string, topic string, partition int, "
    "start_offset long, end_offset long, segment_id string, object_key string, detail string"
)


@dataclass(frozen=True)
class AuditOptions:
    connection: Connection
    checkpoint: Path
    output: Path
    format: str = "parquet"
    once: bool = False
    verify_objects: bool = False
    full_crc: bool = False
    stuck_after_ms: int = 600_000
    max_lag_records: int | None = None
    sample_blocks: int = 3
    interval_s: float = 30.0
    max_bytes_per_pass: int = 1 << 30
    max_requests_per_pass: int = 10_000


@dataclass
class AuditRun:
    passes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)  # of every pass of this run
    outcome: PassOutcome = field(default_factory=PassOutcome)
    open_problems: list[Problem] = field(default_factory=list)
    stats: ScrubStats = field(default_factory=ScrubStats)
    rejected: dict[str, int] = field(default_factory=dict)  # records the fold rejected, by reason

    @property
    def kinds(self) -> list[str]:
        return sorted(f.kind for f in self.findings)


# -- 1. the stateful step (runs in Spark's Python workers) -------------------------------------------


def group_step(key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any) -> Iterator[pd.DataFrame]:
    """applyInPandasWithState: fold a partition's new messages; emit its record problems and a
    marker naming the scope it evaluated."""
    tp = TopicPartition(key[0], int(key[1])) if key[0] and key[1] is not None and key[1] >= 0 else None
    frames = [p for p in pdfs if len(p)]
    rows = (
        pd.concat(frames).sort_values(["meta_partition", "meta_offset"]).to_dict("records") if frames else []
    )
    new_state, found, rejected = fold_group(tp, state.get[0] if state.exists else None, rows)
    state.update((new_state,))
    # the marker also carries how many records the fold rejected in these rows, by reason
    marker = Finding(key=MARKER, kind=MARKER, scope=records_scope(tp), detail=json.dumps(rejected))
    frame = pd.DataFrame([f.row() for f in [*found, marker]], columns=list(FINDING_COLUMNS))
    for name in ("partition", "start_offset", "end_offset"):
        frame[name] = frame[name].astype("Int64")
    frame["severity"] = [f.severity for f in [*found, marker]]
    yield frame


# -- 4. storage checks (Spark tasks) ------------------------------------------------------------------


def check_many(
    conn: Connection, full_crc: bool, sample_blocks: int, segments: Iterator[Any]
) -> Iterator[str]:
    """mapPartitions: check segments, yield one JSON line per segment (findings and stats)."""
    storage = conn.shared_storage()
    keys = ObjectKeyFactory(conn.s3_prefix)
    for seg in segments:
        findings, stats = segment_findings(
            storage, keys, seg, full_crc=full_crc, sample_blocks=sample_blocks, decryption=conn.decryption()
        )
        yield json.dumps(
            {
                "findings": [dict(zip(FINDING_COLUMNS, f.row(), strict=True)) for f in findings],
                "stats": [stats.segments, stats.requests, stats.bytes_read, stats.encrypted],
            }
        )


# -- a pass -----------------------------------------------------------------------------------------------


class Auditor:
    def __init__(self, spark: Any, options: AuditOptions) -> None:
        self.spark = spark
        self.options = options
        self.run = AuditRun()
        self.metadata = MaterializedMetadata(options.connection, options.checkpoint / "metadata-cache")
        self.state_path = options.checkpoint / STATE_FILE

    def audit_pass(
        self,
        pass_id: str,
        verdicts: list[Finding],
        record_scopes: set[str],
        rejected: dict[str, int] | None = None,
    ) -> None:
        options, conn = self.options, self.options.connection
        state = AuditState.load(self.state_path)
        cursor = state.start(pass_id)
        now_ms = int(time.time() * 1000)
        findings, scopes = list(verdicts), set(record_scopes)
        keys = ObjectKeyFactory(conn.s3_prefix)
        listed: list[str] | None = None
        stats = ScrubStats()
        if options.verify_objects:
            storage = conn.shared_storage()
            listed, stats.requests = list_objects(storage, keys)
        archives = list(self.metadata.read(lambda tp: True).values())
        findings += state_findings(archives, now_ms, options.stuck_after_ms)
        scopes.add(STATE_SCOPE)
        cursor_after = cursor
        if options.verify_objects and listed is not None:
            findings += orphan_findings(keys, listed, archives)
            findings += manifest_findings(listed, archives, now_ms, options.stuck_after_ms)
            scopes.add("objects")
            items = scrub_items(archives)
            chosen, cursor_after = plan_pass(
                items,
                cursor,
                max_bytes=options.max_bytes_per_pass,
                max_requests=max(1, options.max_requests_per_pass - stats.requests),
                full_crc=options.full_crc,
                sample_blocks=options.sample_blocks,
                now_ms=now_ms,
            )
            findings += self._check_segments([i.segment for i in chosen], stats)
            scopes |= {segment_scope(str(i.segment.segment_id.id)) for i in chosen}
            metrics.AUDIT_SCRUB_PROGRESS.set(progress(items, cursor_after))
            if cursor_after.last_complete_ms is not None:
                metrics.AUDIT_LAST_COMPLETE_SCRUB.set(cursor_after.last_complete_ms / 1000)
        findings += self._offsets(archives)
        scopes.add("lag")
        self._write_findings(pass_id, findings, now_ms)
        outcome = state.finish(pass_id, findings, scopes, now_ms, cursor, cursor_after)
        state.save(self.state_path)  # only after the pass's rows are written
        self._write_problems(state)
        for severity in ("error", "warning"):
            metrics.AUDIT_OPEN_PROBLEMS.labels(severity).set(
                sum(1 for p in state.open_problems() if p.severity == severity)
            )
        run = self.run
        run.passes.append(pass_id)
        run.findings.extend(findings)
        run.outcome.opened.extend(outcome.opened)
        run.outcome.resolved.extend(outcome.resolved)
        run.open_problems = state.open_problems()
        run.stats.add(stats)
        rejected = rejected or {}
        for reason, count in rejected.items():
            run.rejected[reason] = run.rejected.get(reason, 0) + count
        if rejected:
            log.info(
                "audit pass %s: the fold rejected %s",
                pass_id,
                ", ".join(f"{n} record(s) {reason}" for reason, n in sorted(rejected.items())),
            )
        log.info(
            "audit pass %s: %d finding(s), %d opened, %d resolved, %d open; %d segment(s) checked (%d "
            "encrypted), %d request(s), %d byte(s)",
            pass_id,
            len(findings),
            len(outcome.opened),
            len(outcome.resolved),
            len(run.open_problems),
            stats.segments,
            stats.encrypted,
            stats.requests,
            stats.bytes_read,
        )

    def _check_segments(self, segments: list[Any], stats: ScrubStats) -> list[Finding]:
        if not segments:
            return []
        options = self.options
        slices = max(1, min(len(segments), self.spark.sparkContext.defaultParallelism * 2))
        job = functools.partial(check_many, options.connection, options.full_crc, options.sample_blocks)
        out: list[Finding] = []
        for line in self.spark.sparkContext.parallelize(segments, slices).mapPartitions(job).collect():
            doc = json.loads(line)
            out.extend(Finding.from_row(f) for f in doc["findings"])
            got = ScrubStats(*doc["stats"])
            stats.add(got)
        metrics.AUDIT_SEGMENTS_CHECKED.inc(stats.segments)
        metrics.AUDIT_REQUESTS.inc(stats.requests)
        metrics.AUDIT_BYTES_READ.inc(stats.bytes_read)
        return out

    def _offsets(self, archives: list[Any]) -> list[Finding]:
        conn = self.options.connection
        topics = tuple(sorted({a.tp.topic for a in archives}))
        if not topics:
            return []
        # a topic the principal may not describe is an error: left out of the listing, its lag
        # problems (expired_before_offload: offsets lost) would count as resolved
        needs = "the audit compares its offsets with the archive's: it needs Describe on the topic"
        marks = watermarks(conn, broker_partitions(conn, Subscription(topics=topics), needs=needs))
        return lag_findings(archives, marks, self.options.max_lag_records)

    def _write_findings(self, pass_id: str, findings: list[Finding], now_ms: int) -> None:
        """The pass's rows, replacing whatever an earlier attempt of the same pass wrote."""
        detected = dt.datetime.fromtimestamp(now_ms / 1000, tz=dt.UTC)
        rows = [
            {
                **dict(zip(FINDING_COLUMNS, f.row(), strict=True)),
                "severity": f.severity,
                "detected_at": detected,
            }
            for f in findings
        ]
        if self.options.format == "console":
            for r in rows:
                print(json.dumps({**r, "pass_id": pass_id}, default=str), flush=True)
            return
        write_table(
            self.options.output / "findings" / f"pass_id={pass_id}",
            rows,
            [*FINDING_COLUMNS, "detected_at"],
            self.options.format,
        )

    def _write_problems(self, state: AuditState) -> None:
        if self.options.format == "console":
            return
        rows = [dict(zip(PROBLEM_COLUMNS, p.row(), strict=True)) for p in state.problems.values()]
        write_table(self.options.output / "problems", rows, list(PROBLEM_COLUMNS), self.options.format)


def write_table(folder: Path, rows: list[dict[str, Any]], columns: list[str], fmt: str) -> None:
    """``rows`` as the only file of ``folder`` (Parquet, or JSON lines), replaced atomically."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder.mkdir(parents=True, exist_ok=True)
    name = "part-0.parquet" if fmt == "parquet" else "part-0.json"
    tmp = folder / f".{name}.tmp"
    if fmt == "parquet":
        table = (
            pa.Table.from_pylist(rows, schema=_schema(columns)) if rows else _schema(columns).empty_table()
        )
        pq.write_table(table, tmp)
    else:
        with open(tmp, "w") as handle:
            for r in rows:
                handle.write(json.dumps(r, default=str) + "\n")
    os.replace(tmp, folder / name)


def _schema(columns: list[str]) -> Any:
    import pyarrow as pa

    types = {
        "partition": pa.int32(),
        "start_offset": pa.int64(),
        "end_offset": pa.int64(),
        "first_seen_ms": pa.int64(),
        "last_seen_ms": pa.int64(),
        "resolved_ms": pa.int64(),
        "detected_at": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([pa.field(c, types.get(c, pa.string())) for c in columns])


def run_audit(spark: Any, options: AuditOptions) -> AuditRun:
    """Run the audit on ``spark`` (sources registered); with ``once``, audit what is there and return;
    otherwise run a pass every ``interval_s`` until interrupted."""
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    conn = options.connection
    auditor = Auditor(spark, options)
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
    # Without --once, a processing-time timeout makes Spark run a micro-batch (a pass) every
    # interval even when no metadata arrived: the scrub goes on and time-based problems are seen.
    timeout = GroupStateTimeout.NoTimeout if options.once else GroupStateTimeout.ProcessingTimeTimeout
    verdicts = metadata.groupBy("g_topic", "g_partition").applyInPandasWithState(
        group_step, GROUP_OUTPUT_DDL, "state string", "append", timeout
    )

    def each_batch(df: Any, batch_id: int) -> None:
        found, scopes, rejected = [], set(), Counter[str]()
        for row in df.collect():
            d = row.asDict()
            if d["kind"] == MARKER:
                scopes.add(d["scope"])
                rejected.update(json.loads(d["detail"] or "{}"))
            else:
                found.append(Finding.from_row(d))
        auditor.audit_pass(f"batch-{batch_id}", found, scopes, dict(rejected))

    writer = verdicts.writeStream.foreachBatch(each_batch).option(
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
    if options.once and not auditor.run.passes:  # nothing new on the metadata topic: still one pass
        auditor.audit_pass(f"once-{int(time.time() * 1000)}", [], set())
    return auditor.run
