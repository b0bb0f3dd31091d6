"""The deleter takes each step of a pass for all its segments at once (every DELETE_SEGMENT_STARTED
published together and confirmed, then every manifest, then the other objects with ``delete_many``,
then every FINISHED): what a batch delete leaves is recorded for retry segment by segment, and a
record the readers refuse leaves its segment and every later one untouched."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import pytest

from processor import metrics
from processor.errors import FencedWriterError, StorageError
from processor.lifecycle.deletion_retries import retry_failed
from processor.lifecycle.retention_policy import RetentionLimits, plan_retention
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.model import MetadataRecord, RemoteLogSegmentMetadata, SegmentState
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_segment_deleter import TP, Journal, copy_segments

S = SegmentState
KEYS = ObjectKeyFactory("p")


class Batches(FilesystemChunkStorage):
    """A store whose deletes of some keys fail; counts the batch deletes it is asked for."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.failing: set[str] = set()
        self.batches: list[list[str]] = []

    def delete(self, key: str) -> None:
        if key in self.failing:
            raise StorageError(f"injected: cannot delete {key}")
        super().delete(key)

    def delete_many(self, keys: Iterable[str]) -> None:
        self.batches.append(list(keys))
        super().delete_many(self.batches[-1])


class BatchJournal(Journal):
    """The metadata topic's publisher as the deleter sees it, with its ``publish_many``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[int] = []  # records per publish_many

    def publish_many(self, records: Sequence[MetadataRecord]) -> list[int]:
        self.calls.append(len(records))
        return [self.publish(r) for r in records]


def segments_with_manifests(storage: Batches, n: int) -> list[RemoteLogSegmentMetadata]:
    segs = copy_segments(storage, n)
    for s in segs:
        storage.create(owned(s)[0], [b"manifest"])
    return segs


def owned(s: RemoteLogSegmentMetadata) -> tuple[str, str, str, str]:
    sid = s.segment_id
    return KEYS.owned_objects(
        sid.topic, sid.partition, sid.id, sid.topic_id, s.data_object_key, s.index_object_key
    ).in_delete_order()


def keys_in(storage: Batches) -> set[str]:
    return {info.key for info in storage.list("")}


def states(journal: Journal) -> list[tuple[SegmentState, object]]:
    return [
        (r.state, r.segment_id.id)
        for kind, r in journal.events
        if kind == "publish" and isinstance(r, RemoteLogSegmentMetadata)
    ]


def test_what_a_batch_delete_leaves_is_recorded_for_retry_segment_by_segment(tmp_path: Path) -> None:
    storage = Batches(tmp_path)
    segs = segments_with_manifests(storage, 4)
    storage.failing = {owned(segs[1])[1], owned(segs[2])[0]}  # seg 1's data, seg 2's manifest
    journal = BatchJournal()
    deleter = SegmentDeleter(storage, journal, journal, journal, "w", KEYS, lambda r, o: True)
    failures = metrics.DELETE_FAILURES._value.get()
    out = deleter.execute(TP, plan_retention(segs, RetentionLimits(retention_bytes=0), 10_000), 2)

    assert out.deleted == [segs[0], segs[3]]
    assert [s for s, _ in out.failed] == [segs[1], segs[2]]
    assert "cannot delete" in out.failed[0][1] and owned(segs[1])[1] in out.failed[0][1]
    assert metrics.DELETE_FAILURES._value.get() - failures == 2
    failed = [sid for kind, sid in journal.events if kind == "failed"]
    assert failed == [segs[1].segment_id.id, segs[2].segment_id.id]  # queued on the deletion topic
    # two batch deletes for the four: every manifest first, then the others' data, index, filter
    assert storage.batches[0] == [owned(s)[0] for s in segs]
    assert len(storage.batches) == 2 and owned(segs[2])[1] not in storage.batches[1]
    # the manifest of seg 2 could not go: none of its objects went (a rebuild would serve it whole)
    assert set(owned(segs[2])[:3]) <= keys_in(storage)
    assert keys_in(storage) == {owned(segs[1])[1], *owned(segs[2])[:3]}
    # all STARTED in one publish, confirmed; the FINISHED of the done ones in another
    assert journal.calls == [4, 2]
    assert states(journal) == [(S.DELETE_SEGMENT_STARTED, s.segment_id.id) for s in segs] + [
        (S.DELETE_SEGMENT_FINISHED, s.segment_id.id) for s in (segs[0], segs[3])
    ]

    # the next pass finishes the two (deletions this deleter started), and nothing else is asked
    storage.failing = set()
    stuck = [r for _, r in journal.events if isinstance(r, RemoteLogSegmentMetadata)][1:3]
    again = deleter.execute(TP, plan_retention(stuck, RetentionLimits(), 10_000), 2)
    assert [s.segment_id for s in again.deleted] == [segs[1].segment_id, segs[2].segment_id]
    assert again.failed == [] and keys_in(storage) == set()


def test_a_refused_record_leaves_its_segment_and_every_later_one_untouched(tmp_path: Path) -> None:
    storage = Batches(tmp_path)
    segs = segments_with_manifests(storage, 4)
    journal = BatchJournal()
    refused = segs[2].segment_id.id

    def confirm(record: MetadataRecord, offset: int) -> bool:
        return not (isinstance(record, RemoteLogSegmentMetadata) and record.segment_id.id == refused)

    deleter = SegmentDeleter(storage, journal, journal, journal, "w", KEYS, confirm)
    with pytest.raises(FencedWriterError, match=str(segs[2].segment_id)):
        deleter.execute(TP, plan_retention(segs, RetentionLimits(retention_bytes=0), 10_000), 2)
    # the two confirmed before it are deleted and finished; it and the one after keep every object
    assert keys_in(storage) == {k for s in segs[2:] for k in owned(s)[:3]}
    assert states(journal)[4:] == [(S.DELETE_SEGMENT_FINISHED, s.segment_id.id) for s in segs[:2]]
    assert set(deleter.started) == {s.segment_id.id for s in segs[:2]}  # only confirmed ones are its own
    assert [b for batch in storage.batches for b in batch if any(b in owned(s) for s in segs[2:])] == []


def test_the_deletion_topics_entries_are_retried_together(tmp_path: Path) -> None:
    """Entries of the deletion topic (deletions this deleter started): stated again in one publish,
    their objects deleted in two batch deletes, finished in one publish; one the readers refuse is
    left whole for the next pass, and its entry stays."""
    storage = Batches(tmp_path)
    segs = segments_with_manifests(storage, 3)
    stuck = [s.deleting(2, "w", 2) for s in segs]
    refused = segs[1].segment_id.id
    journal = BatchJournal()

    def confirm(record: MetadataRecord, offset: int) -> bool:
        return not (isinstance(record, RemoteLogSegmentMetadata) and record.segment_id.id == refused)

    deleter = SegmentDeleter(storage, journal, journal, journal, "w", KEYS, confirm)
    for s in stuck:
        deleter.started[s.segment_id.id] = (s.writer_epoch, s.event_timestamp_ms)  # its own
    by_id = {s.segment_id.id: s for s in stuck}
    out = retry_failed(deleter, segs, 2, lambda s: by_id[s.segment_id.id])
    assert [s.segment_id for s in out.deleted] == [segs[0].segment_id, segs[2].segment_id]
    assert out.failed == [] and journal.calls == [3, 2] and len(storage.batches) == 2
    assert keys_in(storage) == set(owned(segs[1])[:3])  # the refused one keeps every object
    resolved = [sid for kind, sid in journal.events if kind == "resolved"]
    assert resolved == [segs[0].segment_id.id, segs[2].segment_id.id]  # its entry stays pending
