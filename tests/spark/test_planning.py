"""Planning without a Spark session: coverage (archive, live, lost), block choice, Spark's
minPartitions / maxRecordsPerPartition arithmetic, and bound resolution with Spark's rules."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.segment.block_header import BlockInfo
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.availability import Availability
from processor.spark.bounds import EARLIEST_BOUND, LATEST_BOUND, Bound
from processor.spark.fold_adapter import PartitionArchive
from processor.spark.planning import LiveSlice, SegmentSlice, cover, divvy, plan_archived, split_slice

pytestmark = pytest.mark.spark
TP = TopicPartition("t", 0)
TOPIC_ID = str(uuid.UUID(int=1))  # a lower-case UUID, as the metadata's bounds require
KEYS = ObjectKeyFactory("archive")


def seg(start: int, end: int, blocks: int = 1) -> tuple[RemoteLogSegmentMetadata, SegmentIndex]:
    sid = uuid.uuid4()
    keys = KEYS.segment("t", 0, start, sid, 0, TOPIC_ID)
    meta = RemoteLogSegmentMetadata(
        RemoteLogSegmentId("t", 0, sid, TOPIC_ID),
        start,
        end,
        10 * end,
        0,
        "w",
        0,
        ((0, start),),
        100 * blocks,
        SegmentState.COPY_SEGMENT_FINISHED,
        keys.data,
        keys.index,
        2,
        end - start + 1,
        0,
        10,
    )
    per = (end - start + 1) // blocks
    infos = tuple(
        BlockInfo(
            i * 100,
            100,
            start + i * per,
            start + (i + 1) * per - 1,
            10 * (start + i * per),
            10 * (start + (i + 1) * per - 1),
        )
        for i in range(blocks)
    )
    return meta, SegmentIndex("t", 0, sid, start, end, end - start + 1, 0, 100 * blocks, infos)


def archive(*segments: RemoteLogSegmentMetadata, log_start: int = 0) -> PartitionArchive:
    return PartitionArchive(TP, tuple(segments), log_start, TOPIC_ID)


def test_cover_cuts_a_range_into_archived_live_and_lost_pieces() -> None:
    a, _ = seg(0, 99)
    b, _ = seg(150, 199)
    arch = archive(a, b)
    c = cover(arch, 50, 260)
    assert [(lo, hi) for lo, hi, _s in c.archived] == [(50, 100), (150, 200)]
    assert c.lost == ((100, 150), (200, 260)) and c.live == ()
    live = cover(arch, 50, 260, live_low=120)  # tail=live: the topic still holds 120..
    assert live.lost == ((100, 120),) and live.live == ((120, 150), (200, 260))
    cut = cover(archive(a, b, log_start=60), 0, 100)  # below the remote log start: not served
    assert [(lo, hi) for lo, hi, _s in cut.archived] == [(60, 100)] and cut.lost == ((0, 60),)
    assert archive(a, b, log_start=60).earliest == 60 and archive(a, b).next_offset == 200
    assert archive().earliest is None and archive(log_start=7).next_offset == 7


@given(
    st.lists(st.tuples(st.integers(0, 400), st.integers(1, 60)), max_size=6),
    st.integers(0, 500),
    st.integers(0, 500),
    st.one_of(st.none(), st.integers(0, 500)),
)
def test_cover_accounts_for_every_offset_exactly_once(spans, lo, length, live_low) -> None:
    segments, pos = [], 0
    for gap, size in spans:  # served segments never overlap (the fold guarantees it)
        start = pos + gap
        segments.append(seg(start, start + size - 1)[0])
        pos = start + size
    hi = lo + length
    c = cover(archive(*segments), lo, hi, live_low)
    pieces = sorted([(a, b) for a, b, _s in c.archived] + list(c.live) + list(c.lost))
    covered = [o for a, b in pieces for o in range(a, b)]
    assert covered == list(range(lo, hi))
    if live_low is None:
        assert c.live == ()
    assert all(a >= (live_low or 0) for a, _b in c.live)


def test_plan_reads_only_the_blocks_of_the_range_and_cuts_by_bytes() -> None:
    a, ia = seg(0, 99, 10)
    b, ib = seg(100, 199, 10)
    indexes = {str(a.segment_id.id): ia, str(b.segment_id.id): ib}
    pieces = cover(archive(a, b), 95, 125).archived
    slices = plan_archived(TP, pieces, indexes, partition_bytes=1 << 20)
    assert [(s.first_block, len(s.blocks), s.from_offset, s.until_offset) for s in slices] == [
        (9, 1, 95, 100),
        (0, 3, 100, 125),
    ]
    split = plan_archived(TP, cover(archive(a), 0, 100).archived, indexes, partition_bytes=300)
    assert [len(s.blocks) for s in split] == [3, 3, 3, 1]
    timed = plan_archived(
        TP, cover(archive(a, b), 0, 200).archived, indexes, partition_bytes=1 << 20, min_ts=1500
    )
    assert sum(len(s.blocks) for s in timed) == 5


def test_divvy_applies_max_records_then_min_partitions_like_spark() -> None:
    a, ia = seg(0, 999, 10)
    slices = plan_archived(
        TP, cover(archive(a), 0, 1000).archived, {str(a.segment_id.id): ia}, partition_bytes=1 << 30
    )
    assert len(slices) == 1
    capped = divvy(slices, None, 300)
    assert [(s.from_offset, s.until_offset) for s in capped] == [
        (0, 250),
        (250, 500),
        (500, 750),
        (750, 1000),
    ]
    assert all(isinstance(s, SegmentSlice) and len(s.blocks) <= 3 for s in capped)  # only blocks it needs
    small = LiveSlice("t", 1, 0, 10)
    spread = divvy([*slices, small], 6, None)
    assert sum(1 for s in spread if s.tp == TP) == 5 and small in spread  # small ranges stay whole
    assert sorted(o for s in spread if s.tp == TP for o in range(s.from_offset, s.until_offset)) == list(
        range(1000)
    )
    assert divvy([LiveSlice("t", 0, 5, 5)], 3, None) == []  # empty ranges are dropped
    assert split_slice(LiveSlice("t", 0, 0, 3), 10) == [LiveSlice("t", 0, i, i + 1) for i in range(3)]


def availability(live: dict[TopicPartition, tuple[int, int]] | None = None) -> Availability:
    a, _ = seg(100, 199)
    tp1 = TopicPartition("t", 1)
    return Availability(
        (TP, tp1),
        {TP: archive(a), tp1: PartitionArchive(tp1, (), 0, None)},
        live,
        {"t": TOPIC_ID},
    )


def test_bounds_resolve_with_sparks_rules() -> None:
    avail = availability()
    tp1 = TopicPartition("t", 1)
    never = lambda tp, ts: None  # noqa: E731

    def resolve(bound: Bound, is_start: bool = True, **kw):
        kw.setdefault("no_match_latest", False)
        kw.setdefault("offset_for_timestamp", never)
        return avail.resolve(bound, is_start=is_start, **kw)

    assert resolve(EARLIEST_BOUND) == {TP: 100}
    assert resolve(LATEST_BOUND, is_start=False) == {TP: 200}
    json_bound = Bound("offsets", offsets=((TP, -2), (tp1, 5)))
    assert resolve(json_bound, partitions=[TP, tp1]) == {TP: 100, tp1: 5}
    with pytest.raises(ConfigError, match="you must specify all TopicPartitions"):
        resolve(Bound("offsets", offsets=((TP, 3),)))
    ts = Bound("timestamp", timestamp=10)
    with pytest.raises(ConfigError, match="No offset matched from request of topic-partition t-0"):
        resolve(ts)
    assert resolve(ts, no_match_latest=True) == {TP: 200}
    assert resolve(ts, is_start=False) == {TP: 200}  # an ending timestamp nothing reaches: latest
    assert resolve(ts, offset_for_timestamp=lambda tp, t: 150) == {TP: 150}
    live = availability({TP: (120, 260), tp1: (0, 40)})  # tail=live: the topic counts too
    assert live.earliest(TP) == 100 and live.latest(TP) == 260 and live.latest(tp1) == 40
    assert live.known(tp1) and not avail.known(tp1)
