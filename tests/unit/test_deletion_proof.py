"""Deletion only with proof: one test per way acknowledged data could be deleted or unserved by acting
on a stale, partial or compacted view, or on the absence of evidence (the model test,
test_ownership_model.py, checks the same invariants over every interleaving). Pure: the real fold,
planner, retention service, deleter and sweep over a filesystem bucket."""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from processor.errors import FencedWriterError, StorageError
from processor.kafka.partition import TopicPartition
from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import RetentionLimits
from processor.lifecycle.retention_service import RetentionService, clean_partition
from processor.lifecycle.sweep import UNREFERENCED_MIN_AGE_MS, sweep_unreferenced
from processor.metadata.codec import delete_key, encode_value, segment_key
from processor.metadata.fold import MetadataFold
from processor.metadata.fold_reasons import CONDITION, MISPLACED, UNSERVABLE
from processor.metadata.manifest import SegmentManifest, encode_manifest, manifest_key
from processor.metadata.model import (
    ClaimKind,
    PartitionClaim,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
)
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.storage.chunk_storage import Buffer, ChunkInfo
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_claims import KEYS, TP, Log, _with_topic_id, copy, deleter, segment

S = SegmentState
OLD_ID, NEW_ID = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))


def upload(storage: FilesystemChunkStorage, seg: RemoteLogSegmentMetadata, manifest: bool = True) -> None:
    storage.create(seg.data_object_key, [b"d"])
    storage.create(seg.index_object_key, [b"i"])
    if manifest:
        finished = seg.with_state(S.COPY_SEGMENT_FINISHED, seg.event_timestamp_ms)
        storage.create(manifest_key(seg.data_object_key), [encode_manifest(SegmentManifest(finished, None))])


def objects_of(seg: RemoteLogSegmentMetadata) -> set[str]:
    return {seg.data_object_key, seg.index_object_key, manifest_key(seg.data_object_key)}


def keys_in(storage: FilesystemChunkStorage) -> set[str]:
    return {i.key for i in storage.list("")}


def fresh(log: Log, point: int | None = None) -> MetadataFold:
    """A reader of the topic compacted up to ``point`` (everything, by default): of the messages
    below it only the latest of each key survives, and tombstones go."""
    point = len(log.messages) if point is None else point
    latest: dict[bytes, int] = {}
    for offset, key, _value in log.messages:
        if offset < point:
            latest[key] = offset
    fold = MetadataFold()
    for offset, key, value in log.messages:
        if offset >= point or (latest[key] == offset and value is not None):
            fold.apply_raw(offset, key, value)
    return fold


def served(fold: MetadataFold) -> set[uuid.UUID]:
    return {s.segment_id.id for s in fold.partition(TP).finished()}


def test_a_copy_that_finishes_during_a_retention_pass_is_never_deleted(tmp_path: Path) -> None:
    """The pass read the partition while copy U was STARTED; the copier then published FINISHED U
    (accepted) and dropped U from its in-flight set; only then did the pass ask for the in-flight
    set. Before: U was planned as dangling, its DELETE_SEGMENT_STARTED accepted, its objects gone."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    started = segment(0, 9, epoch, S.COPY_SEGMENT_STARTED)
    log.publish(started)
    upload(storage, started, manifest=False)
    in_flight = {started.segment_id.id}

    class CopyFinishesAfterTheRead:
        def state(self, tp: TopicPartition) -> PartitionRemoteState:
            snapshot = log.state()
            finished = started.with_state(S.COPY_SEGMENT_FINISHED, 2)
            assert log.confirm(finished, log.publish(finished))
            in_flight.clear()  # the copier is done with U
            return snapshot

    service = RetentionService(
        RetentionConfig(RetentionLimits(), ()),
        CopyFinishesAfterTheRead(),
        deleter(log, storage),
        None,
        in_flight=lambda tp: frozenset(in_flight),
    )
    service.run_pass({TP: epoch})
    assert served(log.fold) == {started.segment_id.id}
    assert {started.data_object_key, started.index_object_key} <= keys_in(storage)


def test_a_conditional_delete_planned_on_a_started_copy_loses_to_its_finished(tmp_path: Path) -> None:
    """The fold has the last word even when the pass has no in-flight set at all: the deletion names
    the state it was planned on, and a copy that finished since makes the fold reject it."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    started = segment(0, 9, epoch, S.COPY_SEGMENT_STARTED)
    log.publish(started)
    upload(storage, started, manifest=False)  # the plan runs before the copier writes it
    planned_on = log.state()
    assert log.confirm(started, log.publish(started.with_state(S.COPY_SEGMENT_FINISHED, 2)))
    with pytest.raises(FencedWriterError):
        clean_partition(TP, planned_on, deleter(log, storage), epoch, RetentionLimits(), 0)
    assert log.fold.rejected == {CONDITION: 1}
    assert served(log.fold) == {started.segment_id.id}
    assert {started.data_object_key, started.index_object_key} <= keys_in(storage)
    # and the next pass, on a view that shows the FINISHED, goes on as usual
    clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 0)
    assert served(log.fold) == {started.segment_id.id}


def test_a_finished_copy_without_the_topics_id_is_rejected_not_accepted_unserved() -> None:
    """A copy that carried no topic id (one failed DescribeTopics) in a partition whose topic was
    re-created: before, the fold accepted its FINISHED (the copier counted it done) without serving
    it, and the next retention pass deleted it as unreferenced."""
    log = Log()
    log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, OLD_ID))
    epoch = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, NEW_ID))
    ok, _finished = copy(log, 0, 9, epoch)  # segment() builds ids without a topic id
    assert not ok, "the writer must not count it done"
    assert set(log.fold.rejected) == {UNSERVABLE}  # its STARTED already


def test_a_retired_topic_ids_history_is_never_deleted_by_a_worker(tmp_path: Path) -> None:
    """Disaster recovery: the archive of topic id X, a topic re-created as Y (a restore), a worker
    claiming under Y. X's segments are no longer served; before, retention deleted them all."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    first = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, OLD_ID))
    sid = RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4(), OLD_ID)
    keys = KEYS.segment(TP.topic, TP.partition, 0, sid.id, first, OLD_ID)
    old = dataclasses.replace(
        segment(0, 9, first), segment_id=sid, data_object_key=keys.data, index_object_key=keys.index
    )
    log.publish(old)
    upload(storage, old)
    epoch = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, NEW_ID))
    # the first copy under the new id retires the old one (the claim alone changes nothing served)
    new_sid = RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4(), NEW_ID)
    new_keys = KEYS.segment(TP.topic, TP.partition, 0, new_sid.id, epoch, NEW_ID)
    log.publish(
        dataclasses.replace(
            segment(0, 4, epoch, S.COPY_SEGMENT_STARTED),
            segment_id=new_sid,
            data_object_key=new_keys.data,
            index_object_key=new_keys.index,
        )
    )
    assert served(log.fold) == set()
    plan, out = clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 0)
    assert plan.unserved == (old,)
    assert old.segment_id not in {s.segment_id for s in out.deleted}  # (the new copy, never uploaded, is)
    assert objects_of(old) <= keys_in(storage)


def test_the_sweep_deletes_nothing_of_an_archive_its_metadata_does_not_know(tmp_path: Path) -> None:
    """A lost, misspelt or other cluster's metadata topic: the fold knows nothing of the archive.
    Before, the once-per-claim sweep deleted every object older than ten minutes, manifests too."""
    storage = FilesystemChunkStorage(tmp_path)
    archived = [segment(i * 10, i * 10 + 9, 3) for i in range(3)]
    for seg in archived:
        upload(storage, seg)
    other_cluster = dataclasses.replace(
        archived[0], segment_id=RemoteLogSegmentId(TP.topic, 0, uuid.uuid4(), NEW_ID)
    )
    other_keys = KEYS.segment(TP.topic, 0, 0, other_cluster.segment_id.id, 3, NEW_ID)
    storage.create(other_keys.data, [b"d"])
    log = Log()  # an empty metadata topic
    epoch = log.claim("w")
    before = keys_in(storage)
    result = sweep_unreferenced(TP, log.state(), deleter(log, storage), 10**15)
    assert result.deleted == [] and keys_in(storage) == before
    assert set(result.kept) == set().union(*(objects_of(s) for s in archived))
    assert epoch != 3


def test_a_zombies_rejected_delete_cannot_outlive_the_segments_finished_in_compaction(
    tmp_path: Path,
) -> None:
    """A zombie's DELETE_SEGMENT_STARTED of served S, rejected, and no owner to re-publish S before
    the cleaner runs. Before, both shared S's key: the compacted topic kept only the rejected delete,
    a fresh reader filed S as an orphan, and its owner deleted S's objects."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    zombie = log.claim("zombie")
    _ok, kept = copy(log, 0, 9, zombie, "zombie")
    upload(storage, kept)
    owner = log.claim("owner")
    log.publish(kept.deleting(3, "zombie", zombie))
    assert served(log.fold) == {kept.segment_id.id}
    compacted = fresh(log)
    assert served(compacted) == {kept.segment_id.id} and compacted.partition(TP).orphans == {}
    state = PartitionRemoteState.of(compacted.partition(TP))
    clean_partition(TP, state, deleter(log, storage, "owner"), owner, RetentionLimits(), 0)
    assert objects_of(kept) <= keys_in(storage)


def test_a_broken_record_and_the_segment_it_was_rejected_against_compact_consistently() -> None:
    """A broken FINISHED B overlapping served S1 (and reaching into where S3 will be) lands after the
    owner's pass waited for its follower; S3 is copied; retention deletes S1. Before, S1 was
    tombstoned with its deletion, and a cleaning point after that tombstone but before B's made fresh
    readers accept B and reject S3. Now S1's copy key outlives every rejected record judged against
    it: S1 is tombstoned a pass later, after B was neutralised."""
    log = Log()
    storage_free = deleter(log, FilesystemChunkStorage(Path("/nonexistent-bucket-not-touched")))
    epoch = log.claim("w")
    ok1, s1 = copy(log, 0, 9, epoch)
    assert ok1
    view = log.state()  # the pass's caught-up view
    broken = segment(5, 25, epoch)  # a forged record of the current claim
    log.publish(broken)
    ok3, s3 = copy(log, 10, 29, epoch)
    assert ok3 and served(log.fold) == {s1.segment_id.id, s3.segment_id.id}
    # the pass planned on its view (S1 over the size limit), then the owner's next passes
    clean_partition(TP, view, storage_free, epoch, RetentionLimits(retention_bytes=0), 10**6)
    for _pass in range(2):
        clean_partition(TP, log.state(), storage_free, epoch, RetentionLimits(), 10**6)
    live = served(log.fold)
    assert s3.segment_id.id in live and s1.segment_id.id not in live
    for point in range(len(log.messages) + 1):
        assert served(fresh(log, point)) == live, f"a cleaning point at {point} changes what is served"


def test_tombstones_are_validated_and_a_hostile_one_is_repaired(tmp_path: Path) -> None:
    """A tombstone has no value and so no epoch: before, one keyed with another partition and a
    served segment's UUID unserved that segment in the live fold (a fresh fold still served it) and
    the next sweep deleted its objects; one under the segment's own key did the same."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    _ok, s = copy(log, 0, 9, epoch)
    upload(storage, s)
    log._append(f"{TP.topic}/{TP.partition + 1}/{s.segment_id.id}".encode(), None)
    log._append(delete_key(s.segment_id), None)
    log._append(segment_key(s.segment_id), None)
    assert log.fold.rejected == {MISPLACED: 3}
    assert served(log.fold) == {s.segment_id.id}
    assert [x.segment_id for x in log.state().repairs()] == [s.segment_id]
    clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 0)
    assert log.state().repairs() == [] and served(fresh(log)) == {s.segment_id.id}
    assert objects_of(s) <= keys_in(storage)


def test_a_zombies_late_delete_of_a_deleted_segment_is_repaired_before_it_is_forgotten(
    tmp_path: Path,
) -> None:
    """A previous owner's DELETE_SEGMENT_FINISHED of a segment the current owner has deleted comes
    late (rejected: stale claim). Before, the owner's pass tombstoned the segment's keys at once: a
    cleaner point between the late record and those tombstones kept the late record (the delete
    key's latest) and the copy's FINISHED, and a reader of the compacted topic served the deleted
    segment again. Now the pass re-publishes the delete state first, and every point agrees."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    old = log.claim("a")
    _ok, s = copy(log, 0, 9, old, writer="a")
    new = log.claim("b")
    started = s.deleting(3, "b", new)
    assert log.accepted[log.publish(started)]
    assert log.accepted[log.publish(started.with_state(SegmentState.DELETE_SEGMENT_FINISHED, 4))]
    late = dataclasses.replace(s.with_state(SegmentState.DELETE_SEGMENT_FINISHED, 5), writer_id="a")
    assert not log.accepted[log.publish(late)]  # the zombie's, under its old claim
    clean_partition(TP, log.state(), deleter(log, storage, "b"), new, RetentionLimits(), 0)
    assert served(log.fold) == set() and log.state().segments == {}
    for point in range(len(log.messages) + 1):
        assert served(fresh(log, point)) == set(), f"a cleaning point at {point} serves the deleted segment"


def test_a_worker_refuses_partitions_whose_archive_its_metadata_does_not_know(tmp_path: Path) -> None:
    """A metadata topic lost and re-created empty, misspelt, or another deployment's: the bucket holds
    manifests of the partition, the metadata nothing. Before, the worker led it: re-offloaded over the
    archive and swept it. Now it is not led (unready with the reason) until the metadata knows it."""
    from processor.health import HEALTH
    from processor.leader.resume import BEHIND_COMPONENT, ResumePlanner
    from processor.metadata.remote_log_state import RemoteLogState
    from processor.wiring.resume import archived_manifests
    from tests.unit.test_topic_ids import FoldSink

    storage = FilesystemChunkStorage(tmp_path)
    archived = segment(0, 9, 5)
    upload(storage, archived)
    state = RemoteLogState()

    def load(tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        return {tp: state.partition(tp) for tp in tps}

    other = TopicPartition(TP.topic, 1)  # nothing archived: led as usual
    planner = ResumePlanner(
        "w1",
        4,
        load,
        lambda topics: {},
        FoldSink(state),
        archived_manifests=archived_manifests(storage, KEYS),
    )
    held = planner.prepare([TP, other])
    assert list(held) == [other] and planner.behind == {TP}
    assert any(p.component == BEHIND_COMPONENT for p in HEALTH.problems())
    # once the metadata knows the partition (rebuild-metadata), it is led
    claim = state.partition(TP).current_epoch
    assert claim is not None
    state.apply(dataclasses.replace(archived, writer_epoch=claim, writer_id="w1"))
    assert list(planner.prepare([TP])) == [TP] and planner.behind == set()
    assert not any(p.component == BEHIND_COMPONENT for p in HEALTH.problems())


@pytest.mark.parametrize("conditional", [True, False], ids=["conditional", "unconditional"])
def test_a_forged_delete_with_the_owners_epoch_and_writer_id_deletes_nothing_and_is_undone(
    tmp_path: Path, conditional: bool
) -> None:
    """The claim's epoch and writer id can be read from the topic. Before: a DELETE_SEGMENT_STARTED
    carrying both was accepted (the segment unserved at once), and the owner's next pass finished
    the deletion, objects and manifest: a retried delete did not ask who had started it. Now a
    deletion is finished only by the process that started it (it confirmed its own record), or once
    its objects are partly gone; otherwise the owner re-publishes the segment and serves it again."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    _ok, s = copy(log, 0, 9, epoch)
    upload(storage, s)
    forged = s.deleting(3, "w", epoch)
    if not conditional:
        forged = dataclasses.replace(forged, replaces_state=None)
    log.publish(forged)
    owner = deleter(log, storage)
    clean_partition(TP, log.state(), owner, epoch, RetentionLimits(), 10**6)
    assert objects_of(s) <= keys_in(storage)
    assert served(log.fold) == {s.segment_id.id}
    clean_partition(TP, log.state(), owner, epoch, RetentionLimits(), 10**6)
    assert objects_of(s) <= keys_in(storage)
    for point in range(len(log.messages) + 1):
        assert served(fresh(log, point)) == {s.segment_id.id}, f"a cleaning point at {point} unserves it"


def test_a_deletion_its_own_process_started_is_finished_and_one_cut_short_is_started_again(
    tmp_path: Path,
) -> None:
    """The owner's own deletions go on as before: one whose objects failed to go is finished by the
    process that started it; one a crashed process left before any object went is served again by
    the next (the start offset past it is not its own either) and deleted by the next pass that
    finds it past the limits."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    _ok, a = copy(log, 0, 9, epoch)
    upload(storage, a)
    expire = RetentionLimits(retention_bytes=0)
    for crash in (False, True):
        first = deleter(log, storage)

        def failing(segments: Sequence[RemoteLogSegmentMetadata], *_: object) -> dict[uuid.UUID, str]:
            return {s.segment_id.id: "injected" for s in segments}

        first.delete_objects_of = failing  # type: ignore[method-assign,assignment]
        clean_partition(TP, log.state(), first, epoch, expire, 10**6)
        assert served(log.fold) == set() and objects_of(a) <= keys_in(storage)
        if not crash:
            del first.delete_objects_of
            clean_partition(TP, log.state(), first, epoch, expire, 10**6)  # the same process
            assert not objects_of(a) & keys_in(storage)
            _ok, a = copy(log, 10, 19, epoch)
            upload(storage, a)
            continue
        second = deleter(log, storage)  # the process after a crash: the deletion is not its own
        clean_partition(TP, log.state(), second, epoch, RetentionLimits(), 10**6)
        assert served(log.fold) == {a.segment_id.id} and objects_of(a) <= keys_in(storage)
        clean_partition(TP, log.state(), second, epoch, expire, 10**6)
        assert served(log.fold) == set() and not objects_of(a) & keys_in(storage)


def test_a_repair_is_never_reordered_behind_an_overlapping_record_by_compaction(tmp_path: Path) -> None:
    """A zombie's FINISHED of served S (rejected: it shadows S's key, the owner repairs it) and a
    broken FINISHED B over part of S's range with no objects, under the current claim and writer id
    (rejected: overlap), both land before the owner's next pass. Before: a cleaner point between the
    zombie's record and the repair dropped S's FINISHED and kept the zombie's, so readers from the
    topic (and the RocksDB cache) accepted B, served it instead of S and rejected the repair. Now the
    owner deletes B under its claim before it repairs S: every cleaning point serves S alone."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    zombie = log.claim("z")
    _ok, s = copy(log, 0, 9, zombie, "z")
    upload(storage, s)
    owner = log.claim("w")
    again = dataclasses.replace(s, event_timestamp_ms=5)  # the zombie publishes S's FINISHED again
    assert not log.accepted[log.publish(again)]
    broken = dataclasses.replace(
        segment(5, 15, owner), segment_id=RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4())
    )
    keys = KEYS.segment(TP.topic, TP.partition, 5, broken.segment_id.id, owner)
    broken = dataclasses.replace(broken, data_object_key=keys.data, index_object_key=keys.index)
    assert not log.accepted[log.publish(broken)]
    for _pass in range(2):
        clean_partition(TP, log.state(), deleter(log, storage, "w"), owner, RetentionLimits(), 10**6)
    assert served(log.fold) == {s.segment_id.id}
    for point in range(len(log.messages) + 1):
        assert served(fresh(log, point)) == {s.segment_id.id}, f"a cleaning point at {point} serves B"
    assert objects_of(s) <= keys_in(storage)


@pytest.mark.parametrize("min_age_ms", [UNREFERENCED_MIN_AGE_MS, 0])
def test_the_sweep_keeps_a_copy_that_finishes_during_the_pass_whatever_the_storages_clock(
    tmp_path: Path, min_age_ms: int
) -> None:
    """A copy starts and finishes while the pass runs, after the pass read the partition's state,
    and its manifest write fails; the storage's clock is 11 minutes behind the worker's. Before: the
    sweep listed the bucket after reading the state (the reverse of the order its proof relies on)
    and judged age by the worker's clock against the storage's, so the served copy's data and index
    were deleted. Now the listing comes first and age is the storage's own."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    copied: list[RemoteLogSegmentMetadata] = []

    class CopyDuringThePass:
        def state(self, tp: TopicPartition) -> PartitionRemoteState:
            snapshot = log.state()  # then a copy, right after every read of the state
            start = 10 * len(copied)
            started = segment(start, start + 9, epoch, S.COPY_SEGMENT_STARTED)
            log.publish(started)
            upload(storage, started, manifest=False)  # the manifest write fails
            finished = started.with_state(S.COPY_SEGMENT_FINISHED, 2)
            assert log.confirm(finished, log.publish(finished))
            copied.append(finished)
            return snapshot

    worker_clock = lambda: int(time.time() * 1000) + 11 * 60_000  # noqa: E731
    service = RetentionService(
        RetentionConfig(RetentionLimits(), ()),
        CopyDuringThePass(),
        deleter(log, storage),
        None,
        clock_ms=worker_clock,
        unreferenced_min_age_ms=min_age_ms,
    )
    for _pass in range(3):
        service.run_pass({TP: epoch})
    assert served(log.fold) == {s.segment_id.id for s in copied}
    for seg in copied:
        assert {seg.data_object_key, seg.index_object_key} <= keys_in(storage), "a served copy lost objects"


def test_a_late_finished_never_undoes_a_deletion_of_an_unfinished_copy(tmp_path: Path) -> None:
    """Only a served segment's deletion can be undone by its claim holder. A deletion of a copy that
    was still STARTED (an earlier version's unconditional one, under the copy key) stays: the copy's
    late FINISHED is rejected, as the deleter is removing its objects."""
    log = Log()
    epoch = log.claim("w")
    started = segment(0, 9, epoch, S.COPY_SEGMENT_STARTED)
    log.publish(started)
    legacy = dataclasses.replace(started.deleting(3, "w", epoch), replaces_state=None)
    assert log.accepted[log._append(segment_key(started.segment_id), encode_value(legacy))]
    assert not log.accepted[log.publish(started.with_state(S.COPY_SEGMENT_FINISHED, 4))]
    assert served(log.fold) == set()


def test_a_forged_start_offset_unserves_but_deletes_nothing(tmp_path: Path) -> None:
    """A remote log start offset carrying the claim's epoch and writer id moves the start forward:
    readers stop serving below it (they cannot tell it from the holder's). Before: the holder's next
    pass deleted every segment below it, acknowledged data, as the user's retention had asked. Now a
    start offset breach deletes only below the start this process published itself; below a start
    it did not publish, only the user's time or size limits delete."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    kept = [copy(log, i * 10, i * 10 + 9, epoch)[1] for i in range(3)]
    for seg in kept:
        upload(storage, seg)
    assert log.accepted[log.publish(RemoteLogStartOffset(TP, 25, 3, "w", epoch))]
    owner = deleter(log, storage)
    clean_partition(TP, log.state(), owner, epoch, RetentionLimits(), 10**6)
    for seg in kept:
        assert objects_of(seg) <= keys_in(storage), "a forged start offset deleted acknowledged data"
    # the holder's own retention still deletes below the start it moved
    clean_partition(TP, log.state(), owner, epoch, RetentionLimits(retention_bytes=150), 10**6)
    assert not objects_of(kept[0]) & keys_in(storage)


@pytest.mark.xfail(
    strict=True,
    reason="unproven: only an owner can re-publish a state a rejected record shadows, and here none runs",
)
def test_an_earlier_versions_zombie_delete_under_the_copy_key_with_no_owner_past_the_lag(
    tmp_path: Path,
) -> None:
    """A worker of the previous release (deletes under the segment's copy key) paused past its claim
    deletes served S: rejected, and it shadows S's copy key. No owner runs before the cleaner
    reaches it: the compacted topic keeps only the rejected delete, and readers from the topic serve
    less than the live ones (nothing is deleted: S's objects and manifest stay; rebuild-metadata
    serves it again)."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    old = log.claim("z")
    _ok, s = copy(log, 0, 9, old, "z")
    upload(storage, s)
    log.claim("w")  # the current owner, which then stops
    late = dataclasses.replace(s.deleting(3, "z", old), replaces_state=None)
    assert not log.accepted[log._append(segment_key(s.segment_id), encode_value(late))]
    assert served(log.fold) == {s.segment_id.id}
    assert objects_of(s) <= keys_in(storage)
    assert served(fresh(log)) == {s.segment_id.id}


def test_a_sweep_that_finds_manifests_the_metadata_does_not_name_reports_the_archive_unready(
    tmp_path: Path,
) -> None:
    """The metadata partition lost its tail (or the topic is another one): the sweep keeps every
    object it cannot prove garbage, and the manifests among them are acknowledged segments the
    metadata no longer serves. Before, only a log line and a counter said so, and the worker stayed
    ready; now the ``archive`` health problem names the partition and `processor rebuild-metadata`,
    until the partition is led elsewhere (its holder's sweep reports it then)."""
    from processor.health import HEALTH
    from processor.lifecycle.retention_service import PROOF_COMPONENT

    storage = FilesystemChunkStorage(tmp_path)
    lost = segment(0, 9, 3)
    upload(storage, lost)  # its records went with the metadata partition's tail
    log = Log()
    epoch = log.claim("w")

    class Now:
        def state(self, tp: TopicPartition) -> PartitionRemoteState:
            return log.state()

    service = RetentionService(
        RetentionConfig(RetentionLimits(), ()), Now(), deleter(log, storage), None, unreferenced_min_age_ms=0
    )

    def archive_problem() -> str | None:
        return next((p.reason for p in HEALTH.problems() if p.component == PROOF_COMPONENT), None)

    HEALTH.clear(PROOF_COMPONENT)
    try:
        service.run_pass({TP: epoch})  # the first pass under the claim: the sweep is due at a later one
        assert archive_problem() is None
        service.run_pass({TP: epoch})
        problem = archive_problem()
        assert problem is not None and str(TP) in problem and "rebuild-metadata" in problem
        assert objects_of(lost) <= keys_in(storage)
        service.run_pass({TP: epoch})  # later passes do not sweep again: the problem stays
        assert archive_problem() is not None
        service.run_pass({})
        assert archive_problem() is None
    finally:
        HEALTH.clear(PROOF_COMPONENT)


def test_a_manifest_backfill_that_fails_fails_that_sweep_alone_and_the_pass_reports_its_deletions(
    tmp_path: Path,
) -> None:
    """The once-per-claim sweep writes the manifests its copier could not; a storage error there
    raised out of the whole pass after retention had deleted, so the deletions went unreported (and
    the partitions after it were not cleaned). Now it fails that partition's sweep alone, retried at
    the next pass, and the pass reports what it deleted."""

    class ManifestsFail(FilesystemChunkStorage):
        failing = False

        def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
            if self.failing and key.endswith("-manifest"):
                raise StorageError(f"injected: cannot write {key}", retriable=False)
            return super().create(key, parts)

    storage = ManifestsFail(tmp_path)
    log = Log()
    epoch = log.claim("w")
    old = copy(log, 0, 9, epoch)[1]
    new = copy(log, 10, 19, epoch)[1]
    upload(storage, old)
    upload(storage, new, manifest=False)  # its copier's manifest write failed

    class Now:
        def state(self, tp: TopicPartition) -> PartitionRemoteState:
            return log.state()

    service = RetentionService(
        RetentionConfig(RetentionLimits(), ()), Now(), deleter(log, storage), None, unreferenced_min_age_ms=0
    )
    assert service.run_pass({TP: epoch}).ok  # the first pass under the claim: no sweep yet
    service.config = RetentionConfig(RetentionLimits(retention_bytes=100), ())
    storage.failing = True
    result = service.run_pass({TP: epoch})
    assert result.sweeps_failed == [TP] and not result.ok
    assert [s.segment_id for s in result.outcome.deleted] == [old.segment_id]
    assert not objects_of(old) & keys_in(storage)
    storage.failing = False
    assert service.run_pass({TP: epoch}).ok  # retried: the missing manifest is written
    assert manifest_key(new.data_object_key) in keys_in(storage)


def test_a_deletion_not_started_here_is_left_when_served_segments_hold_its_offsets(tmp_path: Path) -> None:
    """A forged DELETE_SEGMENT_STARTED unserves X (all its objects in place); a copy of the same
    offsets is then served. The owner's pass did not start X's deletion, but stating X again would
    overlap what is served: it is left as it is (objects kept), with no record the readers refuse."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    _ok, x = copy(log, 0, 9, epoch)
    upload(storage, x)
    forged = dataclasses.replace(x.with_state(S.DELETE_SEGMENT_STARTED, 3), replaces_state=None)
    assert log.confirm(forged, log.publish(forged))
    assert served(log.fold) == set()
    ok, y = copy(log, 0, 9, epoch)
    assert ok
    upload(storage, y)
    clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 0)
    assert served(log.fold) == {y.segment_id.id}
    assert log.fold.rejected == {}, log.fold.rejected
    assert objects_of(x) <= keys_in(storage)


def test_a_restored_segment_of_a_recreated_topic_is_served_from_the_compacted_topic() -> None:
    """A re-created topic's first copy (it switches the history); a forged claim under a made-up id
    and a forged DELETE_SEGMENT_STARTED of the copy; an operator's claim serves it again (its
    FINISHED stated again). Once the cleaner drops the first copy's records, that statement is the
    only copy record a reader of the compacted topic sees, and it comes after the deletion. Before,
    that reader refused it (``old_topic_id``: the deletion of a segment it never saw does not switch
    the history, and a segment being deleted did not count as a first copy) and served nothing."""
    log = Log()
    log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, OLD_ID))
    owner = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, NEW_ID))
    first = _with_topic_id(segment(0, 9, owner, S.COPY_SEGMENT_STARTED), NEW_ID, owner)
    assert log.confirm(first, log.publish(first))
    done = first.with_state(S.COPY_SEGMENT_FINISHED, 1)
    assert log.confirm(done, log.publish(done))
    made_up = str(uuid.UUID(int=99))
    forger = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "mallory", 0, made_up))
    assert log.accepted[log.publish(done.deleting(2, "mallory", forger))]
    assert served(log.fold) == set()
    admin = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.ADMIN, "op", 0, NEW_ID))
    again = dataclasses.replace(done, writer_id="op", writer_epoch=admin, event_timestamp_ms=3)
    assert log.confirm(again, log.publish(again))
    assert served(log.fold) == {done.segment_id.id}
    for point in range(len(log.messages) + 1):
        assert served(fresh(log, point)) == {done.segment_id.id}, f"a cleaner point at {point}"
