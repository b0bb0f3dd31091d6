"""A read replica's log from the bucket: after every look at the bucket, the fold of its log serves
exactly what a rebuild would publish."""

from __future__ import annotations

import uuid

from processor.kafka.partition import TopicPartition
from processor.metadata.fold import MetadataFold
from processor.metadata.manifest import SegmentManifest
from processor.rebuild.mirror import MirrorState, mirror_messages
from processor.rebuild.resolve import plan_rebuild
from tests.unit.test_rebuild_resolve import OTHER_ID, manifest

TPS = [TopicPartition("orders", 0), TopicPartition("orders", 1)]


def served_by(fold: MetadataFold) -> set[uuid.UUID]:
    return {s.segment_id.id for tp in TPS for s in fold.partition(tp).finished()}


def step(fold: MetadataFold, state: MirrorState, bucket: list[SegmentManifest]) -> set[uuid.UUID]:
    plan = plan_rebuild(bucket, {}, now_ms=1)
    for offset, key, value in mirror_messages(state, plan, now_ms=1):
        assert fold.apply_raw(offset, key, value).accepted
    want = {s.segment_id.id for p in plan.values() for s in p.served}
    assert served_by(fold) == want
    return want


def test_the_replica_follows_the_bucket() -> None:
    fold, state = MetadataFold(), MirrorState()
    bucket = [manifest(0, 0, 99, when=1), manifest(1, 0, 9, when=1)]
    assert len(step(fold, state, bucket)) == 2
    bucket += [manifest(0, 100, 199, when=2), manifest(0, 200, 299, when=3)]  # archived since
    assert len(step(fold, state, bucket)) == 4
    assert step(fold, state, bucket) and state.next_offset == 6  # nothing new: no message
    bucket = bucket[1:]  # retention deleted 0..99 (its manifest first)
    assert len(step(fold, state, bucket)) == 3
    recreated = [manifest(0, 0, 49, when=9, topic_id=OTHER_ID)]  # the topic was deleted and re-created
    served = step(fold, state, [*bucket, *recreated])
    assert served == {recreated[0].segment.segment_id.id}  # only the new history of partition 0, ...
    assert {
        s.segment_id.id for s in fold.partition(TPS[1]).finished()
    } == set()  # ... and partition 1's old one is gone
