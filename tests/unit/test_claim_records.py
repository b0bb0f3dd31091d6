"""Claim records get the protection segment records have: a tombstone under a claim's key is
rejected and repaired, so compaction can never leave a claim's records without their claim. Pure:
the real fold, codec, retention pass and deleter over a filesystem bucket."""

from __future__ import annotations

import dataclasses
import json
import uuid
from pathlib import Path

from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.lifecycle.retention_policy import RetentionLimits
from processor.lifecycle.retention_service import clean_partition
from processor.metadata.codec import claim_key, decode_value, encode_value
from processor.metadata.fold import MetadataFold
from processor.metadata.fold_reasons import MISPLACED
from processor.metadata.fold_state import PartitionHeader
from processor.metadata.model import ClaimKind, PartitionClaim, SegmentState
from processor.metadata.partition_header_codec import decode_header, encode_header
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_claims import KEYS, TP, Log, copy, deleter
from tests.unit.test_deletion_proof import fresh, keys_in, objects_of, served, upload

S = SegmentState


def _claim(log: Log, offset: int) -> PartitionClaim:
    record = decode_value(log.messages[offset][2] or b"")
    assert isinstance(record, PartitionClaim)
    return record


def _every_cleaning_point_serves(log: Log, expected: set[uuid.UUID]) -> None:
    for point in range(len(log.messages) + 1):
        assert served(fresh(log, point)) == expected, f"a cleaning point at {point} serves less"


def test_a_tombstone_on_the_owners_claim_key_is_repaired_and_every_reader_keeps_serving(
    tmp_path: Path,
) -> None:
    """Before: the tombstone was accepted and recorded nothing, so the owner had nothing to repair;
    once compacted, readers from the topic rejected every segment of the claim (stale_epoch), and the
    owner restarted on such a view deleted the objects of the one whose manifest write had failed."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    log.claim("a")  # an earlier owner
    epoch = log.claim("w")
    segments = [copy(log, i * 10, i * 10 + 9, epoch)[1] for i in range(3)]
    for seg in segments:
        upload(storage, seg, manifest=seg is not segments[2])  # the last one's manifest write failed
    ids = {s.segment_id.id for s in segments}
    log._append(claim_key(_claim(log, epoch)), None)  # hostile: under the owner's own claim key
    assert log.fold.rejected == {MISPLACED: 1}
    assert served(log.fold) == ids and log.state().current_epoch == epoch
    # the owner's next pass repairs it; another pass finds nothing left to do
    clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 0)
    assert log.state().shadowed == set()
    before = len(log.messages)
    clean_partition(TP, log.state(), deleter(log, storage), epoch, RetentionLimits(), 0)
    assert len(log.messages) == before
    _every_cleaning_point_serves(log, ids)
    compacted = fresh(log)
    assert compacted.partition(TP).current_epoch == epoch
    # the owner restarted on a cache built from the compacted topic: a new claim, a pass
    view = Compacted(log)
    again = view.claim("w")
    assert served(view.fold) == ids
    clean_partition(TP, view.state(), deleter(view, storage), again, RetentionLimits(), 0)
    assert served(view.fold) == ids
    for seg in segments:
        assert {seg.data_object_key, seg.index_object_key} <= keys_in(storage)
    assert objects_of(segments[0]) <= keys_in(storage)


class Compacted(Log):
    """The topic as a reader finds it after the cleaner went over all of it (offsets kept)."""

    def __init__(self, source: Log) -> None:
        super().__init__()
        latest: dict[bytes, int] = {}
        for offset, key, _value in source.messages:
            latest[key] = offset
        self.next = len(source.messages)
        for offset, key, value in source.messages:
            if latest[key] == offset and value is not None:
                self.messages.append((offset, key, value))
                self.accepted[offset] = self.fold.apply_raw(offset, key, value).accepted

    def _append(self, key: bytes, value: bytes | None) -> int:
        offset = self.next
        self.next += 1
        self.messages.append((offset, key, value))
        self.accepted[offset] = self.fold.apply_raw(offset, key, value).accepted
        return offset


def test_a_tombstone_on_a_released_admin_claim_is_repaired_by_the_next_owner(tmp_path: Path) -> None:
    """The records of ``processor rekey``: an ADMIN claim, every served segment published again
    under it (its data key re-wrapped), a RELEASE. Before: a tombstone under the ADMIN claim's key,
    once compacted, left readers from the topic serving none of the segments."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    log.claim("a")  # an earlier owner
    worker = log.claim("w")
    segments = [copy(log, i * 10, i * 10 + 9, worker)[1] for i in range(3)]
    for seg in segments:
        upload(storage, seg)
    admin = log.claim("rekey", ClaimKind.ADMIN)
    for seg in segments:
        again = dataclasses.replace(seg, writer_id="rekey", writer_epoch=admin, custom_metadata=b"k2")
        assert log.accepted[log.publish(again)]
    release = PartitionClaim(TP, uuid.uuid4(), ClaimKind.RELEASE, "rekey", 0, released_epoch=admin)
    log.publish(release)
    log._append(claim_key(_claim(log, admin)), None)
    ids = {s.segment_id.id for s in segments}
    assert served(log.fold) == ids
    owner = log.claim("w")
    clean_partition(TP, log.state(), deleter(log, storage), owner, RetentionLimits(), 0)
    assert log.state().shadowed == set()
    _every_cleaning_point_serves(log, ids)
    state = PartitionRemoteState.of(fresh(log).partition(TP))
    assert {s.custom_metadata for s in state.finished()} == {b"k2"}


def test_a_claim_restatement_round_trips_and_a_claim_of_the_earlier_schema_still_reads() -> None:
    claim = PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 5, None, restates_epoch=3)
    assert decode_value(encode_value(claim)) == claim
    plain = dataclasses.replace(claim, restates_epoch=-1)
    earlier = encode_value(plain)[:-1]  # what the earlier schema wrote: no restates_epoch at the end
    assert decode_value(earlier) == plain


def test_a_restatement_by_anyone_but_the_holder_is_rejected() -> None:
    log = Log()
    epoch = log.claim("w")
    claim = _claim(log, epoch)
    forged = dataclasses.replace(claim, writer_id="mallory", restates_epoch=epoch)
    assert not log.accepted[log.publish(forged)]
    other = dataclasses.replace(claim, claim_id=uuid.uuid4(), restates_epoch=epoch)
    assert not log.accepted[log.publish(other)]
    assert (
        log.state().current_epoch == epoch and log.state().header.claim == log.fold.partition(TP).header.claim
    )
    assert isinstance(log.fold, MetadataFold)


def test_a_zombie_stating_its_claim_again_after_a_later_claim_was_released_is_rejected(
    tmp_path: Path,
) -> None:
    """The owner's claim key was tombstoned; an operator's command took the partition and released
    it; the owner, paused meanwhile, states its old claim again: with nobody holding a claim, readers
    took it as current again, and its next record (a repair of a segment the command deleted) was
    the holder's own word rejected. The highest claim epoch seen, kept in the partition's header (and
    the follower cache's), rejects it; every reader agrees at every cleaning point."""
    log = Log()
    epoch = log.claim("w")
    claim = _claim(log, epoch)
    log._append(claim_key(claim), None)  # a hostile tombstone on the holder's claim key
    admin = log.claim("op", ClaimKind.ADMIN)
    release = PartitionClaim(TP, uuid.uuid4(), ClaimKind.RELEASE, "op", 0, released_epoch=admin)
    assert log.accepted[log.publish(release)]
    assert log.state().current_epoch is None and log.state().header.highest_claim_epoch == admin
    again = dataclasses.replace(claim, restates_epoch=epoch, event_timestamp_ms=1)
    assert not log.accepted[log.publish(again)]
    assert log.state().current_epoch is None
    for point in range(len(log.messages) + 1):
        assert fresh(log, point).partition(TP).header.current_epoch is None, f"cleaning point {point}"
    cache = MetadataCache(tmp_path / "cache")
    try:
        cache.apply_batch([RawMessage(0, o, k, v) for o, k, v in log.messages])
        assert cache.remote_state(TP).header == log.state().header
    finally:
        cache.close()


def test_the_partition_header_keeps_the_highest_claim_epoch_and_reads_one_written_without_it() -> None:
    header = PartitionHeader(claimed=True, highest_claim_epoch=8)
    assert decode_header(encode_header(header)) == header
    earlier = json.loads(encode_header(header))
    del earlier["highest_claim"]
    assert decode_header(json.dumps(earlier).encode()).highest_claim_epoch == -1


def test_an_epoch_handed_out_again_after_the_metadata_lost_its_tail_sweeps_nothing_of_the_first(
    tmp_path: Path,
) -> None:
    """The metadata partition loses its tail (an unclean leader election, a topic restored from an
    older copy): the claim at offset 3 and the copy it acknowledged are gone, and the owner's next
    claim gets offset 3 again. Before: the start-up gate let it lead (the metadata knows the
    partition) and its sweep deleted the acknowledged copy, whose manifest write had failed and
    whose objects carry epoch 3 in their names. Now the sweep deletes only objects the storage wrote
    after the claim was first seen (and an epoch's sweep is remembered with the claim's id)."""
    import os

    from processor.lifecycle.retention_config import RetentionConfig
    from processor.lifecycle.retention_service import RetentionService, StateView

    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    log.claim("a")
    _ok, kept = copy(log, 0, 9, 0, "a")
    upload(storage, kept)
    epoch = log.claim("w")
    assert epoch == 3
    _ok, lost = copy(log, 10, 19, epoch)  # acknowledged; its manifest write failed
    upload(storage, lost, manifest=False)
    an_hour_ago = (tmp_path.stat().st_mtime - 3600, tmp_path.stat().st_mtime - 3600)
    for name in (lost.data_object_key, lost.index_object_key):
        os.utime(tmp_path / name, an_hour_ago)
    truncated = Log()  # what is left: everything before offset 3
    for _offset, key, value in log.messages[:3]:
        truncated._append(key, value)
    again = truncated.claim("w")
    assert again == epoch, "the same epoch, handed out again"
    service = RetentionService(
        RetentionConfig(RetentionLimits(), ()),
        StateView({}),
        deleter(truncated, storage),
        None,
        unreferenced_min_age_ms=0,
    )
    for _pass in range(3):
        service.view = StateView({TP: truncated.state()})
        service.run_pass({TP: again})
    assert {lost.data_object_key, lost.index_object_key} <= keys_in(storage)
    assert objects_of(kept) <= keys_in(storage)
    # and what this claim itself left unrecorded is still swept
    stray = dataclasses.replace(lost, segment_id=dataclasses.replace(lost.segment_id, id=uuid.uuid4()))
    stray_keys = KEYS.segment(TP.topic, TP.partition, 30, stray.segment_id.id, again)
    storage.create(stray_keys.data, [b"d"])
    service2 = RetentionService(
        RetentionConfig(RetentionLimits(), ()),
        StateView({TP: truncated.state()}),
        deleter(truncated, storage),
        None,
        unreferenced_min_age_ms=0,
    )
    service2.run_pass({TP: again})
    storage.create(stray_keys.index, [b"i"])
    service2.run_pass({TP: again})
    assert stray_keys.index not in keys_in(storage)
    assert {lost.data_object_key, lost.index_object_key} <= keys_in(storage)
