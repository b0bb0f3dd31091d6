"""The owner's sweep of its partition's folder (objects no record names) and the backfill of the
manifests its copier could not write: once per claim, from a retention pass
(:class:`~processor.lifecycle.retention_service.RetentionService`) or ``processor sweep``. The
proofs are in :mod:`processor.metadata.deletion_proof`."""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from processor import metrics
from processor.errors import ObjectExistsError, StorageError
from processor.kafka.partition import TopicPartition
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.deletion_proof import REFUSED_UNREFERENCED, plan_sweep
from processor.metadata.manifest import SegmentManifest, encode_manifest, manifest_key
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.storage.chunk_storage import ChunkInfo, ChunkStorage

log = logging.getLogger(__name__)

UNREFERENCED_MIN_AGE_MS = 10 * 60 * 1000  # objects younger than this are never swept (uploads in flight)


def storage_now_ms(storage: ChunkStorage, prefix: str) -> int:
    """The storage's own clock: the time it gives an object written now (a probe, deleted at once).
    Ages of objects are judged by it alone, never against this machine's clock."""
    probe = f"{prefix.rstrip('/')}/.clock-probe-{uuid.uuid4()}" if prefix else f".clock-probe-{uuid.uuid4()}"
    storage.create(probe, [b""])
    try:
        info = storage.stat(probe)
    finally:
        try:
            storage.delete(probe)
        except StorageError as exc:  # a stray probe is no object of the layout: nothing sweeps it
            log.warning("could not delete the clock probe %s: %s", probe, exc)
    if info is None or info.modified_ms is None:
        raise StorageError("the storage does not report object times: cannot judge objects' age")
    return info.modified_ms


def sweep_prefix(tp: TopicPartition, part: PartitionRemoteState, deleter: SegmentDeleter) -> str:
    """The folder the sweep lists: the partition's, of its current topic id."""
    topic_id = part.current_topic_id if part.current_topic_id is not None else part.lineage.topic_id
    return deleter.keys.partition_prefix(tp.topic, tp.partition, topic_id)


def sweep_unreferenced(
    tp: TopicPartition,
    part: PartitionRemoteState,
    deleter: SegmentDeleter,
    now_ms: int,
    in_flight: frozenset[uuid.UUID] = frozenset(),
    min_age_ms: int = UNREFERENCED_MIN_AGE_MS,
    dry_run: bool = False,
    listed: list[ChunkInfo] | None = None,
    written_since_ms: int | None = None,
) -> SweepResult:
    """The owner's sweep of ``tp``'s folder of the partition's current topic id
    (:func:`processor.metadata.deletion_proof.plan_sweep`): it deletes the objects no segment the
    fold lists names that its own claim wrote (its attempts that could not record or clean up), and
    counts and logs every other unreferenced object without deleting it (another claim's, another
    topic id's, one with a manifest: ``processor sweep`` and the audit are the operator's tools).

    ``listed``: the folder listed *before* ``part`` was read (else it is listed now), so every
    object of a copy that could still finish is named by a record ``part`` holds. ``now_ms`` and
    ``written_since_ms`` are the storage's clock: objects written before ``written_since_ms`` (the
    storage's time when this claim was first seen) are another holder's, whatever epoch their name
    carries (an epoch handed out again after the metadata partition lost its tail)."""
    if listed is None:
        listed = list(deleter.storage.list(sweep_prefix(tp, part, deleter)))
    plan = plan_sweep(
        listed, part, deleter.keys, now_ms, min_age_ms, in_flight, part.current_epoch, written_since_ms
    )
    result = SweepResult(list(plan.delete), plan.kept)
    if not dry_run:
        for key in plan.delete:
            deleter.storage.delete(key)
    if plan.delete and not dry_run:
        log.info("%s: deleted %d objects of this claim that no segment references", tp, len(plan.delete))
    if plan.kept:
        metrics.DELETIONS_REFUSED.labels(REFUSED_UNREFERENCED).inc(len(plan.kept))
        log.warning(
            "%s: %d objects no segment references were kept (a manifest, or written under another "
            "claim); `processor sweep --topic %s --dry-run` lists them, e.g. %s",
            tp,
            len(plan.kept),
            tp.topic,
            plan.kept[0],
        )
    return result


@dataclass
class SweepResult:
    deleted: list[str] = field(default_factory=list)  # (with dry_run: would be)
    kept: list[str] = field(default_factory=list)  # unreferenced, but without proof they are garbage


def write_missing_manifests(
    tp: TopicPartition,
    part: PartitionRemoteState,
    storage: ChunkStorage,
    skip: frozenset[uuid.UUID] = frozenset(),
) -> int:
    """Write the manifest of every served segment that has none (its copier could not write it),
    so the bucket alone can rebuild the partition's metadata; returns how many were written.
    ``skip``: segments being deleted (``part`` was taken before their deletion)."""
    claim = part.header.claim
    written = 0
    for segment in part.finished():
        if segment.segment_id.id in skip:
            continue
        key = manifest_key(segment.data_object_key)
        if storage.stat(key) is not None:
            continue
        claim_id = claim.claim_id if claim is not None and claim.epoch == segment.writer_epoch else None
        try:
            storage.create(key, [encode_manifest(SegmentManifest(segment, claim_id))])
        except ObjectExistsError:
            continue
        written += 1
    if written:
        metrics.MANIFESTS_BACKFILLED.inc(written)
        log.info("%s: wrote %d missing segment manifests", tp, written)
    return written
