"""One run of ``processor restore``: plan against archive, target and committed progress, then
restore (or, with ``dry_run``, count what would be restored), then copy the offset maps to the bucket.

Order matters for exactly-once: the transactional producer is initialised (fencing any earlier run
of the same restore and aborting its open transaction) *before* the committed progress is read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from processor.errors import ConfigError
from processor.restore.archive import ArchiveTopic
from processor.restore.bucket_maps import write_map
from processor.restore.plan import (
    ArchivedRange,
    PartitionPlan,
    RangeBound,
    resolve_start,
    resolve_stop,
    target_partition_for,
)
from processor.restore.progress_log import PartitionProgress
from processor.restore.progress_record import RestoreSource, validate_restore_id
from processor.restore.restorer import Restorer
from processor.restore.state import PartitionRun, RestoreOptions
from processor.restore.target import TargetCluster

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RestoreRequest:
    topic: str
    partition: int | None
    to_topic: str
    range_from: RangeBound
    range_to: RangeBound
    partitioner: str
    restore_id: str
    progress_topic: str
    target: TargetCluster
    options: RestoreOptions = field(default_factory=RestoreOptions)
    dry_run: bool = False

    def __post_init__(self) -> None:
        validate_restore_id(self.restore_id)  # it names the transactional id and objects: check it first

    @property
    def transactional_id(self) -> str:
        return f"processor-restore.{self.restore_id}"


@dataclass
class PartitionSummary:
    source_partition: int
    target_partition: int
    start: int
    stop: int
    resumed_from: int | None
    next_source_offset: int
    records: int
    bytes: int
    records_total: int
    transactions: int
    bucket_map: str | None = None


@dataclass
class RestoreSummary:
    restore_id: str
    source_topic: str
    target_topic: str
    target: str  # the target cluster: where and how (never a secret)
    dry_run: bool
    partitions: list[PartitionSummary]
    seconds: float = 0.0
    transactions: int = 0
    transactions_aborted: int = 0  # failed (a broker away, a timeout) and redone
    batches_as_archived: int = 0  # archived batches sent byte for byte
    batches_written: int = 0  # batches written anew (range edges, offset gaps, LogAppendTime, size)
    created_topics: list[str] = field(default_factory=list)

    @property
    def records(self) -> int:
        return sum(p.records for p in self.partitions)

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.partitions)

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "records": self.records,
            "bytes": self.bytes,
            "records_per_second": round(self.records / self.seconds, 1) if self.seconds else None,
        }


def _selected(
    archived: dict[int, ArchivedRange], partition: int | None, topic: str
) -> dict[int, ArchivedRange]:
    if not archived:
        raise ConfigError(f"topic {topic} has no archived segments")
    if partition is None:
        return archived
    if partition not in archived:
        raise ConfigError(
            f"partition {partition} of {topic} has no archived segments (archived: {sorted(archived)})"
        )
    return {partition: archived[partition]}


def _bound_offset(archive: ArchiveTopic, partition: int, bound: RangeBound) -> int | None:
    if bound.kind != "time":
        return None
    assert bound.value is not None
    return archive.first_offset_at(partition, bound.value)


def _check_resumable(
    request: RestoreRequest, source: RestoreSource, partition: int, found: PartitionProgress
) -> None:
    recorded = found.latest.source
    if recorded == source:
        return
    differing = [
        name
        for name in RestoreSource.__dataclass_fields__
        if getattr(recorded, name) != getattr(source, name)
    ]
    changes = ", ".join(f"{n}: {getattr(recorded, n)!r} then, {getattr(source, n)!r} now" for n in differing)
    raise ConfigError(
        f"restore {request.restore_id} already restored partition {partition} with other settings "
        f"({changes}); "
        "run it with the same settings to continue it, or give this one another --restore-id"
    )


def plan_runs(
    request: RestoreRequest,
    source: RestoreSource,
    archive: ArchiveTopic,
    archived: dict[int, ArchivedRange],
    target_partitions: int,
    progress: dict[int, PartitionProgress],
) -> list[PartitionRun]:
    runs: list[PartitionRun] = []
    for p, served in sorted(archived.items()):
        target_p = target_partition_for(p, target_partitions, request.partitioner)
        start = resolve_start(request.range_from, served, _bound_offset(archive, p, request.range_from))
        stop = resolve_stop(request.range_to, served, _bound_offset(archive, p, request.range_to))
        found = progress.get(p)
        if found is None:
            plan = PartitionPlan(p, target_p, start, max(start, stop), start, 0, 0, 0)
            runs.append(PartitionRun(plan, start, 0, 0, 0, None))
            continue
        _check_resumable(request, source, p, found)
        latest = found.latest
        first = found.offset_map.covered_start
        plan = PartitionPlan(
            p,
            latest.target_partition,
            first,
            max(stop, latest.next_source_offset),
            latest.next_source_offset,
            latest.sequence + 1,
            latest.records_total,
            latest.bytes_total,
        )
        runs.append(
            PartitionRun(
                plan, plan.position, plan.sequence, latest.records_total, latest.bytes_total, found.offset_map
            )
        )
    return runs


def _count(archive: ArchiveTopic, run: PartitionRun, on_advance: Callable[[int], None]) -> None:
    """Dry run: read what would be restored, produce nothing."""
    stream = archive.chunks(run.plan.source_partition, run.position, run.plan.stop)
    try:
        position = run.position
        while (chunk := stream.next_chunk()) is not None:
            run.records_run += len(chunk.decoded())
            run.bytes_run += chunk.size_bytes
            on_advance(chunk.position - position)
            position = chunk.position
    finally:
        stream.close()


class PreparedRestore:
    """A planned run: archive opened, target checked, producer fenced in, progress read.
    ``execute`` restores (or counts, for a dry run); ``close`` releases everything."""

    def __init__(self, request: RestoreRequest, archive: ArchiveTopic, bucket: str, prefix: str) -> None:
        """``archive``: the source topic's archive, read through ``archive.reader.storage``, which
        also takes the offset maps (next to the archive, under ``prefix`` in ``bucket``)."""
        self.request = request
        self.archive = archive
        self.bucket, self.prefix = bucket, prefix
        self.started = time.monotonic()
        target = request.target
        self.summary = RestoreSummary(
            request.restore_id, request.topic, request.to_topic, target.describe(), request.dry_run, []
        )
        self.producer: Any = None  # the target's transactional producer (none in a dry run)
        try:
            self._plan()
        except BaseException:
            self.close()
            raise

    def _plan(self) -> None:
        request, target, archive = self.request, self.request.target, self.archive
        all_archived = archive.partitions()
        archived = _selected(all_archived, request.partition, request.topic)
        self.topic_id = archive.topic_id(min(archived))
        self.source = RestoreSource(
            self.bucket,
            self.prefix,
            request.topic,
            self.topic_id,
            request.to_topic,
            request.range_from.text(),
            request.range_to.text(),
            request.partitioner,
        )
        needed = max(all_archived) + 1
        target_partitions = target.partition_count(request.to_topic)
        if target_partitions is None:
            if request.dry_run:
                target_partitions = needed
            else:
                if target.create_topic(request.to_topic, needed):
                    self.summary.created_topics.append(request.to_topic)
                target_partitions = target.partition_count(request.to_topic) or needed
        progress_partitions = target.partition_count(request.progress_topic)
        if not request.dry_run:
            progress_partitions = target.ensure_progress_topic(request.progress_topic)
            # fences earlier runs of this restore: their open transaction aborts
            self.producer = target.fenced_transactional_producer(request.transactional_id)
        self.progress_partitions = progress_partitions or 1
        progress = (
            target.committed_progress(request.progress_topic, progress_partitions, request.restore_id)
            if progress_partitions
            else {}
        )
        self.runs = plan_runs(request, self.source, archive, archived, target_partitions, progress)
        self.resumed = {r.plan.source_partition: r.position for r in self.runs if r.offset_map is not None}

    @property
    def total_offsets(self) -> int:
        """Source offsets this run has to go through (records, plus gaps such as markers)."""
        return sum(r.plan.remaining_offsets for r in self.runs)

    def execute(self, on_advance: Callable[[int], None] = lambda _n: None) -> RestoreSummary:
        request, summary = self.request, self.summary
        if self.producer is None:
            for run in self.runs:
                if not run.done:
                    _count(self.archive, run, on_advance)
        else:
            restorer = Restorer(
                self.producer,
                self.archive,
                request.restore_id,
                self.source,
                self.runs,
                request.progress_topic,
                self.progress_partitions,
                request.options,
                on_advance,
            )
            try:
                restorer.run()
            finally:
                summary.transactions = restorer.transactions
                summary.transactions_aborted = restorer.aborted_transactions
                summary.batches_as_archived = restorer.archived_batches
                summary.batches_written = restorer.written_batches
        keys = self._write_bucket_maps() if self.producer is not None else {}
        for run in self.runs:
            dry = self.producer is None
            summary.partitions.append(
                PartitionSummary(
                    run.plan.source_partition,
                    run.plan.target_partition,
                    run.plan.start,
                    run.plan.stop,
                    self.resumed.get(run.plan.source_partition),
                    run.plan.stop if dry else run.position,
                    run.records_run,
                    run.bytes_run,
                    run.records_total + (run.records_run if dry else 0),
                    run.transactions_run,
                    keys.get(run.plan.source_partition),
                )
            )
        summary.seconds = round(time.monotonic() - self.started, 3)
        return summary

    def _write_bucket_maps(self) -> dict[int, str]:
        cluster_id = self.request.target.cluster_id()
        return {
            run.plan.source_partition: write_map(
                self.archive.reader.storage,
                self.prefix,
                self.request.topic,
                self.topic_id,
                cluster_id,
                self.request.restore_id,
                run.offset_map,
            )
            for run in self.runs
            if run.offset_map is not None
        }

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close()
