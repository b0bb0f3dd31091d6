"""The remote log start offset record (type 3): codec, fold and follower cache."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import FormatError
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import decode_value, encode_value, log_start_offset_key, record_key
from processor.metadata.model import (
    PartitionDeleteState,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    SegmentState,
)
from processor.metadata.remote_log_state import RemoteLogState
from tests.unit.metadata_samples import log_start_offsets
from tests.unit.test_follower_cache import seg

TP = TopicPartition("orders", 3)


def start_at(offset: int, tp: TopicPartition = TP) -> RemoteLogStartOffset:
    return RemoteLogStartOffset(tp, offset, 1_000, "w", 0)


@given(log_start_offsets)
def test_round_trip(record: RemoteLogStartOffset) -> None:
    assert decode_value(encode_value(record)) == record


@given(log_start_offsets, st.data())
def test_truncated_or_extended_is_rejected(record: RemoteLogStartOffset, data: st.DataObject) -> None:
    raw = encode_value(record)
    cut = data.draw(st.integers(0, len(raw) - 1))
    with pytest.raises(FormatError):
        decode_value(raw[:cut])
    with pytest.raises(FormatError):
        decode_value(raw + b"\x00")


def test_negative_offset_on_the_wire_is_a_format_error() -> None:
    raw = bytearray(encode_value(start_at(0)))
    # the start_offset long follows topic, topic_id (null) and partition; zigzag 0 is b"\x00":
    # overwrite it with zigzag -1 (b"\x01") to forge a negative offset
    body_start = 2 + 1 + len(TP.topic) + 1 + 1
    assert raw[body_start] == 0
    raw[body_start] = 1
    with pytest.raises(FormatError):
        decode_value(bytes(raw))


def test_key_is_per_partition_and_apart_from_partition_records() -> None:
    assert record_key(start_at(5)) == log_start_offset_key(TP) == b"orders/3/log-start-offset"
    delete = RemotePartitionDeleteMetadata(TP, PartitionDeleteState.DELETE_PARTITION_MARKED, 1, "w")
    assert record_key(delete) != record_key(start_at(5))


def test_old_records_stay_readable() -> None:
    # a type-2 record as written before type 3 existed (framing 1), byte for byte
    old = bytes.fromhex("01020c6f72646572730006000e0277")
    decoded = decode_value(old)
    assert decoded == RemotePartitionDeleteMetadata(TP, PartitionDeleteState.DELETE_PARTITION_MARKED, 7, "w")


def test_fold_keeps_the_highest_and_resumes_above_it() -> None:
    state = RemoteLogState()
    state.apply(seg(0, 99))
    state.apply(start_at(50))
    state.apply(start_at(20))  # late, lower: ignored
    part = state.partition(TP)
    assert part.log_start_offset == 50
    assert part.highest_finished_offset() == 99
    # retention deleted everything: a resuming leader continues at the start offset, not at 0
    state.apply(start_at(200))
    assert state.partition(TP).highest_finished_offset() == 199
    assert RemoteLogState().partition(TP).highest_finished_offset() is None


def _apply(cache: MetadataCache, records: list[object], first: int = 0) -> None:
    raw = [
        RawMessage(0, first + i, record_key(r), encode_value(r))  # type: ignore[arg-type]
        for i, r in enumerate(records)
    ]
    result = cache.apply_batch(raw)
    assert result.skipped == 0


def test_cache_serves_nothing_below_the_start_offset(tmp_path: Path) -> None:
    cache = MetadataCache(tmp_path / "c")
    try:
        a, b = seg(0, 99, max_ts=10), seg(100, 199, max_ts=20)
        _apply(cache, [a, b])
        rlmm = RemoteLogMetadataManager(cache)
        assert rlmm.earliest_log_offset(TP) == 0
        _apply(cache, [start_at(150)], first=2)
        assert cache.log_start_offset(TP) == 150
        assert cache.finished_segment_for_offset(TP, 120) is None
        assert cache.finished_segment_for_offset(TP, 150) == b
        assert rlmm.earliest_log_offset(TP) == 150
        # a timestamp lookup skips segments wholly below the start
        assert cache.segment_for_timestamp(TP, 0) == b
        _apply(cache, [start_at(120)], first=3)  # lower: ignored
        assert cache.log_start_offset(TP) == 150
        _apply(cache, [start_at(500)], first=4)
        assert cache.offset_range(TP) is None
        assert cache.log_start_offset(TopicPartition("orders", 4)) == 0
    finally:
        cache.close()


def test_cache_stops_serving_a_segment_from_delete_segment_started(tmp_path: Path) -> None:
    cache = MetadataCache(tmp_path / "c")
    try:
        a = seg(0, 99)
        _apply(cache, [a])
        assert cache.finished_segment_for_offset(TP, 5) == a
        _apply(cache, [a.with_state(SegmentState.DELETE_SEGMENT_STARTED, 2)], first=1)
        assert cache.finished_segment_for_offset(TP, 5) is None
        assert [s.state for s in cache.listed_segments(TP)] == [SegmentState.DELETE_SEGMENT_STARTED]
        _apply(cache, [a.with_state(SegmentState.DELETE_SEGMENT_FINISHED, 3)], first=2)
        assert list(cache.listed_segments(TP)) == []
        # then its tombstone: the compacted topic forgets the key, the cache has nothing left of it
        result = cache.apply_batch([RawMessage(0, 3, record_key(a), None)])
        assert result.skipped == 0 and cache.segment(a.segment_id.id) is None
        assert cache.segment(uuid.uuid4()) is None
    finally:
        cache.close()


def test_fold_tracks_partition_delete_states_and_a_new_cycle_after_finished() -> None:
    from processor.errors import IllegalTransitionError

    state = RemoteLogState()
    P = PartitionDeleteState
    for s in (P.DELETE_PARTITION_MARKED, P.DELETE_PARTITION_STARTED, P.DELETE_PARTITION_STARTED):
        state.apply(RemotePartitionDeleteMetadata(TP, s, 1, "w"))
    assert state.partition(TP).delete_state is P.DELETE_PARTITION_STARTED
    with pytest.raises(IllegalTransitionError):
        state.apply(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_MARKED, 2, "w"))
    state.apply(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_FINISHED, 3, "w"))
    # the topic was re-created and is deleted again
    state.apply(RemotePartitionDeleteMetadata(TP, P.DELETE_PARTITION_MARKED, 4, "w"))
    assert state.partition(TP).delete_state is P.DELETE_PARTITION_MARKED
