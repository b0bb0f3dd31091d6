"""The fold in memory and the follower's RocksDB cache decide every message alike: random histories
under claims that serve segments (every run ends serving some), with the faults the ownership model
knows (zombies, records forged with the holder's epoch and writer id, hostile tombstones, claim
tombstones, repairs, claims stated again, deletions, compaction's effect of dropping records), fed to
the cache in random batches. Everything a reader acts on is compared: the served segments, every
listed segment, the header (claim, topic ids, start offset), the shadowed keys and the orphans."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import delete_key, encode_value, record_key, segment_key
from processor.metadata.fold import MetadataFold
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

TP = TopicPartition("orders", 0)
KEYS = ObjectKeyFactory("archive")
S = SegmentState
STEPS = [
    "claim",
    "copy",
    "copy",
    "copy",
    "zombie",
    "forged_overlap",
    "forged_delete",
    "tombstone",
    "claim_tombstone",
    "restate",
    "release",
    "repair",
    "delete",
    "forget",
    "log_start",
    "drop",
]


class History:
    """Messages of one metadata partition, written the way owners and attackers write them."""

    def __init__(self) -> None:
        self.messages: list[tuple[int, bytes, bytes | None]] = []
        self.live = MetadataFold()
        self.next_end = 0
        self.ids = 0

    def append(self, key: bytes, value: bytes | None) -> bool:
        offset = len(self.messages)
        self.messages.append((offset, key, value))
        return self.live.apply_raw(offset, key, value).accepted

    def publish(self, record: MetadataRecord) -> bool:
        return self.append(record_key(record), encode_value(record))

    def uuid(self) -> uuid.UUID:
        self.ids += 1
        return uuid.UUID(int=self.ids)

    def state(self) -> PartitionRemoteState:
        return PartitionRemoteState.of(self.live.partition(TP))

    def segment(self, start: int, end: int, epoch: int, writer: str) -> RemoteLogSegmentMetadata:
        sid = RemoteLogSegmentId(TP.topic, TP.partition, self.uuid())
        keys = KEYS.segment(TP.topic, TP.partition, start, sid.id, epoch)
        return RemoteLogSegmentMetadata(
            sid, start, end, end, 1, writer, epoch, ((0, start),), 1, S.COPY_SEGMENT_STARTED,
            keys.data, keys.index, 2, end - start + 1, 0, 1,
        )  # fmt: skip

    def claim(self, writer: str) -> None:
        self.publish(PartitionClaim(TP, self.uuid(), ClaimKind.LEAD, writer, 0))

    def copy(self, length: int) -> None:
        claim = self.state().header.claim
        if claim is None:
            return
        start = self.next_end
        started = self.segment(start, start + length - 1, claim.epoch, claim.writer_id)
        if self.publish(started) and self.publish(started.with_state(S.COPY_SEGMENT_FINISHED, 2)):
            self.next_end = start + length


def _step(h: History, step: str, data: st.DataObject) -> None:
    state = h.state()
    claim = state.header.claim
    served = state.finished()
    if step == "claim":
        h.claim(data.draw(st.sampled_from(["a", "b"])))
    elif step == "copy":
        h.copy(data.draw(st.integers(1, 4)))
    elif step == "zombie" and served and claim is not None:
        victim = data.draw(st.sampled_from(served))
        h.publish(dataclasses.replace(victim, writer_epoch=max(0, claim.epoch - 1), event_timestamp_ms=3))
    elif step == "forged_overlap" and served and claim is not None:
        victim = data.draw(st.sampled_from(served))
        broken = h.segment(victim.start_offset, victim.end_offset + 2, claim.epoch, claim.writer_id)
        h.publish(broken.with_state(S.COPY_SEGMENT_FINISHED, 4))
    elif step == "forged_delete" and served and claim is not None:
        victim = data.draw(st.sampled_from(served))
        forged = victim.deleting(5, claim.writer_id, claim.epoch)
        h.publish(forged if data.draw(st.booleans()) else dataclasses.replace(forged, replaces_state=None))
    elif step == "tombstone" and state.segments:
        victim = data.draw(st.sampled_from(sorted(state.segments.values(), key=lambda s: s.start_offset)))
        h.append(
            data.draw(st.sampled_from([segment_key(victim.segment_id), delete_key(victim.segment_id)])), None
        )
    elif step == "claim_tombstone":
        claims = sorted({k for _o, k, v in h.messages if b"/claim/" in k and v is not None})
        if claims:
            key = data.draw(st.sampled_from(claims))
            h.append(key, None if data.draw(st.booleans()) else b"\x01\x04junk")
    elif step == "restate" and claim is not None:
        h.publish(
            PartitionClaim(
                TP, claim.claim_id, claim.kind, claim.writer_id, 6, claim.topic_id, restates_epoch=claim.epoch
            )
        )
    elif step == "release" and claim is not None:
        h.publish(
            PartitionClaim(TP, h.uuid(), ClaimKind.RELEASE, claim.writer_id, 7, released_epoch=claim.epoch)
        )
    elif step == "repair" and claim is not None:
        for seg in state.repairs():
            h.publish(dataclasses.replace(seg, writer_id=claim.writer_id, writer_epoch=claim.epoch))
    elif step == "delete" and served and claim is not None:
        victim = served[0]
        started = victim.deleting(8, claim.writer_id, claim.epoch)
        if h.publish(started):
            h.publish(started.with_state(S.DELETE_SEGMENT_FINISHED, 9))
            h.publish(RemoteLogStartOffset(TP, victim.end_offset + 1, 9, claim.writer_id, claim.epoch))
    elif step == "forget":
        for seg in state.deletion_finished():
            h.append(segment_key(seg.segment_id), None)
            h.append(delete_key(seg.segment_id), None)
    elif step == "log_start" and claim is not None:
        h.publish(
            RemoteLogStartOffset(TP, data.draw(st.integers(0, h.next_end)), 9, claim.writer_id, claim.epoch)
        )
    elif step == "drop" and h.messages:
        # what the cleaner does to a key: an older record of a key that has a newer one goes
        i = data.draw(st.integers(0, len(h.messages) - 1))
        _o, key, _v = h.messages[i]
        if any(k == key for _x, k, _y in h.messages[i + 1 :]):
            del h.messages[i]
            h.live = MetadataFold()
            for o, k, v in h.messages:
                h.live.apply_raw(o, k, v)


def _compare(fold: MetadataFold, cache: MetadataCache) -> None:
    memory = PartitionRemoteState.of(fold.partition(TP))
    rocks = cache.remote_state(TP)
    listed = {sid: s for sid, s in memory.segments.items() if s.state is not S.DELETE_SEGMENT_FINISHED}
    assert rocks.segments == listed
    assert rocks.served == memory.served
    assert rocks.header == memory.header
    assert rocks.shadowed == memory.shadowed
    assert rocks.orphans == memory.orphans


# each example opens a RocksDB: its time depends on the disk, not on the code under test
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(STEPS), max_size=30), st.integers(1, 6), st.data())
def test_the_memory_fold_and_the_rocksdb_cache_agree_on_histories_that_serve(
    tmp_path: Path, steps: list[str], batch: int, data: st.DataObject
) -> None:
    h = History()
    h.claim("a")
    h.copy(3)
    for step in steps:
        _step(h, step, data)
    # every run ends serving something: a new claim copies past everything
    h.claim("b")
    h.next_end = max([h.next_end, *(s.end_offset + 1 for s in h.state().segments.values())])
    h.next_end = max(h.next_end, h.state().log_start_offset)
    h.copy(2)
    fold = MetadataFold()
    for offset, key, value in h.messages:
        fold.apply_raw(offset, key, value)
    assert fold.partition(TP).finished(), "the history serves nothing"
    cache = MetadataCache(tmp_path / f"c{uuid.uuid4()}")
    try:
        for i in range(0, len(h.messages), batch):
            cache.apply_batch([RawMessage(0, o, k, v) for o, k, v in h.messages[i : i + batch]])
            part = MetadataFold()
            for o, k, v in h.messages[: i + batch]:
                part.apply_raw(o, k, v)
            _compare(part, cache)
    finally:
        cache.close()
