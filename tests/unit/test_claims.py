"""Ownership by claims on the metadata log, one test per defect the claim protocol fixes (the model
test, test_ownership_model.py, checks the invariants over every interleaving). Pure."""

from __future__ import annotations

import dataclasses
import time
import uuid
from pathlib import Path

import pytest

from processor.errors import FencedWriterError, InvalidNameError
from processor.follower.cache_writes import RawMessage
from processor.follower.materializer import Materializer
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_retries import retry_failed
from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import DeleteReason, RetentionLimits, plan_retention
from processor.lifecycle.retention_service import RetentionService, StateView, clean_partition
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.codec import delete_key, encode_value, record_key, segment_key
from processor.metadata.fencing import STALE_EPOCH
from processor.metadata.fold import Fold, MetadataFold
from processor.metadata.fold_reasons import INTERNAL, INVALID, NO_CLAIM, OVERLAP
from processor.metadata.memory_store import MemoryStore
from processor.metadata.model import (
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogStartOffset,
    SegmentState,
)
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage
from processor.wiring.read_your_write import confirm_by_follower

TP = TopicPartition("orders", 0)
KEYS = ObjectKeyFactory("archive")
S = SegmentState


class Log:
    """One metadata partition: what writers publish is appended, folded live, and confirmable."""

    def __init__(self) -> None:
        self.fold = MetadataFold()
        self.messages: list[tuple[int, bytes, bytes | None]] = []
        self.accepted: dict[int, bool] = {}
        self.failed: list[RemoteLogSegmentMetadata] = []

    def publish(self, record: MetadataRecord) -> int:
        return self._append(record_key(record), encode_value(record))

    def tombstone(self, segment: RemoteLogSegmentMetadata) -> int:
        self._append(segment_key(segment.segment_id), None)
        return self._append(delete_key(segment.segment_id), None)

    def _append(self, key: bytes, value: bytes | None) -> int:
        offset = len(self.messages)
        self.messages.append((offset, key, value))
        self.accepted[offset] = self.fold.apply_raw(offset, key, value).accepted
        return offset

    def confirm(self, record: MetadataRecord, offset: int) -> bool:
        return self.accepted.get(offset, False)

    def claim(self, writer: str, kind: ClaimKind = ClaimKind.LEAD) -> int:
        return self.publish(PartitionClaim(TP, uuid.uuid4(), kind, writer, 0))

    def state(self) -> PartitionRemoteState:
        return PartitionRemoteState.of(self.fold.partition(TP))

    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None:
        self.failed.append(segment)

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None:
        pass


def segment(
    start: int, end: int, epoch: int, state: SegmentState = S.COPY_SEGMENT_FINISHED, writer: str = "w"
) -> RemoteLogSegmentMetadata:
    sid = RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4())
    keys = KEYS.segment(TP.topic, TP.partition, start, sid.id, epoch)
    return RemoteLogSegmentMetadata(
        sid, start, end, 1_000, 1, writer, epoch, ((0, start),), 100, state,
        keys.data, keys.index, 2, end - start + 1, 0, 10,
    )  # fmt: skip


def copy(
    log: Log, start: int, end: int, epoch: int, writer: str = "w"
) -> tuple[bool, RemoteLogSegmentMetadata]:
    started = segment(start, end, epoch, S.COPY_SEGMENT_STARTED, writer)
    log.publish(started)
    finished = started.with_state(S.COPY_SEGMENT_FINISHED, 2)
    return log.confirm(finished, log.publish(finished)), finished


def deleter(log: Log, storage: FilesystemChunkStorage, writer: str = "w") -> SegmentDeleter:
    return SegmentDeleter(storage, log, log, log, writer, KEYS, log.confirm)


def test_retention_writes_with_the_lanes_claim_and_never_fences_its_own_worker(tmp_path: Path) -> None:
    """Defect 1: retention stamped its records with the group generation, newer than a kept
    partition's epoch, and the worker's own follower then revoked the partition. Records now carry
    the claim epoch the lane holds, whatever the generation, and every one is accepted."""
    log = Log()
    epoch = log.claim("w")
    for i in range(3):
        assert copy(log, i * 10, i * 10 + 9, epoch)[0]
    generation = epoch + 7  # the group went through rebalances; the partition stayed here
    service = RetentionService(
        RetentionConfig(RetentionLimits(retention_ms=10), ()),
        StateView({TP: log.state()}),
        deleter(log, FilesystemChunkStorage(tmp_path)),
        None,
        clock_ms=lambda: 1_000_000,
    )
    result = service.run_pass({TP: epoch})
    assert len(result.outcome.deleted) == 3 and result.fenced == []
    assert all(log.accepted.values()), "a record of the claim holder was rejected"
    assert log.state().current_epoch == epoch != generation


def test_two_owners_never_share_an_epoch_and_no_acknowledged_offset_is_lost() -> None:
    """Defect 2: with epochs from group generations two owners could hold the same number; B
    finishes 100..249, A 100..199, B 250..399 left 200..249 unserved and retention then deleted
    B's only copy. Claims are offsets in the log: unique, and A's late copy is rejected."""
    log = Log()
    a = log.claim("A")
    assert copy(log, 0, 99, a, "A")[0]
    b = log.claim("B")
    assert a != b
    assert copy(log, 100, 249, b, "B")[0]
    ok, late = copy(log, 100, 199, a, "A")  # A paused past its session timeout, then went on
    assert not ok
    assert copy(log, 250, 399, b, "B")[0]
    served = [(s.start_offset, s.end_offset) for s in log.state().finished()]
    assert served == [(0, 99), (100, 249), (250, 399)]
    plan = plan_retention(
        log.state().segments.values(),
        RetentionLimits(),
        10_000,
        served={s.segment_id.id for s in log.state().finished()},
        current_epoch=b,
    )
    assert plan.expired == () and all(
        s.state is not S.COPY_SEGMENT_FINISHED or s.segment_id == late.segment_id for s in plan.dangling
    )


def test_read_your_write_never_fails_open(tmp_path: Path) -> None:
    """Defect 3: a follower that did not confirm within 10 s counted as "accepted". Now a record not
    confirmed is not accepted: the writer stops."""
    cache = MetadataCache(tmp_path / "cache")
    materializer = Materializer(cache, lambda: None, "meta", [0])  # type: ignore[arg-type, return-value]
    confirm = confirm_by_follower(materializer, 1, timeout_s=0.1)
    assert confirm(segment(0, 9, 5), 3) is None  # the follower is not running: unknown, never accepted
    cache.close()


def test_retention_never_deletes_the_leaders_copy_in_progress() -> None:
    """Defect 4: a copy in progress of the new leader over a range an older epoch's finished segment
    still covered was taken for dangling and deleted. Only copies that can never finish are."""
    log = Log()
    old = log.claim("old")
    assert copy(log, 0, 99, old, "old")[0]
    new = log.claim("new")
    mine = segment(100, 199, new, S.COPY_SEGMENT_STARTED, "new")
    log.publish(mine)
    theirs = segment(100, 149, old, S.COPY_SEGMENT_STARTED, "old")  # the old owner's, written before
    state = log.state()
    segments = [*state.segments.values(), theirs]
    plan = plan_retention(
        segments, RetentionLimits(), 10_000, current_epoch=new, in_flight={mine.segment_id.id}
    )
    assert mine not in plan.dangling and theirs in plan.dangling
    assert mine in plan_retention(segments, RetentionLimits(), 10_000, current_epoch=new).dangling


def test_deletes_touch_only_the_segments_own_objects(tmp_path: Path) -> None:
    """Defect 5: deletes trusted object keys from the metadata and deletion topics."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    _ok, served = copy(log, 0, 9, epoch)
    for key in (served.data_object_key, served.index_object_key, "other-app/secret.log"):
        storage.create(key, [b"x"])
    d = deleter(log, storage)
    hostile = dataclasses.replace(
        segment(10, 19, epoch, S.DELETE_SEGMENT_STARTED),
        data_object_key="other-app/secret.log",
        index_object_key="other-app/secret.log-index",
    )
    assert d.delete_objects(hostile) is not None and log.failed == [hostile]  # refused, reported
    with pytest.raises(InvalidNameError):
        d.owned_objects(hostile)
    other_segment = dataclasses.replace(
        segment(10, 19, epoch, S.DELETE_SEGMENT_STARTED),
        data_object_key=served.data_object_key,
        index_object_key=served.index_object_key,
    )
    with pytest.raises(InvalidNameError):
        d.owned_objects(other_segment)
    # a deletion-topic entry naming a served segment is resolved, never acted on
    entry = served.with_state(S.DELETE_SEGMENT_STARTED, 3)
    out = retry_failed(d, [entry], epoch, log.state().accepted_state)
    assert out.deleted == [] and out.failed == []
    assert served.data_object_key in {i.key for i in storage.list("")}
    assert "other-app/secret.log" in {i.key for i in storage.list("")}


class NoFailures:
    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None:
        pass

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None:
        pass


def test_one_record_cannot_wipe_a_partition(tmp_path: Path) -> None:
    """Defect 6: a FINISHED over [0, 2^63-1] at epoch 2^31-1 unserved every segment, fenced every
    writer and retention deleted everything. Out of bounds it is invalid; within bounds it is not
    the current claim and is rejected; either way nothing changes."""
    log = Log()
    epoch = log.claim("w")
    for i in range(3):
        copy(log, i * 10, i * 10 + 9, epoch)
    before = [s.segment_id for s in log.state().finished()]
    huge = segment(0, 2**62 - 1, 2**31 - 1, writer="mallory")
    assert log.fold.apply_raw(99, record_key(huge), encode_value(huge)).reason == STALE_EPOCH
    beyond = dataclasses.replace(huge, end_offset=2**63 - 1)
    assert log.fold.apply_raw(100, record_key(beyond), encode_value(beyond)).reason == INVALID
    forged = segment(0, 2**62 - 1, epoch, writer="mallory")  # the current epoch, another writer
    assert log.fold.apply_raw(101, record_key(forged), encode_value(forged)).reason == STALE_EPOCH
    forged = segment(0, 2**62 - 1, epoch, writer="w")  # even as the claim holder itself
    assert log.fold.apply_raw(102, record_key(forged), encode_value(forged)).reason == OVERLAP
    assert [s.segment_id for s in log.state().finished()] == before
    assert log.state().current_epoch == epoch
    _plan, out = clean_partition(
        TP, log.state(), deleter(log, FilesystemChunkStorage(tmp_path)), epoch, RetentionLimits(), 10_000
    )
    assert all(s.state is not S.COPY_SEGMENT_FINISHED for s in out.deleted)


def test_a_poison_record_is_contained_and_the_batch_commits(tmp_path: Path) -> None:
    """Defect 7: a negative partition escaped as struct.error and crashed every follower. Every
    failure while applying one record is that record's alone: rejected, counted, the batch written."""
    cache = MetadataCache(tmp_path / "cache")
    log = Log()
    epoch = log.claim("w")
    good = segment(0, 9, epoch)
    negative = dataclasses.replace(
        good, segment_id=dataclasses.replace(good.segment_id, partition=-1, id=uuid.uuid4())
    )
    nul = dataclasses.replace(
        good, segment_id=dataclasses.replace(good.segment_id, topic="ord\x00ers", id=uuid.uuid4())
    )
    messages = [
        RawMessage(0, 0, record_key(PartitionClaim(TP, uuid.UUID(int=1), ClaimKind.LEAD, "w", 0)),
                   encode_value(PartitionClaim(TP, uuid.UUID(int=1), ClaimKind.LEAD, "w", 0))),
        RawMessage(0, 1, record_key(negative), encode_value(negative)),
        RawMessage(0, 2, record_key(nul), encode_value(nul)),
        RawMessage(0, 3, b"orders/-1/x", None),
        RawMessage(0, 4, record_key(good), encode_value(dataclasses.replace(good, writer_epoch=0))),
    ]  # fmt: skip
    result = cache.apply_batch(messages)
    assert result.skipped == 3 and result.applied == 2
    assert cache.consumed_offsets() == {0: 5}
    assert [s.segment_id for s in cache.finished_segments(TP)] == [good.segment_id]
    assert cache.topic_partitions() == [TP]
    cache.close()


def test_a_bug_in_the_store_is_contained_to_its_record() -> None:
    class Broken(MemoryStore):
        def served_overlapping(self, tp, start, end):
            raise RuntimeError("a bug")

    fold = Fold(Broken())
    claim = PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0)
    assert fold.apply_record(0, claim).accepted
    bad = fold.apply_record(1, segment(0, 9, 0))
    assert not bad.accepted and bad.reason == INTERNAL
    assert fold.apply_record(2, segment(0, 9, 0, S.COPY_SEGMENT_STARTED)).accepted


def test_an_admin_claim_fences_the_worker_and_its_release_hands_the_partition_back() -> None:
    log = Log()
    worker = log.claim("worker")
    assert copy(log, 0, 9, worker, "worker")[0]
    admin = log.claim("cli", ClaimKind.ADMIN)
    assert not copy(log, 10, 19, worker, "worker")[0]  # the worker is fenced meanwhile
    assert log.publish(RemoteLogStartOffset(TP, 5, 1, "cli", admin)) is not None
    assert log.state().log_start_offset == 5
    release = PartitionClaim(TP, uuid.uuid4(), ClaimKind.RELEASE, "cli", 1, released_epoch=admin)
    log.publish(release)
    assert log.state().current_epoch is None
    assert log.fold.apply_record(99, segment(10, 19, worker)).reason == NO_CLAIM
    again = log.claim("worker")
    assert copy(log, 10, 19, again, "worker")[0]
    stale_release = dataclasses.replace(release, claim_id=uuid.uuid4())
    assert not log.confirm(stale_release, log.publish(stale_release))  # names a claim no longer current
    assert log.state().current_epoch == again


def test_a_claim_under_a_new_topic_id_starts_a_new_history() -> None:
    old_id, new_id = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
    log = Log()
    first = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, old_id))
    started = segment(0, 9, first)
    started = dataclasses.replace(
        started,
        segment_id=dataclasses.replace(started.segment_id, topic_id=old_id),
        data_object_key=KEYS.segment(TP.topic, 0, 0, started.segment_id.id, first, old_id).data,
        index_object_key=KEYS.segment(TP.topic, 0, 0, started.segment_id.id, first, old_id).index,
    )
    assert log.confirm(started, log.publish(started))
    assert [s.segment_id for s in log.state().finished()] == [started.segment_id]
    epoch = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, new_id))
    # the claim alone changes nothing readers serve: the first copy under the new id does
    assert [s.segment_id for s in log.state().finished()] == [started.segment_id]
    assert log.state().lineage.topic_id == old_id
    fresh = _with_topic_id(segment(0, 4, epoch, S.COPY_SEGMENT_STARTED), new_id, epoch)
    assert log.confirm(fresh, log.publish(fresh))
    assert log.state().finished() == [] and log.state().lineage.topic_id == new_id
    assert old_id in log.state().lineage.retired
    finished = fresh.with_state(S.COPY_SEGMENT_FINISHED, 1)
    assert log.confirm(finished, log.publish(finished))
    assert [s.segment_id for s in log.state().finished()] == [fresh.segment_id]


def _with_topic_id(seg: RemoteLogSegmentMetadata, topic_id: str, epoch: int) -> RemoteLogSegmentMetadata:
    keys = KEYS.segment(TP.topic, 0, seg.start_offset, seg.segment_id.id, epoch, topic_id)
    return dataclasses.replace(
        seg,
        segment_id=dataclasses.replace(seg.segment_id, topic_id=topic_id),
        data_object_key=keys.data,
        index_object_key=keys.index,
    )


def test_a_forged_claim_with_another_topic_id_unserves_nothing() -> None:
    """A claim with a made-up topic id (a principal that may write the metadata topic needs no
    broker for it) takes the partition for a moment, but readers keep serving the archive, a copy
    under the made-up id is not what it needs to switch (a copy of a retired id, or a record of
    another segment, is rejected), and the owner's next claim, with the broker's id, writes on."""
    real, made_up = str(uuid.UUID(int=1)), str(uuid.UUID(int=99))
    log = Log()
    owner = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, real))
    kept = _with_topic_id(segment(0, 9, owner, S.COPY_SEGMENT_STARTED), real, owner)
    assert log.confirm(kept, log.publish(kept))
    done = kept.with_state(S.COPY_SEGMENT_FINISHED, 1)
    assert log.confirm(done, log.publish(done))
    log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "mallory", 0, made_up))
    assert [s.segment_id for s in log.state().finished()] == [kept.segment_id]
    assert log.state().lineage.topic_id == real and made_up not in log.state().lineage.retired
    # the owner claims again with the broker's id and copies on
    again = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, real))
    more = _with_topic_id(segment(10, 19, again, S.COPY_SEGMENT_STARTED), real, again)
    assert log.confirm(more, log.publish(more))
    more_done = more.with_state(S.COPY_SEGMENT_FINISHED, 2)
    assert log.confirm(more_done, log.publish(more_done))
    assert [s.segment_id for s in log.state().finished()] == [kept.segment_id, more.segment_id]
    # a copy under an id no claim of the holder names is rejected, as before
    stray = _with_topic_id(segment(20, 29, again, S.COPY_SEGMENT_STARTED), made_up, again)
    assert not log.confirm(stray, log.publish(stray))


def test_cleanup_acts_only_on_a_view_showing_its_own_claim(tmp_path: Path) -> None:
    log = Log()
    mine = log.claim("w")
    log.claim("other")
    with pytest.raises(FencedWriterError):
        clean_partition(
            TP, log.state(), deleter(log, FilesystemChunkStorage(tmp_path)), mine, RetentionLimits(), 0
        )


def test_orphans_are_removed_and_shadowed_states_re_published(tmp_path: Path) -> None:
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    zombie = log.claim("zombie")
    ok, kept = copy(log, 0, 9, zombie, "zombie")
    assert ok
    owner = log.claim("owner")
    # the zombie, unaware: a copy (its objects uploaded), a delete of its served segment, and its
    # served segment's FINISHED once more
    late = segment(10, 19, zombie, S.COPY_SEGMENT_STARTED, "zombie")
    storage.create(late.data_object_key, [b"d"])
    storage.create(late.index_object_key, [b"i"])
    log.publish(late)
    log.publish(kept.deleting(3, "zombie", zombie))
    state = log.state()
    # the rejected delete sits under the segment's delete key: it shadows nothing (compaction can
    # never leave it as the only record of the key that holds the segment's FINISHED)
    assert set(state.orphans) == {late.segment_id.id} and state.repairs() == []
    log.publish(dataclasses.replace(kept, event_timestamp_ms=4))
    state = log.state()
    assert [s.segment_id for s in state.repairs()] == [kept.segment_id]
    clean_partition(TP, state, deleter(log, storage, "owner"), owner, RetentionLimits(), 0)
    after = log.state()
    assert after.orphans == {} and after.shadowed == set()
    assert [s.segment_id for s in after.finished()] == [kept.segment_id]
    assert list(storage.list("")) == []
    assert DeleteReason.DANGLING


def test_the_once_per_claim_sweep_deletes_only_this_claims_old_objects_nobody_references(
    tmp_path: Path,
) -> None:
    from processor.lifecycle.sweep import sweep_unreferenced

    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    before = log.claim("w")
    epoch = log.claim("w")
    _ok, served = copy(log, 0, 9, epoch)
    lost = segment(10, 19, epoch)  # uploaded, never recorded (a writer crashed in between)
    flying = segment(20, 29, epoch)  # a copy of this owner in progress
    earlier = segment(30, 39, before)  # written under another claim: not this owner's to judge
    acked = segment(40, 49, epoch)  # has a manifest: acknowledged once, whatever the view says
    other_id = KEYS.segment(TP.topic, 0, 50, uuid.uuid4(), epoch, str(uuid.UUID(int=7)))
    for key in (
        served.data_object_key, served.index_object_key, lost.data_object_key, lost.index_object_key,
        flying.data_object_key, earlier.data_object_key, acked.data_object_key,
        acked.data_object_key + "-manifest", other_id.data, "archive/orders/0/notes.txt", "other-app/x.bin",
    ):  # fmt: skip
        storage.create(key, [b"x"])
    d = deleter(log, storage)
    now = int(time.time() * 1000)
    assert sweep_unreferenced(TP, log.state(), d, now).deleted == []  # all younger than ten minutes
    later = now + 11 * 60_000
    assert sweep_unreferenced(TP, log.state(), d, later, dry_run=True).deleted != []
    assert len(list(storage.list(""))) == 11, "a dry run deletes nothing"
    result = sweep_unreferenced(TP, log.state(), d, later, frozenset({flying.segment_id.id}))
    assert sorted(result.deleted) == sorted([lost.data_object_key, lost.index_object_key])
    assert sorted(result.kept) == sorted(
        [earlier.data_object_key, acked.data_object_key, acked.data_object_key + "-manifest"]
    )
    left = {i.key for i in storage.list("")}
    assert {
        served.data_object_key,
        flying.data_object_key,
        earlier.data_object_key,
        acked.data_object_key,
        other_id.data,
        "archive/orders/0/notes.txt",
        "other-app/x.bin",
    } <= left


def test_a_retention_pass_waits_for_its_follower_to_reach_the_topics_end_and_deletes_nothing_before(
    tmp_path: Path,
) -> None:
    """A rejected record published while the owner's view lagged must be neutralised before the
    owner deletes the segment it was rejected against (else compaction can keep the rejected record
    and drop that segment's FINISHED, and a fresh follower accepts it). The pass plans only once its
    follower holds everything published so far; when it does not in time, nothing is deleted and
    the pass counts as failed (health after three in a row)."""
    log = Log()
    epoch = log.claim("w")
    assert copy(log, 0, 9, epoch)[0]
    asked: list[set[TopicPartition]] = []

    def lagging(tps: object) -> bool:
        asked.append(set(tps))  # type: ignore[call-overload]
        return False

    service = RetentionService(
        RetentionConfig(RetentionLimits(retention_ms=10), ()),
        StateView({TP: log.state()}),
        deleter(log, FilesystemChunkStorage(tmp_path)),
        None,
        clock_ms=lambda: 1_000_000,
        caught_up=lagging,
    )
    before = len(log.messages)
    for n in range(1, 4):
        result = service.run_pass({TP: epoch})
        assert result.not_caught_up and not result.ok and service.failed_passes == n
        assert result.outcome.deleted == [] and len(log.messages) == before
    assert asked == [{TP}] * 3
    service.caught_up = lambda tps: True
    result = service.run_pass({TP: epoch})
    assert result.ok and len(result.outcome.deleted) == 1 and service.failed_passes == 0


def test_compaction_between_a_deletion_and_a_late_neutraliser_is_what_the_pass_order_prevents() -> None:
    """The sequence the ownership model found: a forged FINISHED overlapping a served segment is
    rejected; when the owner deletes that segment before neutralising the forged record, a cleaner
    pass that drops the deleted segment's records but keeps the forged one (its tombstone not yet
    below the cleaning point) makes a fresh fold accept the forgery and reject the owner's next copy.
    In the pass order (neutralise first: the pass sees the forged record because it waits for its
    follower) no cleaning point makes a fresh fold differ from the live one."""

    def history(neutralise_first: bool) -> tuple[Log, list[tuple[int, bytes, bytes | None]]]:
        log = Log()
        epoch = log.claim("w")
        ok, served = copy(log, 0, 0, epoch)
        assert ok
        forged = dataclasses.replace(
            segment(0, 1, epoch),
            writer_id="w",  # forged as the claim holder's own,
            segment_id=RemoteLogSegmentId(TP.topic, 0, uuid.uuid4()),
        )
        forged = dataclasses.replace(
            forged,
            data_object_key=KEYS.segment(TP.topic, 0, 0, forged.segment_id.id, epoch).data,
            index_object_key=KEYS.segment(TP.topic, 0, 0, forged.segment_id.id, epoch).index,
        )
        assert not log.accepted[log.publish(forged)]
        if neutralise_first:
            log.tombstone(forged)
        deleting = served.with_state(S.DELETE_SEGMENT_STARTED, 3)
        log.publish(deleting)
        log.publish(deleting.with_state(S.DELETE_SEGMENT_FINISHED, 4))
        log.tombstone(served)
        assert copy(log, 1, 1, epoch)[0]
        if not neutralise_first:  # the next pass
            log.tombstone(forged)
        return log, list(log.messages)

    def fresh_after_cleaning(
        messages: list[tuple[int, bytes, bytes | None]], point: int
    ) -> set[tuple[int, int]]:
        latest = {k: o for o, k, _ in messages if o < point}
        kept = [(o, k, v) for o, k, v in messages if o >= point or (latest[k] == o and v is not None)]
        fold = MetadataFold()
        for o, k, v in kept:
            fold.apply_raw(o, k, v)
        return {
            (s.start_offset, s.end_offset) for s in PartitionRemoteState.of(fold.partition(TP)).finished()
        }

    for neutralise_first in (False, True):
        log, messages = history(neutralise_first)
        live = {(s.start_offset, s.end_offset) for s in log.state().finished()}
        assert live == {(1, 1)}
        differs = [p for p in range(len(messages) + 1) if fresh_after_cleaning(messages, p) != live]
        assert bool(differs) is not neutralise_first, (neutralise_first, differs)


def test_a_lower_log_start_from_a_lagging_view_shadows_the_start_until_the_owner_republishes_it(
    tmp_path: Path,
) -> None:
    """Found by the ownership model: a second retention pass on a view that had not applied the
    first one's records published a lower remote log start. Accepted (the claim holder's) and moving
    nothing, it would be the key's only record once compacted, and a fresh fold's start would go
    back. It shadows the key; the owner's next pass re-publishes the start it holds."""
    log = Log()
    epoch = log.claim("w")
    assert log.accepted[log.publish(RemoteLogStartOffset(TP, 20, 1, "w", epoch))]
    assert log.accepted[log.publish(RemoteLogStartOffset(TP, 10, 2, "w", epoch))]  # from a lagging view
    state = log.state()
    assert state.log_start_offset == 20 and state.log_start_shadowed()
    clean_partition(TP, state, deleter(log, FilesystemChunkStorage(tmp_path)), epoch, RetentionLimits(), 0)
    assert not log.state().log_start_shadowed()
    latest = {k: (o, v) for o, k, v in log.messages}
    fresh = MetadataFold()
    for o, k, v in sorted((o, k, v) for k, (o, v) in latest.items()):
        fresh.apply_raw(o, k, v)
    assert fresh.partition(TP).log_start_offset == 20
