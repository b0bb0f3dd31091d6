"""The follower cache fences stale epochs and retired topic ids and serves the newest lineage,
with the same results as the leader's fold."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor import metrics
from processor.follower.metadata_cache import MetadataCache
from processor.metadata.fencing import RejectedRecordError
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.metadata.remote_log_state import RemoteLogState
from tests.unit.test_fencing import NEW_ID, OLD_ID, TP, seg, to
from tests.unit.test_follower_cache import msgs

S = SegmentState


def skipped(reason: str) -> float:
    return float(metrics.METADATA_REJECTED.labels(reason)._value.get())


@pytest.fixture
def cache(tmp_path: Path) -> MetadataCache:
    return MetadataCache(tmp_path / "cache")


def test_records_from_an_older_epoch_are_skipped_and_counted(cache: MetadataCache) -> None:
    zombie = seg(0, 9, S.COPY_SEGMENT_STARTED, epoch=3)
    before = skipped("stale_epoch")
    result = cache.apply_batch(
        msgs(
            [
                zombie,
                seg(0, 19, S.COPY_SEGMENT_STARTED, epoch=4),
                to(zombie, S.COPY_SEGMENT_FINISHED),  # the zombie's late FINISHED
                seg(20, 29, S.COPY_SEGMENT_FINISHED, epoch=3),  # its new copy
                to(zombie, S.DELETE_SEGMENT_STARTED),  # its delete
            ]
        )
    )
    assert (result.applied, result.skipped) == (2, 3)
    assert skipped("stale_epoch") - before == 3
    assert cache.finished_segment_for_offset(TP, 5) is None
    assert cache.header(TP).lineage.max_epoch == 4
    assert cache.segment(zombie.segment_id.id) == zombie  # still dangling: the leader cleans it


@pytest.mark.parametrize("one_batch", [True, False])
def test_a_newer_epoch_supersedes_overlapping_older_segments(cache: MetadataCache, one_batch: bool) -> None:
    a, b = seg(0, 9, epoch=1), seg(10, 29, epoch=1)
    c, d = seg(10, 19, epoch=2), seg(20, 39, epoch=2)
    if one_batch:
        cache.apply_batch(msgs([a, b, c, d]))
    else:
        for i, r in enumerate([a, b, c, d]):
            cache.apply_batch(msgs([r], first=i))
    assert [s.segment_id for s in cache.finished_segments(TP)] == [a.segment_id, c.segment_id, d.segment_id]
    assert cache.finished_segment_for_offset(TP, 25) == d
    assert cache.offset_range(TP) == (0, 39)
    # still listed (and deletable), only not served
    assert b.segment_id in [s.segment_id for s in cache.listed_segments(TP)]
    assert [s.segment_id for s in cache.remote_state(TP).superseded()] == [b.segment_id]


def test_a_recreated_topic_serves_only_its_new_history(cache: MetadataCache) -> None:
    legacy, old = seg(0, 99), seg(100, 399, topic_id=OLD_ID)
    cache.apply_batch(msgs([legacy, old]))
    assert cache.offset_range(TP) == (0, 399)
    new_started = seg(0, 299, S.COPY_SEGMENT_STARTED, epoch=1, topic_id=NEW_ID)
    cache.apply_batch(msgs([new_started], first=2))
    assert cache.finished_segment_for_offset(TP, 50) is None and cache.offset_range(TP) is None
    before = skipped("old_topic_id")
    result = cache.apply_batch(
        msgs([to(new_started, S.COPY_SEGMENT_FINISHED), seg(400, 499, epoch=1, topic_id=OLD_ID)], first=3)
    )
    assert result.skipped == 1 and skipped("old_topic_id") - before == 1
    assert cache.finished_segment_for_offset(TP, 50) == to(new_started, S.COPY_SEGMENT_FINISHED)
    assert cache.offset_range(TP) == (0, 299)
    # the old history stays listed until retention or delete-topic removes it; its deletes pass
    cache.apply_batch(
        msgs([dataclasses.replace(old, state=S.DELETE_SEGMENT_STARTED, writer_epoch=1)], first=5)
    )


def test_the_lineage_survives_a_restart(tmp_path: Path) -> None:
    cache = MetadataCache(tmp_path / "c")
    cache.apply_batch(msgs([seg(0, 9, epoch=5, topic_id=OLD_ID)]))
    cache.close()
    again = MetadataCache(tmp_path / "c")
    assert again.header(TP).lineage.max_epoch == 5 and again.header(TP).lineage.topic_id == OLD_ID
    assert again.apply_batch(msgs([seg(10, 19, epoch=4)], first=1)).skipped == 1
    again.close()


records = st.lists(
    st.tuples(
        st.integers(0, 100),  # start
        st.integers(0, 20),  # length
        st.integers(0, 4),  # epoch
        st.sampled_from([None, OLD_ID, NEW_ID]),
        st.sampled_from([S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED]),
    ),
    max_size=20,
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records, st.integers(1, 5))
def test_cache_and_fold_agree(tmp_path: Path, raw: list[tuple], batch_size: int) -> None:  # type: ignore[type-arg]
    cache = MetadataCache(tmp_path / f"c{uuid.uuid4()}")
    fold = RemoteLogState()
    stream: list[RemoteLogSegmentMetadata] = []
    for start, length, epoch, tid, state in raw:
        started = seg(start, start + length, S.COPY_SEGMENT_STARTED, epoch, tid)
        stream.append(started)
        if state is S.COPY_SEGMENT_FINISHED:
            stream.append(to(started, state))
    for i in range(0, len(stream), batch_size):
        cache.apply_batch(msgs(list(stream[i : i + batch_size]), first=i))
    for r in stream:
        with contextlib.suppress(RejectedRecordError):
            fold.apply(r)
    served_by_cache = [s.segment_id for s in cache.finished_segments(TP)]
    assert served_by_cache == [s.segment_id for s in fold.partition(TP).finished()]
    assert cache.header(TP) == fold.partition(TP).header
    cache.close()
