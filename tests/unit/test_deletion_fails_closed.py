"""A deletion's proof fails closed, and a rewrite proves its sources garbage by its content: the
sequences a review found losing acknowledged data with the project's own classes (the fold, the
segment deleter, the retention pass, the merge runner), each replayed here in process against a real
storage (a directory), storage errors injected by a wrapper around it.

1. A forged DELETE_SEGMENT_STARTED (the current claim's epoch and writer id, both readable from the
   topic) plus one failed HEAD during the holder's next pass deleted the segment: a plain one, and a
   merged one that was the only copy of its offsets.
2. A forged COPY_SEGMENT_FINISHED naming two served segments in ``supersedes``, with objects at its
   own keys (junk, or a real segment's), made the holder delete both as ``rewritten``.
3. (Sequence 4 of the review.) A merge deleted its sources without proof: after a forged delete of the
   just-accepted merge, the sources the fold serves again were deleted anyway.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from processor.kafka.partition import TopicPartition
from processor.lifecycle.retention_policy import RetentionLimits
from processor.lifecycle.retention_service import clean_partition
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.rewrite.ports import Copier
from processor.segment.sealed_segment import SealedSegment
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.filesystem import FilesystemChunkStorage
from tests.support.indexed_segments import FailingStorage, index_bytes, indexed, put
from tests.unit.test_claims import KEYS, TP, Log, S, segment
from tests.unit.test_erase import Archive as EraseArchive
from tests.unit.test_merge import Archive

LIMITS = RetentionLimits()  # unlimited: only proofs delete
NOW = 10**12


# processor_deletion_proofs_failed_total's reasons (processor/lifecycle/rewrite_proof.py)
PROOF_STORAGE_ERROR, PROOF_UNREADABLE, PROOF_NOT_COVERED = "storage_error", "unreadable", "not_covered"


def proofs_failed(reason: str) -> float:
    value = REGISTRY.get_sample_value("processor_deletion_proofs_failed_total", {"reason": reason})
    return value or 0.0


def deleter(log: Log, storage: ChunkStorage) -> SegmentDeleter:
    return SegmentDeleter(storage, log, log, log, "w", KEYS, log.confirm)


def copied(log: Log, storage: ChunkStorage, start: int, end: int, epoch: int) -> RemoteLogSegmentMetadata:
    """A segment copied as the copier copies it: STARTED, real objects, FINISHED confirmed."""
    started = indexed(segment(start, end, epoch, S.COPY_SEGMENT_STARTED))
    log.publish(started)
    put(storage, started)
    finished = started.with_state(S.COPY_SEGMENT_FINISHED, 2)
    assert log.confirm(finished, log.publish(finished))
    return finished


def rewritten(
    log: Log,
    storage: ChunkStorage | None,
    start: int,
    end: int,
    epoch: int,
    sources: list[RemoteLogSegmentMetadata],
    ranges: list[tuple[int, int]] | None = None,
) -> RemoteLogSegmentMetadata:
    """A rewrite naming ``sources``, confirmed accepted; its real objects (blocks over ``ranges``)
    written first when ``storage`` is given."""
    started = dataclasses.replace(
        indexed(segment(start, end, epoch, S.COPY_SEGMENT_STARTED), ranges),
        supersedes=tuple(s.segment_id.id for s in sources),
    )
    log.publish(started)
    if storage is not None:
        put(storage, started, ranges)
    finished = started.with_state(S.COPY_SEGMENT_FINISHED, 3)
    assert log.confirm(finished, log.publish(finished))
    return finished


def served(log: Log) -> list[tuple[int, int]]:
    return [(s.start_offset, s.end_offset) for s in log.state().finished()]


def present(storage: ChunkStorage, seg: RemoteLogSegmentMetadata) -> bool:
    return storage.stat(seg.data_object_key) is not None and storage.stat(seg.index_object_key) is not None


def owners_pass(log: Log, storage: ChunkStorage, epoch: int) -> None:
    clean_partition(TP, log.state(), deleter(log, storage), epoch, LIMITS, NOW)


# -- 1. a failed HEAD never finishes a forged delete -------------------------------------------------


@pytest.mark.parametrize("victim_kind", ["plain", "merged_only_copy"])
@pytest.mark.parametrize("failing", ["data", "index"])
def test_a_failed_head_during_the_holders_pass_never_finishes_a_forged_delete(
    tmp_path: Path, victim_kind: str, failing: str
) -> None:
    """Before: the HEAD's StorageError was taken as "its objects are partly gone" and the pass
    finished the forged deletion (data, index, manifest). Now it proves nothing: the deletion waits,
    counted; the next pass that can read serves the segment again; nothing was deleted."""
    disk = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    if victim_kind == "plain":
        victim = copied(log, disk, 0, 9, epoch)
    else:  # a merge whose sources were deleted by its proof: the only copy of its offsets
        a, b = copied(log, disk, 0, 9, epoch), copied(log, disk, 10, 19, epoch)
        victim = rewritten(log, disk, 0, 19, epoch, [a, b])
        owners_pass(log, disk, epoch)
        owners_pass(log, disk, epoch)  # and their keys forgotten (tombstoned)
        assert not present(disk, a) and not present(disk, b) and served(log) == [(0, 19)]
        assert log.state().rewrite_proofs() == {}
    # forged with the claim's epoch and writer id, both readable from the topic
    forged = victim.deleting(5, "w", epoch)
    assert log.confirm(forged, log.publish(forged))
    assert served(log) == []
    key = victim.data_object_key if failing == "data" else victim.index_object_key
    flaky = FailingStorage(disk, fails=lambda k: k == key)
    before = proofs_failed(PROOF_STORAGE_ERROR)
    owners_pass(log, flaky, epoch)
    assert flaky.failed, "the pass asked for the victim's objects"
    assert present(disk, victim), "a failed HEAD finished a forged deletion"
    assert proofs_failed(PROOF_STORAGE_ERROR) > before
    # the storage answers again: the forged deletion is undone, the segment served again
    owners_pass(log, disk, epoch)
    assert present(disk, victim) and served(log) == [(victim.start_offset, victim.end_offset)]


# -- 2. a forged rewrite with objects at its keys deletes nothing ----------------------------------


def _forged_over_two(
    tmp_path: Path, objects: str
) -> tuple[Log, FilesystemChunkStorage, int, list[RemoteLogSegmentMetadata], RemoteLogSegmentMetadata]:
    disk = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    a, b, c = (copied(log, disk, i * 10, i * 10 + 9, epoch) for i in range(3))
    if objects == "not_covering":  # a real index of its own whose one block holds a's offsets only
        forged = rewritten(log, disk, 0, 19, epoch, [a, b], [(0, 9)])
    else:
        forged = dataclasses.replace(
            indexed(segment(0, 19, epoch, S.COPY_SEGMENT_STARTED)),
            supersedes=(a.segment_id.id, b.segment_id.id),
        )
        if objects == "junk":
            disk.create(forged.data_object_key, [b"junk" * 64])
            disk.create(forged.index_object_key, [b"junk" * 64])
        else:  # a real 5-record segment's objects copied to its keys, its CRC and size in the record
            real = indexed(segment(100, 104, epoch))
            put(disk, real)
            disk.create(forged.data_object_key, [disk.read_all(real.data_object_key)])
            disk.create(forged.index_object_key, [disk.read_all(real.index_object_key)])
            forged = dataclasses.replace(
                forged, index_crc32=real.index_crc32, index_size_in_bytes=real.index_size_in_bytes
            )
        forged = forged.with_state(S.COPY_SEGMENT_FINISHED, 3)  # the holder's epoch and writer id
        assert log.confirm(forged, log.publish(forged))
    assert served(log) == [(0, 19), (20, 29)]
    return log, disk, epoch, [a, b, c], forged


@pytest.mark.parametrize("objects", ["junk", "another_segments", "not_covering"])
def test_a_forged_rewrite_with_objects_at_its_keys_deletes_none_of_its_victims(
    tmp_path: Path, objects: str
) -> None:
    """Before: the rewrite's data and index objects existing (two HEADs) proved its victims garbage,
    and the holder's pass deleted both as ``rewritten``. Now the rewrite's index is read and verified
    against its metadata and must cover every block of each victim: junk, another segment's objects
    or an index that does not hold a victim's offsets prove nothing, and the victims stay."""
    log, disk, epoch, (a, b, c), _forged = _forged_over_two(tmp_path, objects)
    reasons = (PROOF_UNREADABLE, PROOF_NOT_COVERED)
    before = sum(proofs_failed(r) for r in reasons)
    assert deleter(log, disk).proven_superseded(log.state()) <= {a.segment_id.id}
    owners_pass(log, disk, epoch)
    assert present(disk, b), "a forged rewrite's victim was deleted"
    if objects != "not_covering":
        assert present(disk, a), "a forged rewrite's victim was deleted"
        assert sum(proofs_failed(r) for r in reasons) > before
        # a rewrite whose index does not verify, everything it names still there: deleted by its
        # holder like one without objects, which serves its victims again
        assert served(log) == [(0, 9), (10, 19), (20, 29)]
    # whatever was deleted, every offset is still served and readable
    part = log.state()
    assert [(s.start_offset, s.end_offset) for s in part.finished()][-1] == (20, 29)
    assert all(present(disk, s) for s in part.finished()), "a served segment lost its objects"
    assert present(disk, c)


def test_a_failed_read_of_a_real_rewrites_index_proves_nothing_until_it_reads(tmp_path: Path) -> None:
    """A real merge, its index unreadable for one pass (a 503): its sources wait for the next pass,
    then go by its proof."""
    disk = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    a, b = copied(log, disk, 0, 9, epoch), copied(log, disk, 10, 19, epoch)
    merged = rewritten(log, disk, 0, 19, epoch, [a, b])
    flaky = FailingStorage(disk, fails=lambda k: k == merged.index_object_key)
    before = proofs_failed(PROOF_STORAGE_ERROR)
    owners_pass(log, flaky, epoch)
    assert present(disk, a) and present(disk, b) and proofs_failed(PROOF_STORAGE_ERROR) > before
    assert served(log) == [(0, 19)]
    owners_pass(log, disk, epoch)
    assert not present(disk, a) and not present(disk, b) and served(log) == [(0, 19)]


def test_a_merges_index_must_hold_every_block_of_each_source(tmp_path: Path) -> None:
    """The coverage rule itself: a merge keeps its sources' batches as stored, so each source block's
    first and last offsets lie inside one of its blocks; an erasure (one source) may drop whole
    batches, so its blocks only have to lie within its offsets."""
    disk = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    a, b = copied(log, disk, 0, 9, epoch), copied(log, disk, 10, 19, epoch)
    # blocks 0..9 and 12..19: b's block starts at 10, in the gap
    gap = rewritten(log, disk, 0, 19, epoch, [a, b], [(0, 9), (12, 19)])
    proven = deleter(log, disk).proven_superseded(log.state())
    assert proven == {a.segment_id.id}, "a merge with a gap over a source's block proved it garbage"
    assert gap.segment_id in {s.segment_id for s in log.state().finished()}
    log2, disk2 = Log(), FilesystemChunkStorage(tmp_path / "erase")
    epoch2 = log2.claim("w")
    source = copied(log2, disk2, 0, 9, epoch2)
    rewritten(log2, disk2, 0, 9, epoch2, [source], [(0, 2), (7, 9)])  # batches 3..6 erased
    assert deleter(log2, disk2).proven_superseded(log2.state()) == {source.segment_id.id}


# -- 3. the merge deletes its own sources by the same proof ---------------------------------------


class ForgesADeleteAfterTheRewrite:
    """The real copier; right after a rewrite's FINISHED is confirmed, someone who may write the
    metadata topic publishes a DELETE_SEGMENT_STARTED of it with the holder's epoch and writer id."""

    def __init__(self, arch: Archive | EraseArchive) -> None:
        self.arch = arch
        self.forged: list[RemoteLogSegmentMetadata] = []

    def copy(
        self,
        tp: TopicPartition,
        sealed: SealedSegment,
        writer_epoch: int,
        still_leader: Callable[[], bool] = lambda: True,
        supersedes: tuple[uuid.UUID, ...] = (),
    ) -> RemoteLogSegmentMetadata:
        merged = self.arch.copier.copy(tp, sealed, writer_epoch, supersedes=supersedes)
        forged = merged.deleting(7, "w", writer_epoch)
        assert self.arch.log.confirm(forged, self.arch.log.publish(forged))
        self.forged.append(merged)
        return merged


def test_a_merge_never_deletes_sources_the_fold_serves_again(tmp_path: Path) -> None:
    """Before: the merge deleted its sources with "no proof needed" (its own rewrite, just
    accepted); after a forged delete of that merge the fold served them again, and they went: their
    offsets unserved until the holder's next pass (lost, with a failed HEAD there). Now the merge
    asks the view after its FINISHED and deletes only what a served merge's index proves garbage."""
    arch = Archive(tmp_path, segments=4)
    before = [(s.start_offset, s.end_offset) for s in arch.served()]
    forging = ForgesADeleteAfterTheRewrite(arch)
    copier: Copier = forging
    report, runs = arch.merge(copier=copier)
    assert runs and forging.forged
    sources = [s for r in runs for s in r.segments]
    assert all(arch.storage.stat(s.data_object_key) is not None for s in sources), (
        "a merge deleted sources the fold serves again"
    )
    assert report.failed  # kept, and said so
    # every offset is served, by the sources, meanwhile
    assert [(s.start_offset, s.end_offset) for s in arch.served()] == before
    assert arch.read_batches() == arch.batches
    # the holder's next pass undoes the forged delete (the merge served again) and then its proof
    # deletes the sources
    for _ in range(2):
        clean_partition(TP, arch.log.state(), deleter(arch.log, arch.storage), arch.epoch, LIMITS, NOW)
    served_ids = {s.segment_id.id for s in arch.served()}
    assert all(m.segment_id.id in served_ids for m in forging.forged)
    assert not served_ids & {s.segment_id.id for s in sources}
    assert all(arch.storage.stat(s.data_object_key) is None for s in sources)
    assert arch.read_batches() == arch.batches


def test_an_erasure_never_deletes_a_source_the_fold_serves_again(tmp_path: Path) -> None:
    """The erasure deletes its source by the same proof: after a forged delete of the just-accepted
    rewrite the fold serves the source again, and it is kept; the holder's passes then serve the
    rewrite again and delete the source (the erased records go with it)."""
    arch = EraseArchive(tmp_path, segments=3)
    forging = ForgesADeleteAfterTheRewrite(arch)
    copier: Copier = forging
    report, _stats = arch.erase([b"user-3"], copier=copier)
    assert report.rewritten and forging.forged and report.failed
    rewrites = {m.segment_id.id for m in forging.forged}
    sources = [s for s in arch.log.state().segments.values() if s.segment_id.id not in rewrites]
    assert all(arch.storage.stat(s.data_object_key) is not None for s in sources), (
        "an erasure deleted a source the fold serves again"
    )
    assert {s.segment_id.id for s in arch.served()} == {s.segment_id.id for s in sources}
    for _ in range(2):
        clean_partition(TP, arch.log.state(), deleter(arch.log, arch.storage), arch.epoch, LIMITS, NOW)
    assert rewrites <= {s.segment_id.id for s in arch.served()}
    assert not any(r.key == b"user-3" for r in arch.read())
    erased = [s for s in sources if s.segment_id.id in {x for m in forging.forged for x in m.supersedes}]
    assert erased and all(arch.storage.stat(s.data_object_key) is None for s in erased)


def test_an_index_a_reader_cannot_verify_is_no_proof(tmp_path: Path) -> None:
    """The proof reads the index as a reader does: the CRC and size the metadata carries."""
    disk = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.claim("w")
    a, b = copied(log, disk, 0, 9, epoch), copied(log, disk, 10, 19, epoch)
    merged = rewritten(log, None, 0, 19, epoch, [a, b])
    good = index_bytes(merged)
    disk.create(merged.data_object_key, [bytes(merged.segment_size_in_bytes)])
    disk.create(merged.index_object_key, [good[:-1] + bytes([good[-1] ^ 1])])  # one bit off
    assert deleter(log, disk).proven_superseded(log.state()) == frozenset()
