"""A rewritten segment (a merge of adjacent segments, an erase) takes over the offsets of the served
segments it names, in one step of the fold: readers see the old segments or the new one, never both
and never neither; only its owner's accepted rewrite is proof that the old ones are garbage. Pure."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from processor.lifecycle.retention_policy import DeleteReason, RetentionLimits, plan_retention
from processor.lifecycle.retention_service import clean_partition
from processor.metadata.codec import decode_value
from processor.metadata.fold import MetadataFold
from processor.metadata.fold_reasons import OVERLAP
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState, RemoteLogState
from processor.storage.filesystem import FilesystemChunkStorage
from tests.support.indexed_segments import indexed, put
from tests.unit.test_claims import TP, Log, S, copy, deleter, segment


def rewrite(
    log: Log, start: int, end: int, epoch: int, supersedes: list[RemoteLogSegmentMetadata]
) -> tuple[bool, RemoteLogSegmentMetadata]:
    started = dataclasses.replace(
        indexed(segment(start, end, epoch, S.COPY_SEGMENT_STARTED)),
        supersedes=tuple(s.segment_id.id for s in supersedes),
    )
    log.publish(started)
    finished = started.with_state(S.COPY_SEGMENT_FINISHED, 3)
    return log.confirm(finished, log.publish(finished)), finished


def stored(storage: FilesystemChunkStorage, *segments: RemoteLogSegmentMetadata) -> None:
    """Their real objects: an index that verifies against the metadata (what a rewrite's proof reads)."""
    for s in segments:
        put(storage, s)


def copy_indexed(log: Log, start: int, end: int, epoch: int) -> RemoteLogSegmentMetadata:
    started = indexed(segment(start, end, epoch, S.COPY_SEGMENT_STARTED))
    log.publish(started)
    finished = started.with_state(S.COPY_SEGMENT_FINISHED, 2)
    assert log.confirm(finished, log.publish(finished))
    return finished


def served(log: Log) -> list[tuple[int, int]]:
    return [(s.start_offset, s.end_offset) for s in log.state().finished()]


def three(log: Log) -> tuple[int, list[RemoteLogSegmentMetadata]]:
    epoch = log.claim("w")
    return epoch, [copy_indexed(log, i * 10, i * 10 + 9, epoch) for i in range(3)]


def _merge_then_erase() -> tuple[Log, int, list[RemoteLogSegmentMetadata]]:
    """Three copies (0..9, 10..19, 20..29), a merge of the first two, an erasure's rewrite of the
    merge: (log, epoch, [a, b, c, merged, erased])."""
    log = Log()
    epoch, (a, b, c) = three(log)
    ok, merged = rewrite(log, 0, 19, epoch, [a, b])
    assert ok
    ok, erased = rewrite(log, 0, 19, epoch, [merged])
    assert ok
    return log, epoch, [a, b, c, merged, erased]


def test_a_merge_takes_over_the_segments_it_names_in_one_step() -> None:
    log = Log()
    epoch, (a, b, _c) = three(log)
    ok, merged = rewrite(log, 0, 19, epoch, [a, b])
    assert ok
    assert served(log) == [(0, 19), (20, 29)]
    assert [s.segment_id for s in log.state().rewritten()] == [a.segment_id, b.segment_id]
    # the merge's FINISHED again (a claim stated again re-publishes it) changes nothing
    assert log.confirm(merged, log.publish(merged))
    assert served(log) == [(0, 19), (20, 29)]
    # a merged segment's FINISHED again (its holder re-publishing it after its key was hit) is
    # accepted and not served: the merge holds its offsets
    assert log.confirm(a, log.publish(dataclasses.replace(a, event_timestamp_ms=9)))
    assert served(log) == [(0, 19), (20, 29)]
    assert [s.segment_id for s in log.state().rewritten()] == [a.segment_id, b.segment_id]


def test_a_segment_held_under_a_rewrite_of_a_rewrite_stated_again_is_not_served() -> None:
    """A merge's source under an erasure's rewrite of the merge: stated again, it is accepted (its
    holder re-publishes it) and not served; one the served rewrite does not hold is an overlap."""
    log, epoch, (a, _b, c, merged, erased) = _merge_then_erase()
    assert served(log) == [(0, 19), (20, 29)]
    for held in (a, merged):
        assert log.confirm(held, log.publish(dataclasses.replace(held, event_timestamp_ms=9)))
    assert served(log) == [(0, 19), (20, 29)]
    assert {s.segment_id for s in log.state().finished()} == {erased.segment_id, c.segment_id}
    ok, _ = rewrite(log, 5, 12, epoch, [])
    assert not ok and log.fold.rejected == {OVERLAP: 1}


def test_a_rewrite_that_overlaps_a_segment_it_does_not_name_is_rejected() -> None:
    log = Log()
    epoch, (a, _b, _c) = three(log)
    ok, _ = rewrite(log, 0, 19, epoch, [a])
    assert not ok and log.fold.rejected == {OVERLAP: 1}
    assert served(log) == [(0, 9), (10, 19), (20, 29)]


def test_a_rewrite_that_does_not_cover_a_segment_it_names_is_rejected() -> None:
    log = Log()
    epoch, (a, b, _c) = three(log)
    ok, _ = rewrite(log, 0, 15, epoch, [a, b])
    assert not ok and log.fold.rejected == {OVERLAP: 1}
    assert served(log) == [(0, 9), (10, 19), (20, 29)]
    assert log.state().rewritten() == []


def test_only_the_current_claim_rewrites() -> None:
    log = Log()
    old, (a, b, _c) = three(log)
    log.claim("other")
    ok, _ = rewrite(log, 0, 19, old, [a, b])
    assert not ok
    assert served(log) == [(0, 9), (10, 19), (20, 29)]


def test_a_rewrite_seen_before_any_claim_is_judged_as_a_copy() -> None:
    """Rewrites are written under claims: a reader sees one before any claim only when the cleaner
    removed its claim's record (a tombstone under the claim's key). It takes over what it overlaps
    as a newer copy does, as it took over what it names under its claim; an older one is refused."""
    state = RemoteLogState()
    a = segment(0, 9, 1)
    state.fold.append(a)
    merged = dataclasses.replace(segment(0, 9, 2), supersedes=(a.segment_id.id,))
    assert state.fold.append(merged).accepted
    assert [s.segment_id for s in state.partition(a.topic_partition).finished()] == [merged.segment_id]
    older = dataclasses.replace(segment(0, 9, 1), supersedes=(merged.segment_id.id,))
    assert not state.fold.append(older).accepted
    assert [s.segment_id for s in state.partition(a.topic_partition).finished()] == [merged.segment_id]


def test_a_compacted_log_without_the_old_segments_serves_the_rewrite() -> None:
    log = Log()
    epoch, (a, b, _c) = three(log)
    _, merged = rewrite(log, 0, 19, epoch, [a, b])
    # compacted after the old segments' deletion: their keys are gone, the claim and the rewrite stay
    fresh = Log()
    claim = decode_value(log.messages[0][2] or b"")
    assert fresh.publish(claim) == 0
    assert fresh.confirm(merged, fresh.publish(dataclasses.replace(merged, writer_epoch=0)))
    assert served(fresh) == [(0, 19)]


def test_the_owner_deletes_what_its_rewrite_superseded_and_moves_no_start_offset(tmp_path: Path) -> None:
    log = Log()
    epoch, (a, b, _c) = three(log)
    _, merged = rewrite(log, 0, 19, epoch, [a, b])
    storage = FilesystemChunkStorage(tmp_path)
    stored(storage, a, b, merged)
    plan, outcome = clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 10**12)
    assert {(s.segment_id, r) for s, r in plan.expired} == {
        (a.segment_id, DeleteReason.REWRITTEN),
        (b.segment_id, DeleteReason.REWRITTEN),
    }
    assert plan.new_log_start_offset is None and plan.unserved == ()
    assert {s.segment_id for s in outcome.deleted} == {a.segment_id, b.segment_id}
    assert served(log) == [(0, 19), (20, 29)] and log.state().log_start_offset == 0


def test_a_deletion_of_a_superseded_segment_left_half_way_is_finished_by_the_next_owner(
    tmp_path: Path,
) -> None:
    log = Log()
    epoch, (a, b, _c) = three(log)
    _, merged = rewrite(log, 0, 19, epoch, [a, b])
    log.publish(a.deleting(5, "w", epoch))  # the merger stopped after its first DELETE_SEGMENT_STARTED
    storage = FilesystemChunkStorage(tmp_path)
    # all objects still in place: without the rewrite's proof, "served again"
    stored(storage, a, b, merged)
    nxt = log.claim("next")
    _, outcome = clean_partition(
        TP, log.state(), deleter(log, storage, "next"), nxt, RetentionLimits(), 10**12
    )
    assert {s.segment_id for s in outcome.deleted} == {a.segment_id, b.segment_id}
    assert all(storage.stat(s.data_object_key) is None for s in (a, b))
    assert served(log) == [(0, 19), (20, 29)]


def test_a_rewrite_never_makes_a_segment_it_does_not_cover_garbage() -> None:
    log = Log()
    epoch, (a, _b, c) = three(log)
    # names c as well, but covers only a: accepted (c is not overlapped), c stays served and is no
    # garbage
    ok, _ = rewrite(log, 0, 9, epoch, [a, c])
    assert ok
    assert served(log) == [(0, 9), (10, 19), (20, 29)]
    assert [s.segment_id for s in log.state().rewritten()] == [a.segment_id]


def test_the_sources_of_a_merge_that_was_merged_again_are_still_garbage(tmp_path: Path) -> None:
    """Found by the ownership model: a merge's sources whose deletion failed half way, then their
    merge merged again; the next owner took them for forged deletes to undo (refused as overlaps:
    its own records rejected) and they were never deleted."""
    log = Log()
    epoch, (a, b, c) = three(log)
    _, first = rewrite(log, 0, 19, epoch, [a, b])
    log.publish(a.deleting(5, "w", epoch))  # its deletion started, the objects failed to go
    _, second = rewrite(log, 0, 29, epoch, [first, c])
    storage = FilesystemChunkStorage(tmp_path)
    stored(storage, a, b, first, c, second)
    assert log.state().rewrite_superseded() == {s.segment_id.id for s in (a, b, first, c)}
    nxt = log.claim("next")
    _, outcome = clean_partition(
        TP, log.state(), deleter(log, storage, "next"), nxt, RetentionLimits(), 10**12
    )
    assert {s.segment_id for s in outcome.deleted} == {s.segment_id for s in (a, b, first, c)}
    assert all(log.accepted.values()) or log.fold.rejected == {}
    assert served(log) == [(0, 29)] and second.segment_id in {s.segment_id for s in log.state().finished()}


def test_a_merge_being_deleted_gives_its_offsets_back_to_the_sources_still_there(tmp_path: Path) -> None:
    """A forged delete of a merge (the holder's epoch and writer id): readers serve the sources again
    while they exist; the holder's next pass serves the merge again, and its sources are garbage."""
    log = Log()
    epoch, (a, b, _c) = three(log)
    _, merged = rewrite(log, 0, 19, epoch, [a, b])
    log.publish(merged.deleting(5, "w", epoch))
    assert served(log) == [(0, 9), (10, 19), (20, 29)]
    assert log.state().rewrite_superseded() == frozenset()
    storage = FilesystemChunkStorage(tmp_path)
    stored(storage, a, b, merged)
    clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 10**12)
    assert served(log) == [(0, 19), (20, 29)]
    assert all(log.accepted.values()), "a record of the holder was rejected"
    assert log.state().rewrite_superseded() == {a.segment_id.id, b.segment_id.id}


def test_superseded_segments_are_deleted_before_retention_deletes_anything() -> None:
    """A pass on a view that lags its own deletions of superseded segments fails at the first one
    (its condition no longer holds), before retention deleted a served segment it would not count."""
    log = Log()
    epoch, (a, b, _c) = three(log)
    rewrite(log, 0, 19, epoch, [a, b])
    part = log.state()
    plan = plan_retention(
        part.segments.values(),
        RetentionLimits(retention_ms=1),
        10**12,
        served={s.segment_id.id for s in part.finished()},
        current_epoch=epoch,
        rewritten=part.rewrite_superseded(),
    )
    reasons = [r for _s, r in plan.expired]
    assert reasons[:2] == [DeleteReason.REWRITTEN] * 2 and DeleteReason.TIME in reasons[2:]


def test_a_forged_rewrite_is_undone_by_the_holders_next_pass(tmp_path: Path) -> None:
    """A rewrite forged with the holder's epoch and writer id (no objects behind it) is accepted
    like the holder's own and takes over what it names; the holder's next pass finds its objects
    missing and deletes it, which serves the segments it named again. Nothing is deleted."""
    log = Log()
    epoch, (a, b, c) = three(log)
    storage = FilesystemChunkStorage(tmp_path)
    stored(storage, a, b, c)
    ok, forged = rewrite(log, 0, 19, epoch, [a, b])
    assert ok and served(log) == [(0, 19), (20, 29)]
    plan, outcome = clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 10**12)
    assert [(s.segment_id, s.start_offset) for s in outcome.deleted] == [(forged.segment_id, 0)]
    assert served(log) == [(0, 9), (10, 19), (20, 29)]
    assert all(storage.stat(s.data_object_key) is not None for s in (a, b, c))
    # and the next pass finds nothing to undo or delete
    plan, outcome = clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 10**12)
    assert plan.empty and outcome.deleted == [] and served(log) == [(0, 9), (10, 19), (20, 29)]


def test_a_rewrite_record_alone_proves_nothing_garbage(tmp_path: Path) -> None:
    """Found by the ownership model: a forged rewrite (the claim's epoch and writer id, no objects)
    made the next owner's first pass delete the acknowledged segment it named. Only a rewrite whose
    objects are in the bucket proves its sources garbage."""
    log = Log()
    epoch, (a, b, _c) = three(log)
    storage = FilesystemChunkStorage(tmp_path)
    stored(storage, a, b)
    _, forged = rewrite(log, 0, 19, epoch, [a, b])
    assert log.state().rewrite_superseded() == {a.segment_id.id, b.segment_id.id}
    assert deleter(log, storage).proven_superseded(log.state()) == frozenset()
    errors = deleter(log, storage).delete_superseded(TP, [a, b], epoch, log.state())
    assert len(errors) == 2 and all("kept" in e for e in errors)
    assert all(storage.stat(s.data_object_key) is not None for s in (a, b))
    stored(storage, forged)  # with its objects, the rewrite is a real one
    assert deleter(log, storage).proven_superseded(log.state()) == {a.segment_id.id, b.segment_id.id}


def test_no_merge_takes_the_sources_of_a_merge_whose_deletion_waits_to_be_undone() -> None:
    """Found by the ownership model: a forged delete of a merge served its sources again; a new
    merge took them; the holder's undoing of the forged delete was then refused as an overlap and the
    first merge never left its limbo. Sources of a rewrite being deleted are not merged."""
    from processor.rewrite.merge_plan import MergeLimits
    from processor.rewrite.merge_runner import planned_runs

    log = Log()
    epoch, (a, b, c) = three(log)
    _, merged = rewrite(log, 0, 19, epoch, [a, b])
    log.publish(merged.deleting(5, "w", epoch))  # forged: the sources are served again meanwhile
    part = log.state()
    assert {s.segment_id for s in part.finished()} == {a.segment_id, b.segment_id, c.segment_id}
    limits = MergeLimits(target_bytes=1000, small_bytes=500, min_age_ms=0)
    assert planned_runs(part, limits, 10**12) == []  # a and b wait; c alone is no run


def test_the_cache_applying_a_rewrite_and_a_later_overlap_in_one_batch_agrees_with_the_fold(
    tmp_path: Path,
) -> None:
    """A follower catching up (a rebuilt cache, a metadata partition that lost its tail) applies a
    rewrite and what follows it in one batch: a FINISHED overlapping the rewrite's last offsets
    must be refused there as the fold refuses it (the cache's in-batch index of served segments
    kept the rewrite's sources, each inside its range, and stopped looking before the rewrite)."""
    from processor.follower.cache_writes import RawMessage
    from processor.follower.metadata_cache import MetadataCache

    log = Log()
    epoch, sources = three(log)
    ok, merged = rewrite(log, 0, 29, epoch, sources)
    assert ok
    _ok, late = copy(log, 29, 29, epoch)  # overlaps the merge's last offset
    assert served(log) == [(0, 29)]
    cache = MetadataCache(tmp_path / "cache")
    try:
        cache.apply_batch([RawMessage(0, offset, key, value) for offset, key, value in log.messages])
        assert [s.segment_id for s in cache.remote_state(TP).finished()] == [merged.segment_id]
        assert late.segment_id not in {s.segment_id for s in cache.remote_state(TP).finished()}
    finally:
        cache.close()


def _compacted_serves(messages: list[tuple[int, bytes, bytes | None]], point: int) -> set[tuple[int, int]]:
    """What a reader of the topic the cleaner compacted up to ``point`` serves."""
    latest = {k: o for o, k, _ in messages if o < point}
    fold = MetadataFold()
    for o, k, v in messages:
        if o >= point or (latest[k] == o and v is not None):
            fold.apply_raw(o, k, v)
    return {(s.start_offset, s.end_offset) for s in PartitionRemoteState.of(fold.partition(TP)).finished()}


def test_a_deleted_rewrite_is_forgotten_only_once_no_segment_it_names_is_finished() -> None:
    """A merge, an erasure's rewrite of the merge; the merge is deleted while one of its own sources
    could not be (its proof failed). Tombstoning the merge then would leave a reader of the compacted
    topic the source and the erasure's rewrite naming a segment it does not know: it would serve the
    source (with the erased records) and refuse the rewrite. The merge is forgotten once its sources
    are gone, and every cleaner point serves what live readers do."""
    log, epoch, (a, b, c, merged, erased) = _merge_then_erase()

    def delete(seg: RemoteLogSegmentMetadata) -> None:
        deleting = seg.deleting(5, "w", epoch)
        assert log.accepted[log.publish(deleting)]
        assert log.accepted[log.publish(deleting.with_state(S.DELETE_SEGMENT_FINISHED, 6))]

    def forget_and_check() -> None:
        for seg in log.state().deletion_finished():
            log.tombstone(seg)
        live = set(served(log))
        assert live == {(0, 19), (20, 29)}
        for point in range(len(log.messages) + 1):
            assert _compacted_serves(list(log.messages), point) == live, point

    delete(merged)
    delete(b)  # a's proof failed: a stays finished, held
    forget_and_check()
    assert set(log.state().segments) == {
        a.segment_id.id,
        merged.segment_id.id,
        c.segment_id.id,
        erased.segment_id.id,
    }
    delete(a)
    forget_and_check()
    assert set(log.state().segments) == {c.segment_id.id, erased.segment_id.id}
