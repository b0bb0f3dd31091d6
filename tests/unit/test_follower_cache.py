"""The RocksDB metadata cache: state machine on apply, atomic offsets, range-scan lookups."""

from __future__ import annotations

import dataclasses
import threading
import uuid
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import encode_value, record_key
from processor.metadata.model import (
    MetadataRecord,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from processor.segment.object_keys import ObjectKeyFactory

TP = TopicPartition("orders", 3)
S = SegmentState


def seg(
    start: int,
    end: int,
    state: SegmentState = S.COPY_SEGMENT_FINISHED,
    tp: TopicPartition = TP,
    max_ts: int = 0,
):
    sid = RemoteLogSegmentId(tp.topic, tp.partition, uuid.uuid4())
    keys = ObjectKeyFactory("p").segment(tp.topic, tp.partition, start, sid.id, 0)
    return RemoteLogSegmentMetadata(
        sid,
        start,
        end,
        max_ts,
        1,
        "w",
        0,
        ((0, start),),
        100,
        state,
        keys.data,
        keys.index,
        1,
        end - start + 1,
        0,
        10,
    )


def msgs(
    records: list[MetadataRecord | bytes | None], partition: int = 0, first: int = 0
) -> list[RawMessage]:
    out = []
    for i, r in enumerate(records):
        if isinstance(r, bytes) or r is None:
            out.append(RawMessage(partition, first + i, b"junk", r))
        else:
            out.append(RawMessage(partition, first + i, record_key(r), encode_value(r)))
    return out


def test_lookups_are_by_offset_and_finished_only(tmp_path: Path) -> None:
    cache = MetadataCache(tmp_path / "c")
    a, b, c = (
        seg(0, 99, max_ts=50),
        seg(100, 199, max_ts=40),
        seg(200, 299, S.COPY_SEGMENT_STARTED, max_ts=90),
    )
    other = seg(0, 1000, tp=TopicPartition("orders", 4))
    result = cache.apply_batch(msgs([a, b, c, other]))
    assert (result.applied, result.skipped) == (4, 0)
    rlmm = RemoteLogMetadataManager(cache)
    assert rlmm.remote_log_segment_metadata(TP, 0) == a
    assert rlmm.remote_log_segment_metadata(TP, 150) == b
    assert rlmm.remote_log_segment_metadata(TP, 250) is None  # only started
    assert rlmm.remote_log_segment_metadata(TP, 5000) is None
    assert rlmm.earliest_log_offset(TP) == 0 and rlmm.highest_log_offset(TP) == 199
    assert [s.segment_id for s in rlmm.list_remote_log_segments(TP, 120)] == [b.segment_id, c.segment_id]
    assert rlmm.remote_log_segment_for_timestamp(TP, 45) == a
    assert rlmm.remote_log_segment_for_timestamp(TP, 51) is None  # the started one does not count
    assert rlmm.segment_metadata(c.segment_id.id) == c
    assert cache.topic_partitions() == [TP, TopicPartition("orders", 4)]
    cache.close()


def test_garbage_and_illegal_records_are_skipped_counted_and_offsets_advance(tmp_path: Path) -> None:
    cache = MetadataCache(tmp_path / "c")
    a = seg(0, 9)
    back = dataclasses.replace(a, state=S.COPY_SEGMENT_STARTED)
    b = seg(10, 19)
    result = cache.apply_batch(msgs([a, b"\x01\x00garbage", back, b"", b], first=40))
    assert (result.applied, result.skipped) == (2, 3)
    assert [p[:2] for p in result.skipped_positions] == [(0, 41), (0, 42), (0, 43)]
    assert cache.finished_segment_for_offset(TP, 5) == a and cache.finished_segment_for_offset(TP, 15) == b
    assert cache.consumed_offsets() == {0: 45}
    cache.close()
    reopened = MetadataCache(tmp_path / "c")
    assert reopened.consumed_offsets() == {0: 45}
    assert reopened.finished_segment_for_offset(TP, 15) == b
    reopened.close()


def test_state_changes_move_segments_in_and_out_of_the_offset_index(tmp_path: Path) -> None:
    cache = MetadataCache(tmp_path / "c")
    started = seg(0, 9, S.COPY_SEGMENT_STARTED)
    steps = [
        started,
        dataclasses.replace(started, state=S.COPY_SEGMENT_FINISHED),
        dataclasses.replace(started, state=S.DELETE_SEGMENT_STARTED),
        dataclasses.replace(started, state=S.DELETE_SEGMENT_FINISHED),
    ]
    cache.apply_batch(msgs(steps[:2]))  # same segment twice in one batch
    assert cache.finished_segment_for_offset(TP, 3) is not None
    cache.apply_batch(msgs(steps[2:3], first=2))
    assert cache.finished_segment_for_offset(TP, 3) is None
    assert [s.state for s in cache.listed_segments(TP)] == [S.DELETE_SEGMENT_STARTED]
    cache.apply_batch(msgs(steps[3:], first=3))
    assert list(cache.listed_segments(TP)) == []
    gone = cache.segment(started.segment_id.id)  # kept (for the state machine) until its tombstone
    assert gone is not None and gone.state is S.DELETE_SEGMENT_FINISHED
    cache.close()


# each example opens a RocksDB: its time depends on the disk, not on the code under test
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 50), min_size=1, max_size=40), st.data())
def test_offset_lookup_matches_brute_force(tmp_path: Path, sizes: list[int], data: st.DataObject) -> None:
    cache = MetadataCache(tmp_path / f"c{uuid.uuid4()}")
    segments, start = [], 0
    for n in sizes:
        segments.append(seg(start, start + n - 1))
        start += n
    cache.apply_batch(msgs(list(segments)))
    for _ in range(10):
        o = data.draw(st.integers(-3, start + 3))
        want = next((s for s in segments if s.start_offset <= o <= s.end_offset), None)
        assert cache.finished_segment_for_offset(TP, o) == want
        assert [s.start_offset for s in cache.finished_segments(TP, max(o, 0))] == [
            s.start_offset for s in segments if s.end_offset >= max(o, 0)
        ]
    cache.close()


def test_a_cache_of_another_metadata_topic_is_rebuilt(tmp_path: Path) -> None:
    """A worker restarted on another metadata topic (a misspelt PROCESSOR_METADATA_TOPIC) or on the
    same name after the topic was deleted and re-created (a new topic id) must not act on what its
    old cache holds: the cache is emptied and read again from the topic."""
    cache = MetadataCache(tmp_path / "c")
    assert cache.ensure_origin("__remote_log_metadata/id-1") is False  # a new cache: just recorded
    cache.apply_batch([RawMessage(0, 0, b"k", None)])
    assert cache.consumed_offsets() == {0: 1}
    assert cache.ensure_origin("__remote_log_metadata/id-1") is False
    cache.close()
    cache = MetadataCache(tmp_path / "c")
    assert cache.ensure_origin("__remote_log_metadata/id-2") is True  # re-created: rebuilt
    assert cache.consumed_offsets() == {}
    cache.apply_batch([RawMessage(0, 0, b"k", None)])
    assert cache.ensure_origin("__remote_log_metdata/id-9") is True  # misspelt: rebuilt
    assert cache.consumed_offsets() == {}
    cache.close()


def test_a_partition_state_is_one_batch_never_a_mix_of_two(tmp_path: Path) -> None:
    """The leader reads its partition's state while the follower thread writes batches: each read is
    the fold after some batch. Read key by key, a segment could be served by the newer batch and
    missing from the older one's list (the set of served ids naming a segment the state lacks)."""
    cache = MetadataCache(tmp_path / "c")
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for start in range(0, 3000, 10):
                started = seg(start, start + 9, S.COPY_SEGMENT_STARTED)
                finished = dataclasses.replace(started, state=S.COPY_SEGMENT_FINISHED)
                cache.apply_batch(msgs([started], first=2 * start))
                cache.apply_batch(msgs([finished], first=2 * start + 1))
        except BaseException as exc:  # handed to the test thread below
            failures.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        reads = 0
        while writer.is_alive() or reads == 0:
            reads += 1
            state = cache.remote_state(TP)
            assert state.served <= set(state.segments), state.served - set(state.segments)
            done = state.finished()
            assert all(s.state is S.COPY_SEGMENT_FINISHED for s in done)
            ends = [s.end_offset for s in done]
            assert ends == list(range(9, 10 * len(ends), 10))  # contiguous from 0: no batch half-seen
    finally:
        writer.join()
    assert not failures, failures
