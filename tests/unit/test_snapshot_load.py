"""Snapshots taken from a follower cache and loaded into a new one (processor/follower/snapshots.py,
snapshot_writer.py): a cache from a snapshot plus the topic's tail holds exactly what a cache of the
whole topic holds, and a snapshot the topic no longer agrees with is never loaded."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor import metrics
from processor.errors import StorageError
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshot_format import decode_snapshot, record_crc
from processor.follower.snapshot_tables import segment_partition
from processor.follower.snapshot_writer import due_partitions, write_snapshots
from processor.follower.snapshots import SnapshotStore, load_snapshots
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import encode_value
from processor.metadata.model import (
    ClaimKind,
    PartitionClaim,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.storage.chunk_storage import ChunkInfo
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_fold_stores_agree import KEYS, STEPS, TP, History, _step

ORIGIN = "meta/TOPICID"
# the history's "drop" (a record compaction removes) renumbers what follows: left out here
NO_DROP = [s for s in STEPS if s != "drop"]
DAY_MS = 86_400_000


class Topic:
    """The metadata topic as the loader and the writer ask it (snapshots.TopicPeek): one partition,
    records by offset, with a low watermark and records compaction may have removed."""

    def __init__(self, messages: Sequence[tuple[int, bytes, bytes | None]], timestamp_ms: int = 0) -> None:
        self.messages = list(messages)
        self.low = 0
        self.timestamp_ms = timestamp_ms

    @property
    def high(self) -> int:
        return self.messages[-1][0] + 1 if self.messages else self.low

    def watermarks(self, partition: int) -> tuple[int, int]:
        return self.low, self.high

    def record_from(self, partition: int, offset: int) -> tuple[int, bytes | None, bytes | None, int] | None:
        for o, k, v in self.messages:
            if o >= offset:
                return o, k, v, self.timestamp_ms
        return None


OPEN: list[MetadataCache] = []


@pytest.fixture(autouse=True)
def _close_caches() -> Iterator[None]:
    yield
    while OPEN:
        OPEN.pop().close()


def _cache(
    tmp_path: Path, messages: Sequence[tuple[int, bytes, bytes | None]], batch: int = 7
) -> MetadataCache:
    """A cache that applied ``messages`` in batches of ``batch`` (closed after the test)."""
    cache = MetadataCache(tmp_path / f"cache-{uuid.uuid4()}")
    OPEN.append(cache)
    for i in range(0, len(messages), batch):
        cache.apply_batch([RawMessage(0, o, k, v) for o, k, v in messages[i : i + batch]])
    return cache


def _store(tmp_path: Path) -> SnapshotStore:
    return SnapshotStore(FilesystemChunkStorage(tmp_path / "bucket"), f"archive-{uuid.uuid4()}", ORIGIN)


def _assert_same(a: MetadataCache, b: MetadataCache, tps: Sequence[TopicPartition] = (TP,)) -> None:
    for tp in tps:
        assert a.remote_state(tp) == b.remote_state(tp)
    assert a.consumed_offsets() == b.consumed_offsets()


def _history(steps: Sequence[str], data: st.DataObject) -> History:
    h = History()
    h.claim("a")
    h.copy(3)
    for step in steps:
        _step(h, step, data)
    return h


# each example opens three RocksDBs: its time depends on the disk, not on the code under test
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(st.sampled_from(NO_DROP), max_size=30),
    st.lists(st.sampled_from(NO_DROP), max_size=15),
    st.data(),
)
def test_a_snapshot_and_the_tail_hold_what_the_whole_topic_holds(
    tmp_path: Path, before: list[str], after: list[str], data: st.DataObject
) -> None:
    """Histories with claims, forged deletes and overlaps, zombies, hostile and claim tombstones,
    repairs, releases and deletions: a snapshot at any point, then the rest of the history.
    (Compaction is the ownership model's: it compares a follower started from the newest snapshot
    with the live fold and a fresh fold of the compacted topic at every step.)"""
    h = _history(before, data)
    cut = len(h.messages)
    taker = _cache(tmp_path, h.messages, data.draw(st.integers(1, 9), label="batch"))
    store = _store(tmp_path)
    topic = Topic(h.messages)
    written = write_snapshots(taker, store, topic, [0], 1, keep=2)
    assert [w.next_offset for w in written] == [cut]
    for step in after:
        _step(h, step, data)
    topic.messages = list(h.messages)
    loaded = _cache(tmp_path, [])
    outcome = load_snapshots(loaded, store, topic, [0], 1, None, DAY_MS)[0]
    assert outcome.key == written[0].key and outcome.next_offset == cut
    loaded.apply_batch([RawMessage(0, o, k, v) for o, k, v in h.messages if o >= cut])
    _assert_same(loaded, _cache(tmp_path, h.messages))
    while OPEN:  # each example's databases closed with it
        OPEN.pop().close()


class OtherHistory(History):
    """A history of another partition, written after (in the same metadata partition as) ``first``."""

    tp = TopicPartition("payments", 3)

    def __init__(self, first: History) -> None:
        super().__init__()
        self.ids = first.ids
        for _offset, key, value in first.messages:
            self.append(key, value)

    def state(self) -> PartitionRemoteState:
        return PartitionRemoteState.of(self.live.partition(self.tp))

    def segment(self, start: int, end: int, epoch: int, writer: str) -> RemoteLogSegmentMetadata:
        sid = RemoteLogSegmentId(self.tp.topic, self.tp.partition, self.uuid())
        keys = KEYS.segment(self.tp.topic, self.tp.partition, start, sid.id, epoch)
        return RemoteLogSegmentMetadata(
            sid, start, end, end, 1, writer, epoch, ((0, start),), 1, SegmentState.COPY_SEGMENT_STARTED,
            keys.data, keys.index, 2, end - start + 1, 0, 1,
        )  # fmt: skip

    def claim(self, writer: str) -> None:
        self.publish(PartitionClaim(self.tp, self.uuid(), ClaimKind.LEAD, writer, 0))


def _two_topics() -> list[tuple[int, bytes, bytes | None]]:
    """A history of ``orders`` then one of ``payments`` (both in metadata partition 0 of 1)."""
    first = History()
    first.claim("a")
    first.copy(3)
    first.copy(2)
    second = OtherHistory(first)
    second.claim("b")
    second.copy(4)
    second.copy(1)
    return second.messages


def test_a_follower_of_some_topics_loads_only_theirs(tmp_path: Path) -> None:
    messages = _two_topics()
    payments = TopicPartition("payments", 3)
    taker = _cache(tmp_path, messages)
    assert taker.remote_state(payments).finished()
    store = _store(tmp_path)
    topic = Topic(messages)
    write_snapshots(taker, store, topic, [0], 1, keep=1)
    only = _cache(tmp_path, [])
    load_snapshots(only, store, topic, [0], 1, frozenset({"payments"}), DAY_MS)
    assert only.topic_partitions() == [payments]
    folded = MetadataCache(tmp_path / "folded")
    folded.apply_batch([RawMessage(0, o, k, v) for o, k, v in messages], frozenset({"payments"}))
    _assert_same(only, folded, [payments, TP])


def _written(tmp_path: Path, h: History, store: SnapshotStore | None = None) -> tuple[SnapshotStore, Topic]:
    store = store or _store(tmp_path)
    topic = Topic(h.messages)
    write_snapshots(_cache(tmp_path, h.messages), store, topic, [0], 1, keep=5)
    return store, topic


def _served_history(copies: int = 2) -> History:
    h = History()
    h.claim("a")
    for _ in range(copies):
        h.copy(3)
    return h


def _refusals(reason: str) -> float:
    return metrics.SNAPSHOTS_REFUSED.labels(reason)._value.get()  # type: ignore[no-any-return]


def test_a_snapshot_past_the_topic_end_is_refused_as_truncated(tmp_path: Path) -> None:
    h = _served_history()
    store, topic = _written(tmp_path, h)
    topic.messages = topic.messages[:-2]  # the metadata partition lost its tail
    before = _refusals("truncated")
    cache = _cache(tmp_path, [])
    outcome = load_snapshots(cache, store, topic, [0], 1, None, DAY_MS)[0]
    assert outcome.key is None and outcome.refused[0][1] == "truncated"
    assert cache.consumed_offsets() == {} and cache.topic_partitions() == []
    assert _refusals("truncated") == before + 1


def test_a_snapshot_whose_tail_was_deleted_is_refused(tmp_path: Path) -> None:
    h = _served_history()
    store, topic = _written(tmp_path, h)
    h.copy(2)
    topic.messages = list(h.messages)
    topic.low = len(h.messages) - 1  # DeleteRecords on the metadata topic
    outcome = load_snapshots(_cache(tmp_path, []), store, topic, [0], 1, None, DAY_MS)[0]
    assert outcome.key is None and outcome.refused[0][1] == "gone"


def test_a_topic_that_lost_its_tail_and_was_written_again_is_told_by_the_last_record(tmp_path: Path) -> None:
    h = _served_history()
    store, topic = _written(tmp_path, h)
    again = History()
    again.claim("b")
    for _ in range(4):
        again.copy(2)
    assert len(again.messages) >= len(h.messages)
    topic.messages = list(again.messages)
    outcome = load_snapshots(_cache(tmp_path, []), store, topic, [0], 1, None, DAY_MS)[0]
    assert outcome.key is None and outcome.refused[0][1] == "diverged"


def test_a_missing_last_record_is_compaction_only_once_it_is_old_enough(tmp_path: Path) -> None:
    h = _served_history()
    store, topic = _written(tmp_path, h)
    last = len(h.messages) - 1
    h.copy(1)
    topic.messages = [m for m in h.messages if m[0] != last]  # compacted away (or lost)
    young = load_snapshots(_cache(tmp_path, []), store, topic, [0], 1, None, 10**15)[0]
    assert young.key is None and young.refused[0][1] == "diverged"
    old = load_snapshots(_cache(tmp_path, []), store, topic, [0], 1, None, 0)[0]
    assert old.key is not None


def test_a_corrupt_newest_snapshot_falls_back_to_the_one_before(tmp_path: Path) -> None:
    h = _served_history()
    store, topic = _written(tmp_path, h)
    first_cut = len(h.messages)
    h.copy(2)
    store, topic = _written(tmp_path, h, store)
    newest = store.listed(0)[0]
    path = tmp_path / "bucket" / newest.key
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 1
    path.write_bytes(bytes(raw))
    cache = _cache(tmp_path, [])
    outcome = load_snapshots(cache, store, topic, [0], 1, None, DAY_MS)[0]
    assert [r[1] for r in outcome.refused] == ["corrupt"]
    assert outcome.next_offset == first_cut
    cache.apply_batch([RawMessage(0, o, k, v) for o, k, v in h.messages if o >= first_cut])
    _assert_same(cache, _cache(tmp_path, h.messages))


def test_a_snapshot_of_another_metadata_topic_or_partition_count_is_foreign(tmp_path: Path) -> None:
    h = _served_history()
    store, topic = _written(tmp_path, h)
    other = SnapshotStore(store.storage, store.prefix, ORIGIN)
    # the same folder, read as the snapshot of partition 0 of a topic with two partitions
    outcome = load_snapshots(_cache(tmp_path, []), other, topic, [0], 2, None, DAY_MS)[0]
    assert outcome.key is None and outcome.refused[0][1] == "foreign"


class FailingReads(FilesystemChunkStorage):
    """The bucket answers listings and fails every read (a 503 after the client's retries)."""

    def read(self, key: str, offset: int, length: int) -> bytes:
        raise StorageError(f"GET {key}: 503 Slow Down", retriable=True)


class FailingListings(FilesystemChunkStorage):
    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        raise StorageError(f"LIST {prefix}: 503", retriable=True)


@pytest.mark.parametrize("storage_class", [FailingReads, FailingListings])
def test_a_bucket_that_fails_means_the_topic_from_its_start(tmp_path: Path, storage_class: type) -> None:
    h = _served_history()
    store, topic = _written(tmp_path, h)
    failing = SnapshotStore(storage_class(tmp_path / "bucket"), store.prefix, ORIGIN)
    cache = _cache(tmp_path, [])
    outcome = load_snapshots(cache, failing, topic, [0], 1, None, DAY_MS)[0]
    assert outcome.key is None and cache.consumed_offsets() == {}


def test_older_snapshots_are_pruned_to_the_count_kept(tmp_path: Path) -> None:
    h = _served_history()
    store = _store(tmp_path)
    for _ in range(4):
        h.copy(1)
        cache = _cache(tmp_path, h.messages)
        write_snapshots(cache, store, Topic(h.messages), [0], 1, keep=2)
    listed = store.listed(0)
    assert len(listed) == 2
    assert listed[0].key.rsplit("/", 1)[-1].startswith(f"{len(h.messages):020d}-")


def test_two_writers_of_the_same_state_both_land(tmp_path: Path) -> None:
    h = _served_history()
    store = _store(tmp_path)
    cache = _cache(tmp_path, h.messages)
    write_snapshots(cache, store, Topic(h.messages), [0], 1, keep=5)
    write_snapshots(cache, store, Topic(h.messages), [0], 1, keep=5)
    assert len(store.listed(0)) == 2


def test_a_partition_is_due_when_its_newest_snapshot_is_old_and_behind(tmp_path: Path) -> None:
    h = _served_history()
    store = _store(tmp_path)
    cache = _cache(tmp_path, h.messages)
    assert due_partitions(cache, store, [0, 1], 1000, 0) == [0]  # 1 never consumed
    written = write_snapshots(cache, store, Topic(h.messages), [0], 1, keep=2)
    now = int(written[0].key.rsplit("/", 1)[-1].split("-")[1])
    assert due_partitions(cache, store, [0], 1000, now + 5000) == []  # nothing new since
    h.copy(1)
    cache.apply_batch([RawMessage(0, o, k, v) for o, k, v in h.messages[-2:]])
    assert due_partitions(cache, store, [0], 1000, now + 10) == []  # too soon
    assert due_partitions(cache, store, [0], 1000, now + 5000) == [0]


def test_a_snapshot_is_not_taken_after_a_record_the_topic_does_not_give(tmp_path: Path) -> None:
    h = _served_history()
    cache = _cache(tmp_path, h.messages)
    topic = Topic(h.messages[:-1])
    assert write_snapshots(cache, _store(tmp_path), topic, [0], 1, keep=2) == []


@settings(max_examples=100, deadline=None)
@given(
    st.text(st.sampled_from("abcXYZ._-"), min_size=1, max_size=60),
    st.integers(0, 2**31 - 1),
    st.one_of(st.none(), st.text(st.sampled_from("ABCdef0123456789_-"), min_size=22, max_size=22)),
)
def test_the_partition_of_a_stored_segment_is_read_without_decoding(
    topic: str, partition: int, topic_id: str | None
) -> None:
    sid = RemoteLogSegmentId(topic, partition, uuid.uuid4(), topic_id)
    seg = RemoteLogSegmentMetadata(
        sid, 0, 9, 9, 1, "w", 3, ((0, 0),), 1, SegmentState.COPY_SEGMENT_FINISHED,
        "k", "k-index", 2, 10, 0, 1,
    )  # fmt: skip
    assert segment_partition(encode_value(seg)) == TopicPartition(topic, partition)


def test_the_crc_a_snapshot_names_is_of_the_last_record(tmp_path: Path) -> None:
    h = _served_history()
    store, _topic = _written(tmp_path, h)
    header, _table = decode_snapshot(store.storage.read_all(store.listed(0)[0].key))
    _o, key, value = h.messages[-1]
    assert header.last_record_crc == record_crc(key, value)
    assert header.last_offset == len(h.messages) - 1


def test_snapshots_and_audit_trails_are_no_topic_s_and_no_orphans() -> None:
    from processor.segment.object_keys import ObjectKeyFactory
    from processor.spark.audit.storage import orphan_findings

    keys = ObjectKeyFactory("archive")
    side = [
        "archive/snapshots=metadata/meta-ID/00001/00000000000000000042-0000000000001-abc.snap",
        "archive/erasures=audit/orders/0000000000001-e1-started.json",
    ]
    stray = "archive/orders-6f1c1d5e-0000-4000-8000-000000000001/0/stray"
    assert all(keys.in_side_folder(k) and not keys.is_project_key(k) for k in side)
    assert not keys.in_side_folder(stray) and not keys.in_side_folder("other/snapshots=metadata/x")
    assert [f.object_key for f in orphan_findings(keys, [*side, stray], [])] == [stray]


def test_a_scheduled_write_that_fails_is_counted_and_tried_again(tmp_path: Path) -> None:
    from processor.follower.snapshot_writer import SnapshotSchedule

    calls: list[list[int]] = []

    def write(partitions: list[int]) -> list[object]:
        calls.append(partitions)
        if len(calls) == 1:
            raise StorageError("PUT: 503", retriable=True)
        if len(calls) == 2:
            raise RuntimeError("a bug")
        return []

    schedule = SnapshotSchedule(write, lambda: [0, 2], 3600)  # type: ignore[arg-type]
    before = metrics.SNAPSHOT_FAILURES._value.get()
    assert schedule.run_once() == [] and "503" in (schedule.last_error or "")
    assert schedule.run_once() == [] and "a bug" in (schedule.last_error or "")
    assert schedule.run_once() == [] and schedule.last_error is None
    assert metrics.SNAPSHOT_FAILURES._value.get() == before + 2
    assert calls == [[0, 2]] * 3
