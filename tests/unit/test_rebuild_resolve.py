"""What a rebuilt metadata topic serves, from manifests alone."""

from __future__ import annotations

import uuid
from dataclasses import replace

from processor.kafka.partition import TopicPartition
from processor.metadata.manifest import SegmentManifest
from processor.rebuild.resolve import current_topic_ids, plan_rebuild
from tests.unit.test_rebuild_inventory import KEYS, TOPIC_ID, segment

OTHER_ID = str(uuid.UUID(int=8))


def manifest(
    partition: int, start: int, end: int, when: int = 1, topic_id: str = TOPIC_ID
) -> SegmentManifest:
    seg = segment(partition, start, end)
    keys = KEYS.segment("orders", partition, start, seg.segment_id.id, seg.writer_epoch, topic_id)
    seg = replace(
        seg,
        segment_id=replace(seg.segment_id, topic_id=topic_id),
        event_timestamp_ms=when,
        data_object_key=keys.data,
        index_object_key=keys.index,
    )
    return SegmentManifest(seg, uuid.uuid4())


def test_contiguous_segments_are_all_served_and_stamped() -> None:
    found = [manifest(0, 100, 199), manifest(0, 0, 99), manifest(1, 0, 9)]
    plan = plan_rebuild(found, {}, now_ms=42)
    assert [
        (s.start_offset, s.writer_epoch, s.event_timestamp_ms)
        for s in plan[TopicPartition("orders", 0)].served
    ] == [
        (0, 0, 42),
        (100, 0, 42),
    ]
    assert not plan[TopicPartition("orders", 0)].not_served
    assert len(plan[TopicPartition("orders", 1)].served) == 1


def test_an_overlapping_copy_is_served_once() -> None:
    first, copy = manifest(0, 0, 99), manifest(0, 50, 149)
    part = plan_rebuild([first, copy], {}, now_ms=1)[TopicPartition("orders", 0)]
    assert len(part.served) == 1 and len(part.not_served) == 1
    assert part.not_served[0][1] == "overlap"


def test_only_the_current_topic_ids_segments_are_served() -> None:
    old, new = manifest(0, 0, 99, when=1, topic_id=OTHER_ID), manifest(0, 0, 49, when=2)
    assert current_topic_ids([old, new], {}) == {"orders": TOPIC_ID}  # the newest history
    assert current_topic_ids([old, new], {"orders": OTHER_ID}) == {"orders": OTHER_ID}  # the broker's
    part = plan_rebuild([old, new], {}, now_ms=1)[TopicPartition("orders", 0)]
    assert [s.segment_id.id for s in part.served] == [new.segment.segment_id.id]
    assert [(m.segment.segment_id.id, why) for m, why in part.not_served] == [
        (old.segment.segment_id.id, "old_topic_id")
    ]


def test_a_rewrite_is_served_over_older_leftovers_it_covers_but_could_not_name() -> None:
    """A merge of a merge: the bucket still holds the first merge's sources (a deletion that never
    happened) but not the first merge itself; the second names only what it replaced. The rebuild
    serves the newest rewrite, not the leftovers (which, first in offset order, were served and the
    rewrite refused as an overlap: a gap where it reached further)."""
    left_a, left_b = manifest(0, 0, 0, when=1), manifest(0, 1, 1, when=1)
    rewrite = manifest(0, 0, 2, when=5)
    rewrite = SegmentManifest(
        replace(rewrite.segment, supersedes=(uuid.uuid4(), uuid.uuid4())), rewrite.claim_id
    )
    after = manifest(0, 3, 9, when=6)
    part = plan_rebuild([left_a, left_b, rewrite, after], {}, now_ms=7)[TopicPartition("orders", 0)]
    assert [(s.start_offset, s.end_offset) for s in part.served] == [(0, 2), (3, 9)]
    assert sorted((m.segment.start_offset, why) for m, why in part.not_served) == [
        (0, "overlap"),
        (1, "overlap"),
    ]


def test_the_sources_a_rewrite_names_are_published_before_it_to_be_deleted() -> None:
    """A merge killed after its FINISHED left its sources in the bucket: the rebuild publishes them
    first, then the merge, which takes them over (readers serve the merge; the owner deletes the
    sources with the merge's proof). Unpublished, they stayed in the bucket for good and came back
    in a later rebuild once retention had deleted the merge."""
    a, b = manifest(0, 0, 4, when=1), manifest(0, 5, 9, when=1)
    merged = manifest(0, 0, 9, when=5)
    names = (a.segment.segment_id.id, b.segment.segment_id.id)
    merged = SegmentManifest(replace(merged.segment, supersedes=names), merged.claim_id)
    part = plan_rebuild([merged, b, a], {}, now_ms=7)[TopicPartition("orders", 0)]
    assert [s.segment_id.id for s in part.served] == [merged.segment.segment_id.id]
    assert [s.segment_id.id for s in part.published] == [*names, merged.segment.segment_id.id]
    assert [s.segment_id.id for s in part.superseded] == list(names)
    assert part.not_served == []
