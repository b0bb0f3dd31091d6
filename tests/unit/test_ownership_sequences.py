"""Sequences the ownership model's long run found, replayed step by step on the model
(tests/unit/test_ownership_model.py): each names what went wrong before its fix."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import UUID

import pytest

from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from tests.unit.test_ownership_model import TPS, OwnershipModel

P1 = TPS[1]


class Draws:
    """The values a rule draws, in order (a stand-in for hypothesis's ``data``)."""

    def __init__(self, *values: object) -> None:
        self.values = list(values)

    def draw(self, strategy: Any, label: str | None = None) -> object:
        return self.values.pop(0)


def _check(model: OwnershipModel) -> None:
    model.claim_hits_settle()
    model.acknowledged_stays_served()
    model.served_is_contiguous_and_disjoint()
    model.only_the_claim_holder_writes()
    model.served_objects_exist()
    model.acknowledged_objects_exist_until_retention()
    model.every_reader_agrees()


@pytest.fixture
def model() -> Iterator[OwnershipModel]:
    m = OwnershipModel()
    m.setup()
    yield m
    m.teardown()


def _served(model: OwnershipModel, tp: TopicPartition) -> list[tuple[int, int]]:
    return [(s.start_offset, s.end_offset) for s in model._state(tp).finished()]


def test_a_paused_owner_retrying_a_failed_deletion_leaves_a_segment_served_again_alone(
    model: OwnershipModel,
) -> None:
    """Retention deletes a segment, its objects fail to go (queued for retry); an operator's command
    takes the partition and, not having started that deletion, serves the segment again. The first
    owner, paused meanwhile (its view ends at its own pass), retries: it must state the deletion again
    under its claim, be refused, and delete nothing (it deleted the objects of a served segment)."""
    model.claim("B1")
    model.produce(P1, 4)
    model.copy_whole("B1", length=4)
    model.claim("A1")
    model.produce(P1, 6)
    model.storage_fails(failing=True)
    model.retention("A1", keep=6)  # 0..3 expired: DELETE_SEGMENT_STARTED accepted, objects stay
    _check(model)
    assert _served(model, P1) == []
    model.operator_takes_the_partition(Draws(P1, None))
    assert _served(model, P1) == [(0, 3)]  # served again: the command did not start that deletion
    model.storage_fails(failing=False)
    model.retention("A1", keep=6)  # a zombie: its view still shows its claim and its deletion
    _check(model)
    assert _served(model, P1) == [(0, 3)]


def test_a_start_offset_stated_again_after_a_claim_tombstone_proves_no_deletion(
    model: OwnershipModel,
) -> None:
    """An operator's delete-before moves the remote log start offset past a segment whose objects
    then fail to go; the next owner did not publish that start, so it serves the segment again. A
    tombstone under the current claim's key makes the next holder state every record again, the
    start offset included: re-published, it is still not that holder's decision, and its retention
    (limits far away) must not delete below it."""
    model.claim("B1")
    model.produce(P1, 6)
    model.copy_whole("B1", length=5)
    model.copy_whole("B1", length=1)
    model.storage_fails(failing=True)
    model.operator_takes_the_partition(Draws(P1, 5))
    model.storage_fails(failing=False)
    model.claim("A1")
    model.cleanup("A1")
    _check(model)
    model.hostile_claim_tombstone(kind="current", data=Draws(P1, "none"))
    _check(model)
    model.claim("B1")
    model.retention("B1", keep=12)
    _check(model)
    model.cleanup("B1")
    _check(model)


def test_a_rebuilt_archive_starts_where_its_first_segment_does(model: OwnershipModel) -> None:
    """Retention deleted a partition's first segment (start offset 2); the metadata topic is lost and
    rebuilt from the bucket, which does not hold the start offset. Before, the rebuilt partition began
    at 0, and a delete-before 1 then moved the start to 1, into offsets nothing serves."""
    P0 = TPS[0]
    model.claim("C0")
    model.produce(P0, 2)
    model.copy_whole("C0", length=2)
    model.retention("C0", keep=0)
    model.produce(P0, 5)
    model.copy_whole("C0", length=5)
    _check(model)
    model.metadata_topic_lost_and_rebuilt()
    assert model._state(P0).log_start_offset == 2
    model.operator_takes_the_partition(Draws(P0, 1))
    _check(model)
    assert model._state(P0).log_start_offset == 2


P0 = TPS[0]


def _every_cleaning_point_agrees(model: OwnershipModel) -> None:
    """A reader of the topic the cleaner compacted up to any point serves what live readers do."""
    log = list(model.topic.log)
    try:
        for point in range(len(log) + 1):
            model.topic.log = list(log)
            model.topic.compact(point)
            try:
                model.every_reader_agrees()
            except AssertionError as exc:
                raise AssertionError(f"a cleaner point at {point}: {exc}") from exc
    finally:
        model.topic.log = log


def _known(model: OwnershipModel, tp: TopicPartition, low: int) -> RemoteLogSegmentMetadata:
    """The fold's state of the model's segment whose id ends in ``low`` (ids are numbered in order:
    the victim a replayed step drew)."""
    return model._state(tp).segments[UUID(int=0x5EED << 64 | low)]


def _ids(model: OwnershipModel, tp: TopicPartition) -> list[tuple[int, int, list[int]]]:
    """Served segments as (start, end, the low bytes of the ids they supersede)."""
    return [
        (s.start_offset, s.end_offset, [sid.int & 0xFF for sid in s.supersedes])
        for s in model._state(tp).finished()
    ]


def test_a_source_is_never_deleted_on_the_proof_of_a_rewrite_being_deleted(model: OwnershipModel) -> None:
    """An erasure's rewrite is published and its process dies before deleting the source. A forged
    delete of the rewrite serves the source again; a forged junk rewrite over it and the next
    segment then takes both. A merge by the next holder finds the source superseded, and its proof
    must not be the erasure's rewrite (being deleted: the holder may fail to serve it again, the
    junk rewrite overlapping it). It took that as proof and deleted the source, the only copy of
    its offsets; now the source stays, and the holder's passes serve everything again."""
    model.claim("B0")
    model.produce(P0, 2)
    model.copy_whole("B0", length=1)
    model.copy_whole("B0", length=1)
    model.erase("B0", crash_at="after_finished", copies=0, holders=0)
    assert _ids(model, P0) == [(0, 0, [2]), (1, 1, [])]  # the rewrite of segment 2, not yet deleted
    rewrite = next(s for s in model._state(P0).finished() if s.supersedes)
    model.forged_delete("conditional", Draws(P0, rewrite, "none"))
    _check(model)
    model.forged_rewrite(Draws(P0, 0, 2, True, "none"))  # junk objects at its keys
    _check(model)
    assert _ids(model, P0) == [(0, 1, [2, 3])]
    model.claim("A0")
    model.merge("A0", crash_at=None, copies=0)
    _check(model)
    model.claim("B0")
    model.cleanup("B0")  # the junk rewrite does not read back: deleted, 2 and 3 served again
    _check(model)
    model.cleanup("B0")  # the forged delete undone: the erasure's rewrite served again
    _check(model)
    assert _ids(model, P0) == [(0, 0, [2]), (1, 1, [])]


def test_a_rewrite_served_again_is_checked_at_the_next_pass(model: OwnershipModel) -> None:
    """A forged rewrite with junk objects takes a segment, and a second one without objects takes
    the first. The holder's next claim checks every served rewrite once: it finds the second has no
    objects and deletes it, which serves the first again. That one, of an earlier claim, was never
    checked under this claim and hid the segment for good; a pass that deletes a rewrite now has
    the next pass check every served rewrite again."""
    model.claim("A0")
    model.produce(P0, 1)
    model.copy_whole("A0", length=1)
    model.forged_rewrite(Draws(P0, 0, 1, True, "none"))
    _check(model)
    model.forged_rewrite(Draws(P0, 0, 1, False, "none"))
    _check(model)
    model.claim("A0")
    model.cleanup("A0")
    _check(model)
    assert _ids(model, P0) == [(0, 0, [2])]  # the junk rewrite, served again
    model.cleanup("A0")
    _check(model)
    assert _ids(model, P0) == [(0, 0, [])]


def test_a_rewrite_left_under_deleted_rewrites_is_served_again(model: OwnershipModel) -> None:
    """A merge's FINISHED is accepted and its process dies. A forged rewrite without objects takes
    it over; the holder's follower sees that one, then a second forged rewrite takes over the
    first. The holder deletes the first (its view does not show the second yet), then the second:
    deleting that gives back a deleted segment, and the merge, the only holder of its offsets, was
    served by nothing until a rebuild. The holder's next pass finds it stranded and states it again."""
    model.claim("C0")
    model.merge("C0", crash_at="after_finished", copies=2)
    assert _ids(model, P0) == [(0, 1, [2, 3])]
    model.claim("A0")
    model.forged_rewrite(Draws(P0, 0, 1, False, "none"))
    _check(model)
    model.follower_notices("A0")
    model.forged_rewrite(Draws(P0, 0, 1, False, "none"))
    _check(model)
    model.cleanup("A0")  # deletes the first forged rewrite: the second still serves its offsets
    _check(model)
    model.cleanup("A0")  # deletes the second: nothing is served
    _check(model)
    model.cleanup("A0")  # the merge, stranded, is stated again
    _check(model)
    assert _ids(model, P0) == [(0, 1, [2, 3])]


def test_a_junk_rewrite_whose_deletion_another_writer_finds_is_not_served_again(
    model: OwnershipModel,
) -> None:
    """A forged rewrite with junk objects at its keys takes a segment; the holder finds it does not
    read back and starts deleting it, and its objects fail to go. An operator's command then finds a
    deletion it did not start with every object in place and undid it as a forged delete, serving
    the junk again over the segment. A rewrite is now served again only if its index verifies."""
    model.claim("A0")
    model.produce(P0, 1)
    model.copy_whole("A0", length=1)
    model.forged_rewrite(Draws(P0, 0, 1, True, "none"))
    _check(model)
    model.follower_notices("A0")
    model.storage_fails(failing=True)
    model.cleanup("A0")  # DELETE_SEGMENT_STARTED of the junk rewrite; its objects stay
    _check(model)
    model.storage_fails(failing=False)
    model.operator_takes_the_partition(Draws(P0, None))
    _check(model)
    assert _ids(model, P0) == [(0, 0, [])]


def test_a_new_owner_serves_again_a_merge_not_its_sources_too(model: OwnershipModel) -> None:
    """A merge and its sources are all being deleted by retention and their objects failed to go;
    the next owner did not start those deletions, so it serves them again. It published the merge
    and each source again in the order it found them, and a source after the merge overlapped it:
    the owner's own record was refused. The merge goes first now, and the sources it names are
    left to it."""
    model.claim("A0")
    model.merge("A0", crash_at="after_finished", copies=2)
    model.claim("A0")
    model.storage_fails(failing=True)
    model.produce(P0, 3)
    model.retention("A0", keep=3)  # the merge and both sources: deletions started, objects stay
    _check(model)
    assert _ids(model, P0) == []
    model.claim("B0")
    model.retention("B0", keep=7)
    _check(model)
    assert _ids(model, P0) == [(0, 1, [2, 3])]


def test_a_junk_rewrite_whose_named_segment_is_being_deleted_is_not_served_again(
    model: OwnershipModel,
) -> None:
    """Two rewrites forged one over the other over a segment, the outer with junk at its keys; the
    holder deletes the outer (its index does not verify), then the inner (no objects), which gives
    the segment back, and then a forged delete unserves the segment. The next owner, finding all
    three deletions unstarted by it, served the junk rewrite again (its index was checked only while
    what it names was finished), hiding the segment, and then published the segment again over it
    (refused). A rewrite whose index does not verify is never served again; the segment is."""
    model.claim("C0")
    model.storage_fails(failing=True)
    model.hostile_claim_tombstone(
        "garbage", Draws(P0, b"orders/0/claim/00000000-0000-5eed-0000-000000000001", "none")
    )
    model.claim("C0")
    model.claim("A1")
    model.erase("A1", copies=1, crash_at=None, holders=0)  # a copy of 0..0 (nothing to erase)
    model.forged_rewrite(Draws(P1, 0, 2, False, "none"))  # no objects
    model.forged_rewrite(Draws(P1, 0, 3, True, "none"))  # junk objects, naming the first
    model.claim("A1")
    model.cleanup("A1")  # the junk rewrite's deletion started; its objects stay
    model.retention("A1", keep=4)  # the empty rewrite's deletion started: the copy is served again
    _check(model)
    copy = model._state(P1).finished()[0]
    assert copy.supersedes == ()
    model.forged_delete("unconditional", Draws(P1, copy, "wrong"))
    assert _ids(model, P1) == []
    model.claim("B1")
    model.retention("B1", keep=9)
    _check(model)
    assert [s.segment_id for s in model._state(P1).finished()] == [copy.segment_id]


def test_a_pass_without_limits_deletes_what_an_earlier_pass_expired(model: OwnershipModel) -> None:
    """A retention pass expires offset 0 (it publishes the remote log start offset past it) while
    forged rewrites hold it; their deletions give back, pass after pass, the rewrite they named,
    which lies below that start. A pass with no limits then deletes it: the user's retention
    expired it already (the model took that for a deletion without a limit)."""
    model.claim("A1")
    model.erase("A1", copies=1, crash_at=None, holders=0)
    model.proofs_fail(failing=True)
    model.forged_rewrite(Draws(P1, 0, 1, True, "none"))
    model.forged_rewrite(Draws(P1, 0, 1, True, "wrong"))
    model.claim("B1")
    model.retention("B1", keep=0)  # offset 0 expires; the outer forged rewrite is deleted
    _check(model)
    model.retention("B1", keep=3)
    _check(model)
    model.cleanup("B1")
    _check(model)
    assert _ids(model, P1) == []
    assert model._state(P1).log_start_offset == 1


def test_a_forged_delete_of_a_merges_source_given_back_waits_for_the_holders_passes(
    model: OwnershipModel,
) -> None:
    """A merge's FINISHED is forged-deleted, which gives back its sources; a forged rewrite takes
    over the first of them and a forged delete unserves the last: its offsets are served by nothing
    until the holder's passes delete the forged rewrite and serve the merge again (the model took
    that wait for a gap the rules do not allow)."""
    model.claim("B1")
    model.merge("B1", copies=3, crash_at="after_finished")  # 0..2 merged; its sources not deleted
    model.claim("A1")
    merged = next(s for s in model._state(P1).finished() if s.supersedes)
    model.forged_delete("conditional", Draws(P1, merged, "none"))
    _check(model)
    assert _ids(model, P1) == [(0, 0, []), (1, 1, []), (2, 2, [])]
    model.forged_rewrite(Draws(P1, 0, 1, False, "none"))
    last = model._state(P1).finished()[-1]
    model.forged_delete("conditional", Draws(P1, last, "none"))
    _check(model)
    assert [(s.start_offset, s.end_offset) for s in model._state(P1).finished()] == [(0, 0), (1, 1)]
    for _ in range(3):
        model.follower_notices("A1")
        model.cleanup("A1")
        _check(model)
    assert [(s.start_offset, s.end_offset) for s in model._state(P1).finished()] == [(0, 2)]


def test_a_merge_of_merges_is_served_again_before_the_merge_it_names(model: OwnershipModel) -> None:
    """A merge of a merge and a copy, every source's deletion started and its objects left (deletes
    fail); a forged delete then unserves the outer merge, and nothing is served for its offsets. The
    next owner served the inner merge and the copy again first and then left the outer merge, which
    overlapped what it had just served: offsets served, but not by the rewrite that holds them. The
    widest rewrite goes first now, and what it names is left to it."""
    model.storage_fails(failing=True)
    model.claim("B0")
    model.merge("B0", copies=2, crash_at=None)  # 0..1 merged, its sources' deletions started
    model.claim("B0")
    model.operator_takes_the_partition(Draws(P0, None))
    model.hostile_claim_tombstone(
        "current", Draws(P0, b"orders/0/claim/00000000-0000-5eed-0000-000000000001", "none")
    )
    model.produce(P1, 1)
    model.claim("A1")
    model.retention("B0", keep=0)
    model.copy_whole("A1", length=1)
    model.claim("B0")
    model.operator_takes_the_partition(Draws(P1, None))
    model.merge("B0", copies=1, crash_at=None)  # the merge and a new copy merged: 0..2
    _check(model)
    outer = model._state(P0).finished()[0]
    assert (outer.start_offset, outer.end_offset) == (0, 2) and len(outer.supersedes) == 2
    model.forged_delete("conditional", Draws(P0, outer, "none"))
    assert _ids(model, P0) == []
    model.claim("B0")
    model.retention("B0", keep=0)
    _check(model)
    assert [s.segment_id for s in model._state(P0).finished()] == [outer.segment_id]


def test_a_reader_of_the_compacted_topic_agrees_about_a_merge_refused_over_a_shadowed_rewrite(
    model: OwnershipModel,
) -> None:
    """A forged rewrite is served over a copy; a FINISHED of it under an earlier claim (a zombie's,
    or forged) is rejected and shadows its key; a merge planned on a view without the rewrite is
    refused (it overlaps the rewrite). An operator's command repairs the rewrite's key and deletes
    the merge (its STARTED only), in that order. Once the cleaner passes the zombie's record, the
    rewrite's accepted FINISHED is gone and a reader of the compacted topic accepts the merge's
    FINISHED: it served the merge where live readers did not. The copies of an earlier claim that a
    refused record shadows are now deleted before the repairs, unconditionally (no record of that
    claim is accepted any more), which both readers accept."""
    model.claim("A0")
    model.storage_fails(failing=True)
    model.claim("A0")
    model.erase("A0", copies=2, crash_at="mid_delete", holders=0)  # copies 0..0 and 1..1
    model.forged_rewrite(Draws(P0, 1, 1, False, "wrong"))  # over 1..1
    _check(model)
    rewrite = model._state(P0).finished()[-1]
    assert rewrite.supersedes
    model.forged_finished("zombie_finished", Draws(P0, rewrite, "wrong"))
    model.merge("A0", copies=0, crash_at="mid_delete")  # 0..1, refused: it overlaps the rewrite
    _check(model)
    model.operator_takes_the_partition(Draws(P0, None))  # deletes the merge, repairs the rewrite
    _check(model)
    model.compact(Draws(9))  # the rewrite's accepted FINISHED goes, the merge's refused one stays
    _check(model)


def test_a_merge_leaves_segments_below_the_remote_log_start_alone(model: OwnershipModel) -> None:
    """A merge's sources could not be proven (reads fail) and stay; retention then expires
    everything and deletes the merge, which gives the sources back below the new remote log start.
    The next merge took them again: their expired records lived on in a new segment, which a
    rebuild of the metadata (it does not know the start offset) served apart from the rest."""
    model.produce(P0, 4)
    model.proofs_fail(failing=True)
    model.claim("A0")
    model.copy_whole("A0", length=1)
    model.merge("A0", copies=2, crash_at=None)  # 0..2 merged; its sources not proven, kept
    model.claim("B0")
    model.copy_whole("B0", length=5)
    model.claim("A0")
    model.retention("A0", keep=0)  # everything expires: the start moves to 6
    _check(model)
    start = model._state(P0).log_start_offset
    assert start == 6
    model.merge("A0", copies=2, crash_at="after_finished")
    _check(model)
    merged = [s for s in model._state(P0).finished() if s.supersedes]
    assert merged and all(s.start_offset >= start for s in merged)
    model.metadata_topic_lost_and_rebuilt()
    _check(model)


def test_a_reader_of_the_compacted_topic_agrees_after_hostile_records_on_two_partitions(
    model: OwnershipModel,
) -> None:
    """The long run's sequence as it found it, cut to the steps it needs: forged claims, rewrites,
    deletes and FINISHED records, hostile tombstones, a rebuild and compaction. At the end the two
    folds call different segments of partition 0 served, all of them below the remote log start
    offset (a forged one): no reader serves any of them, and both serve the same above it (the model
    compared the folds' served sets below the start too)."""
    model.claim("A1")
    _check(model)
    model.claim("B1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.forged_claim(data=Draws(P1, "mallory", "wrong"), topic_id="current")
    _check(model)
    model.produce(n=6, tp=P1)
    _check(model)
    model.metadata_topic_lost_and_rebuilt()
    _check(model)
    model.claim("C0")
    _check(model)
    model.erase("C0", copies=1, crash_at="after_finished", holders=0)
    _check(model)
    model.forged_rewrite(data=Draws(P0, 0, 1, False, "wrong"))
    _check(model)
    model.forged_delete(
        data=Draws(
            P0,
            _known(model, P0, 0x0A),
            "none",
        ),
        kind="conditional",
    )
    _check(model)
    model.claim("A1")
    _check(model)
    model.start_copy("A1", length=4)
    _check(model)
    model.claim("A1")
    _check(model)
    model.forged_rewrite(data=Draws(P0, 0, 1, False, "wrong"))
    _check(model)
    model.hostile_tombstone(
        data=Draws(
            P0,
            _known(model, P0, 0x0E),
            "none",
        ),
        kind="other_partition",
    )
    _check(model)
    model.forged_finished(
        data=Draws(
            P0,
            _known(model, P0, 0x0E),
            "wrong",
        ),
        kind="zombie_finished",
    )
    _check(model)
    model.forged_claim(data=Draws(P1, "mallory", "none"), topic_id="made_up")
    _check(model)
    model.hostile_claim_tombstone(data=Draws(P1, "none"), kind="current")
    _check(model)
    model.claim("B1")
    _check(model)
    model.cleanup("B1")
    _check(model)
    model.hostile_claim_tombstone(
        data=Draws(
            P0,
            b"orders/0/claim/00000000-0000-5eed-0000-000000000007",
            "none",
        ),
        kind="garbage",
    )
    _check(model)
    model.forged_rewrite(data=Draws(P0, 0, 1, True, "none"))
    _check(model)
    model.cleanup("B1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("B1")
    _check(model)
    model.proofs_fail(failing=True)
    _check(model)
    model.forged_claim(data=Draws(P1, "mallory", "none"), topic_id="current")
    _check(model)
    model.hostile_claim_tombstone(data=Draws(P0, "none"), kind="current")
    _check(model)
    model.claim("C0")
    _check(model)
    model.forged_delete(
        data=Draws(
            P0,
            _known(model, P0, 0x12),
            "wrong",
        ),
        kind="start",
    )
    _check(model)
    model.hostile_tombstone(
        data=Draws(
            P0,
            _known(model, P0, 0x12),
            "wrong",
        ),
        kind="delete_key",
    )
    _check(model)
    model.cleanup("C0")
    _check(model)
    model.claim("A1")
    _check(model)
    model.compact(data=Draws(32))
    _check(model)


def test_an_unreadable_rewrite_over_a_forgotten_rewrite_gives_its_offsets_back(
    model: OwnershipModel,
) -> None:
    """An erasure rewrites one of two copies; a forged rewrite takes both over, and a second one,
    with junk at its keys, takes the first over. Retention deletes the first forged rewrite (no
    objects), and an operator's pass forgets it. The junk rewrite then named only a forgotten
    segment: its holder kept it served (what it names was not FINISHED), over the two segments that
    hold its offsets, which nothing served again. It is unserved now, its objects kept, and the
    holder's next pass serves the two again."""
    model.claim("B1")
    model.erase("B1", copies=2, crash_at="mid_delete", holders=0)  # 0..0 rewritten, 1..1 kept
    model.forged_rewrite(Draws(P1, 0, 3, False, "none"))  # over both, no objects
    model.claim("A1")
    model.forged_rewrite(Draws(P1, 0, 3, True, "none"))  # over the first forged one, junk objects
    junk = model._state(P1).finished()[0]
    model.retention("A1", keep=9)  # deletes the forged rewrite without objects
    model.operator_takes_the_partition(Draws(P1, None))  # and forgets it
    _check(model)
    assert [s.segment_id for s in model._state(P1).finished()] == [junk.segment_id]
    model.claim("B1")
    model.retention("B1", keep=9)
    _check(model)
    model.retention("B1", keep=9)
    _check(model)
    assert _ids(model, P1) == [(0, 0, [2]), (1, 1, [])]
    assert model._state(P1).segments[junk.segment_id.id].state is SegmentState.DELETE_SEGMENT_STARTED
    assert model.bucket.stat(junk.data_object_key) is not None  # its objects kept


@pytest.mark.parametrize("recreated", [False, True])
def test_a_deletion_stated_again_is_followed_by_the_merge_over_its_offsets(
    model: OwnershipModel, recreated: bool
) -> None:
    """A forged rewrite over two segments is deleted by the holder (no objects), which serves them
    again; the holder merges them. A stale owner's DELETE_SEGMENT_STARTED of the forged rewrite,
    rejected, shadows its delete key; the next owner states the deletion again and forgets the
    segments. Before: a cleaner point between that statement and the tombstones kept the forged
    rewrite's FINISHED and its deletion stated again after the merge's FINISHED, so a reader of the
    compacted topic refused the merge (it overlapped the rewrite, still served there) and served
    one source given back. The served segments over a deletion stated again are stated again after
    it, also under a claim that names a re-created topic's id before its first copy."""
    model.claim("C0")
    _check(model)
    model.operator_takes_the_partition(data=Draws(P0, 0))
    _check(model)
    model.claim("C0")
    _check(model)
    model.claim("B1")
    _check(model)
    model.claim("B1")
    _check(model)
    model.erase("B1", copies=2, crash_at="mid_delete", holders=0)
    _check(model)
    model.claim("C0")
    _check(model)
    model.claim("C0")
    _check(model)
    model.hostile_tombstone(
        data=Draws(
            P1,
            _known(model, P1, 0x07),
            "none",
        ),
        kind="delete_key",
    )
    _check(model)
    model.claim("A0")
    _check(model)
    model.operator_takes_the_partition(data=Draws(P0, None))
    _check(model)
    model.claim("A1")
    _check(model)
    model.forged_rewrite(data=Draws(P1, 0, 3, False, "none"))
    _check(model)
    model.claim("A0")
    _check(model)
    model.claim("C0")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("B1")
    _check(model)
    model.retention("B1", keep=9)
    _check(model)
    model.merge("B1", copies=0, crash_at="mid_delete")
    _check(model)
    model.cleanup("A1")
    _check(model)
    if recreated:  # the claim below names a new topic id; nothing copied under it yet
        model.topic_recreated()
    model.claim("A1")
    _check(model)
    model.retention("A1", keep=8)
    _check(model)
    served = model._served(model.topic.live, P1)  # (of the history a first copy would retire)
    assert [(start, end) for start, end, _state in served.values()] == [(0, 1)]
    _every_cleaning_point_agrees(model)


def test_a_segment_over_a_deletion_stated_again_is_stated_again_after_it(model: OwnershipModel) -> None:
    """A forged rewrite over a copy, then a forged delete of the rewrite, which gives the copy back;
    a hostile tombstone of the copy's key (rejected), so the holder states the copy again. The
    holder's pass then finishes the rewrite's deletion (it has no objects), restating its
    DELETE_SEGMENT_STARTED after the copy's repair. Before: once compacted, the rewrite's deletion
    came after the copy's FINISHED, which was refused there as an overlap, and a reader of the
    compacted topic served nothing. The served segments over a deletion found started are now
    stated again after it."""
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.erase("A1", copies=2, crash_at="before_finished", holders=1)
    _check(model)
    model.hostile(data=Draws(P1, "none", b""), kind="garbage")
    _check(model)
    model.forged_rewrite(data=Draws(P1, 1, 1, False, "none"))
    _check(model)
    model.forged_delete(
        data=Draws(
            P1,
            _known(model, P1, 0x0A),
            "none",
        ),
        kind="conditional",
    )
    _check(model)
    model.hostile_tombstone(
        data=Draws(
            P1,
            _known(model, P1, 0x07),
            "none",
        ),
        kind="own_key",
    )
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.retention("A1", keep=2)
    _check(model)
    assert _ids(model, P1) == [(1, 1, [])]
    _every_cleaning_point_agrees(model)


def test_segments_a_rewrite_holds_are_stated_again_once_given_back_after_their_claim_was_hit(
    model: OwnershipModel,
) -> None:
    """A merge, a forged rewrite over it and the next copy, then hostile records under claim keys:
    the merge's claim key is hit and an operator takes the partition, which re-publishes what is
    served (the forged rewrite), not the merge and copy it holds. Before: once compacted, a reader
    without the merge's claim refused both, and when the holder deleted the forged rewrite (junk
    at its keys) live readers served them again and that reader served nothing there. Their keys
    are now marked when the claim's key is hit, and stated again right after the deletion that
    gives them back."""
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("B0")
    _check(model)
    model.claim("A1")
    _check(model)
    model.claim("A1")
    _check(model)
    model.erase("B0", copies=2, crash_at="mid_delete", holders=0)
    _check(model)
    model.operator_takes_the_partition(data=Draws(P1, None))
    _check(model)
    model.operator_takes_the_partition(data=Draws(P0, None))
    _check(model)
    model.claim("B0")
    _check(model)
    model.claim("B0")
    _check(model)
    model.merge("B0", copies=3, crash_at="after_finished")
    _check(model)
    model.hostile_tombstone(
        data=Draws(
            P0,
            _known(model, P0, 0x14),
            "wrong",
        ),
        kind="other_partition",
    )
    _check(model)
    model.forged_rewrite(data=Draws(P0, 0, 2, True, "none"))
    _check(model)
    model.hostile_tombstone(
        data=Draws(
            P0,
            # the forged rewrite as hypothesis drew it (the fold's state of it differs by now)
            RemoteLogSegmentMetadata(
                segment_id=RemoteLogSegmentId(
                    topic="orders",
                    partition=0,
                    id=UUID("00000000-0000-5eed-0000-000000000015"),
                    topic_id="6f1c1d5e-0000-4000-8000-000000000001",
                ),
                start_offset=0,
                end_offset=4,
                max_timestamp_ms=4,
                event_timestamp_ms=0,
                writer_id="B",
                writer_epoch=21,
                segment_leader_epochs=((0, 0),),
                segment_size_in_bytes=1,
                state=SegmentState.COPY_SEGMENT_FINISHED,
                data_object_key="archive/orders-6f1c1d5e-0000-4000-8000-000000000001/0/00000000000000000000-00000000-0000-5eed-0000-000000000015-e21.log",
                index_object_key="archive/orders-6f1c1d5e-0000-4000-8000-000000000001/0/00000000000000000000-00000000-0000-5eed-0000-000000000015-e21.log-index",
                segment_format_version=2,
                record_count=1,
                index_crc32=0,
                index_size_in_bytes=1,
                custom_metadata=None,
                txn_index_empty=True,
                replaces_state=None,
                supersedes=(
                    UUID("00000000-0000-5eed-0000-000000000014"),
                    UUID("00000000-0000-5eed-0000-000000000013"),
                ),
            ),
            "wrong",
        ),
        kind="delete_key",
    )
    _check(model)
    model.hostile_claim_tombstone(
        data=Draws(
            P0,
            b"orders/0/claim/00000000-0000-5eed-0000-000000000005",
            "none",
        ),
        kind="garbage",
    )
    _check(model)
    model.operator_takes_the_partition(data=Draws(P1, 0))
    _check(model)
    model.hostile_claim_tombstone(data=Draws(P0, "wrong"), kind="current")
    _check(model)
    model.operator_takes_the_partition(data=Draws(P0, 2))
    _check(model)
    model.claim("B0")
    _check(model)
    model.retention("B0", keep=7)
    _check(model)
    assert [(s, e) for s, e, _sup in _ids(model, P0)] == [(0, 3), (4, 4)]
    _every_cleaning_point_agrees(model)


def test_a_rewrite_of_an_earlier_claim_that_could_not_be_checked_is_checked_at_the_next_pass(
    model: OwnershipModel,
) -> None:
    """An erasure's rewrite, then a forged rewrite over it without objects; the next owner's first
    pass cannot ask for the forged rewrite's objects (a storage error). Before: the check of an
    earlier claim's rewrites ran once a claim, so the next passes never asked again and the forged
    rewrite stayed served over the erasure's. A pass that could not check one checks all again."""
    model.claim("A0")
    model.proofs_fail(failing=True)
    model.erase("A0", copies=1, crash_at=None, holders=0)
    model.forged_rewrite(Draws(P0, 0, 2, False, "none"))
    model.claim("B0")
    model.cleanup("B0")  # the forged rewrite's objects cannot be asked for
    _check(model)
    model.proofs_fail(failing=False)
    model.cleanup("B0")
    _check(model)
    assert _ids(model, P0) == [(0, 0, [2])]  # the erasure's rewrite, served again


def test_a_rewrite_whose_claim_the_cleaner_removed_is_judged_as_the_copies_around_it(
    model: OwnershipModel,
) -> None:
    """An erasure's rewrite; a forged claim, then a hostile tombstone under the erasure's claim key
    and forged rewrites over the erasure's; an operator takes the partition and re-publishes what is
    served. Once the cleaner removes the claim's record, a reader of the compacted topic judged the
    erasure's records before any claim: it served the copy and refused the erasure's rewrite (a
    rewrite needed a claim), and then every forged rewrite over it, while live readers served the
    last forged rewrite. A rewrite seen before any claim now takes over what it names as a newer
    copy does, and both readers serve the same."""
    model.produce(P0, 2)
    model.claim("A0")
    model.copy_whole("A0", length=5)
    model.erase("A0", copies=0, crash_at="after_finished", holders=0)
    assert _ids(model, P0) == [(0, 1, [2])]
    claim = model._state(P0).header.claim
    assert claim is not None
    model.forged_claim("made_up", Draws(P0, "mallory", "none"))
    model.hostile_claim_tombstone("any", Draws(P0, f"orders/0/claim/{claim.claim_id}".encode(), "none"))
    model.forged_rewrite(Draws(P0, 0, 2, False, "none"))
    model.forged_rewrite(Draws(P0, 0, 3, False, "none"))
    model.operator_takes_the_partition(Draws(P0, None))
    _check(model)
    _every_cleaning_point_agrees(model)


def test_a_forged_rewrite_a_stale_repair_serves_again_holds_what_it_named_until_the_next_pass(
    model: OwnershipModel,
) -> None:
    """An erasure's rewrite; a forged rewrite without objects over it; a hostile tombstone under the
    forged rewrite's key; a forged delete of the forged rewrite gives the erasure's rewrite back.
    The holder, planning on a view from before that delete (the forged rewrite served, its key hit),
    states the forged rewrite FINISHED again while its proofs cannot read the bucket: the erasure's
    rewrite is hidden once more. Its next pass reads the bucket, finds the forged rewrite without
    objects, deletes it, and the erasure's rewrite is served again for good."""
    model.claim("B1")
    model.forged_claim("made_up", Draws(P1, "mallory", "none"))
    model.claim("A1")
    model.erase("A1", copies=1, crash_at=None, holders=0)
    (erased,) = model._state(P1).finished()
    model.forged_rewrite(Draws(P1, 0, 1, False, "none"))
    (forged,) = model._state(P1).finished()
    assert forged.supersedes == (erased.segment_id.id,)
    model.hostile_tombstone("own_key", Draws(P1, forged, "none"))
    model.claim("A1")
    model.forged_delete("conditional", Draws(P1, forged, "none"))
    assert model._state(P1).finished() == [erased]
    _check(model)
    model.proofs_fail(failing=True)
    model.retention("A1", keep=5)  # planned before the forged delete: the forged rewrite again
    _check(model)
    assert [s.segment_id.id for s in model._state(P1).finished()] == [forged.segment_id.id]
    model.proofs_fail(failing=False)
    model.retention("A1", keep=5)
    _check(model)
    assert [s.segment_id.id for s in model._state(P1).finished()] == [erased.segment_id.id]


def test_a_held_segment_whose_key_was_hit_is_stated_again_before_the_rewrite_over_it(
    model: OwnershipModel,
) -> None:
    """A merge whose process died before deleting its sources, then an erasure's rewrite of the merge
    that cannot prove it garbage (the bucket cannot be read): the merge stays, finished, held by the
    rewrite, with its own sources under it. A hostile tombstone under
    the merge's key is rejected. Before: the holder re-published served segments only, so once the
    cleaner passed the tombstone a reader of the compacted topic knew the copies but not the merge,
    refused the erasure's rewrite (it overlaps copies it does not name) and served the erased
    records. The holder states the merge again, then the rewrite over it; the fold accepts the
    merge's statement without serving it, and every cleaner point serves what live readers do."""
    model.claim("A0")
    model.merge("A0", crash_at="after_finished", copies=2)  # dies before deleting its sources
    (merged,) = model._state(P0).finished()
    assert len(merged.supersedes) == 2
    model.claim("A0")
    model.proofs_fail(failing=True)  # the erasure cannot prove its or the merge's sources garbage
    model.erase("A0", copies=0, crash_at=None, holders=1)
    (erased,) = model._state(P0).finished()
    assert erased.supersedes == (merged.segment_id.id,)
    model.hostile_tombstone("own_key", Draws(P0, merged, "none"))
    _check(model)
    model.follower_notices("A0")
    model.cleanup("A0")  # the bucket still cannot be read: nothing is deleted, the merge restated
    _check(model)
    assert [s.segment_id.id for s in model._state(P0).finished()] == [erased.segment_id.id]
    _every_cleaning_point_agrees(model)
    assert model._state(P0).shadowed == set()


def test_forged_deletes_of_a_merge_of_a_merge_are_undone_in_one_pass(model: OwnershipModel) -> None:
    """A merge whose process died before deleting its sources, a merge of that merge and a new copy
    (its proof cannot read the bucket: everything stays). A forged delete of the outer merge gives
    back the inner one and the copy; a forged delete of the inner merge gives back its sources.
    Before: the holder's pass asked the outer merge first (the widest), found served segments it
    does not name over its offsets and left it, then served the inner one again: the outer merge
    stayed unserved until the next pass. A rewrite left so is asked again once what it names is
    served again, in the same pass."""
    model.claim("B1")
    model.proofs_fail(failing=True)
    model.merge("B1", crash_at="after_finished", copies=2)
    model.claim("B1")
    model.merge("B1", crash_at=None, copies=1)
    (outer,) = model._state(P1).finished()
    inner = model._state(P1).segments[outer.supersedes[0]]
    assert _ids(model, P1) == [(0, 2, [inner.segment_id.id.int & 0xFF, outer.supersedes[1].int & 0xFF])]
    model.forged_delete("conditional", Draws(P1, outer, "none"))
    model.forged_delete("unconditional", Draws(P1, inner, "none"))
    _check(model)
    assert [(s, e) for s, e, _ in _ids(model, P1)] == [(0, 0), (1, 1), (2, 2)]
    model.proofs_fail(failing=False)
    model.follower_notices("B1")
    model.cleanup("B1")
    _check(model)
    assert [s.segment_id.id for s in model._state(P1).finished()] == [outer.segment_id.id]


def test_segments_a_rewrite_holds_are_stated_again_with_it_after_a_deletion_found_started(
    model: OwnershipModel,
) -> None:
    """Two copies; forged rewrites stacked over the second (the middle one with junk objects) and a
    hostile tombstone under the claim's key, which marks every state of the claim, the held ones
    too; a forged claim, a forged rewrite over everything under it, and a forged delete of that,
    which gives back the first copy and the top of the stack. An operator's pass re-publishes the
    marked states, then finishes the forged rewrite's deletion (no objects), stating it again
    after them. Before: only the served segments were stated again after it, so a reader of the
    compacted topic judged the held ones where the deleted rewrite still served their offsets, and
    refused them; when the next holder deleted the top of the stack (no objects either), live
    readers served what it held and that reader served nothing. The held segments are stated again
    after the deletion too, before what holds them."""
    model.claim("B1")
    model.erase("B1", copies=2, crash_at="before_finished", holders=0)
    model.claim("B1")
    model.forged_rewrite(Draws(P1, 1, 2, False, "none"))
    model.forged_rewrite(Draws(P1, 1, 3, True, "none"))
    model.hostile_claim_tombstone("current", Draws(P1, "none"))
    model.forged_rewrite(Draws(P1, 1, 2, False, "none"))
    model.forged_claim("current", Draws(P1, "mallory", "none"))
    model.forged_rewrite(Draws(P1, 0, 3, False, "none"))
    (top,) = model._state(P1).finished()
    model.forged_delete("conditional", Draws(P1, top, "none"))
    _check(model)
    model.operator_takes_the_partition(Draws(P1, 1))
    _check(model)
    model.claim("B1")
    model.retention("B1", keep=6)
    _check(model)
    _every_cleaning_point_agrees(model)
    assert [(s, e) for s, e, _ in _ids(model, P1)] == [(1, 1)]


def test_a_segment_the_users_limits_deleted_under_a_forged_rewrite_waits_for_nothing(
    model: OwnershipModel,
) -> None:
    """A copy, a forged rewrite over it without objects; retention with a limit of nothing deletes
    the copy under it (below the start it moves), and the holder's pass then deletes the forged
    rewrite. The copy expired under the user's limits: nothing is to be served again."""
    model.claim("A0")
    model.produce(P0, 1)
    model.copy_whole("A0", length=1)
    model.forged_rewrite(Draws(P0, 0, 1, False, "none"))
    model.retention("A0", keep=0)
    _check(model)
    model.cleanup("A0")
    _check(model)
    model.retention("A0", keep=0)
    _check(model)
    assert model._state(P0).finished() == []


def test_offsets_a_forged_rewrite_left_unserved_may_be_copied_again_from_the_source(
    model: OwnershipModel,
) -> None:
    """Two copies; a forged rewrite with junk objects over the second, a forged rewrite without
    objects over the first and that one. The holder's passes delete both forged rewrites (the inner
    one first): the second copy is left served by nothing, and the owner, resuming after what is
    served, copies its offset again from the source (an erasure copies first, then rewrites that
    copy). The offset is served by the new copy's rewrite; the first copy of it stays unserved and
    no pass serves it over the new one. Nothing acknowledged is lost."""
    model.claim("A0")
    model.merge("A0", copies=1, crash_at=None)
    model.merge("A0", copies=1, crash_at="before_finished")
    model.forged_rewrite(Draws(P0, 1, 1, True, "wrong"))
    model.claim("A0")
    model.forged_rewrite(Draws(P0, 0, 3, False, "wrong"))
    model.retention("A0", keep=0)
    _check(model)
    model.retention("A0", keep=11)
    _check(model)
    assert [(s, e) for s, e, _ in _ids(model, P0)] == [(0, 0)]
    model.claim("A0")
    model.erase("A0", copies=1, crash_at="mid_delete", holders=2)
    _check(model)
    assert [(s, e) for s, e, _ in _ids(model, P0)] == [(0, 0), (1, 1)]
    model.claim("A0")  # (the erasure's process died)
    model.cleanup("A0")
    _check(model)
    assert [(s, e) for s, e, _ in _ids(model, P0)] == [(0, 0), (1, 1)]
