"""The engine's wiring without servers: a batch source that replays fetch responses (built from real
record batches) through the real response handling, the real assembler, copy scheduler and copier
(filesystem storage, in-memory sink). Checks data-loss detection and read_committed archiving."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processor import metrics
from processor.health import HEALTH
from processor.kafka.partition import TopicPartition
from processor.leader.batch_source import BatchSource, OnFetched, OnLost
from processor.leader.offload_engine import EngineOptions, OffloadEngine
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import SegmentState
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.segment.blocks import iter_blocks
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage
from tests.batch_samples import control_batch, make_batch
from tests.unit.test_segment_copier import ListSink

TP = TopicPartition("replayed", 0)
Response = tuple[bytes, list[tuple[int, int]], int]  # record set, aborted transactions, log start


class ReplaySource(BatchSource):
    """Feeds scripted fetch responses (v11 layout) through BatchSource's response handling."""

    def __init__(self, on_fetched: OnFetched, on_lost: OnLost, script: list[Response]) -> None:
        super().__init__("unused:9092", "replay", on_fetched, on_lost)
        self.script = script

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def add(self, tp: TopicPartition, position: int | None) -> None:
        self.positions[tp] = 0 if position is None else position

    async def run(self) -> None:
        while TP not in self.positions:
            await asyncio.sleep(0.01)
        for records, aborted, log_start in self.script:
            hw = 1000
            position = self.positions[TP]
            assert position is not None
            self._on_data(TP, position, hw, [hw, log_start, aborted, -1, records], 11)
        await asyncio.Event().wait()


def batch(offset: int, n: int = 1) -> bytes:
    return make_batch(offset, [(offset + i, None, b"v%d" % (offset + i), []) for i in range(n)])


@pytest.fixture(autouse=True)
def _clean_health() -> Iterator[None]:
    HEALTH.reset()
    yield
    HEALTH.reset()


def run_engine(tmp_path: Path, script: list[Response]) -> tuple[ListSink, FilesystemChunkStorage]:
    storage, sink = FilesystemChunkStorage(tmp_path), ListSink()
    copier = SegmentCopier(storage, sink, ObjectKeyFactory("e"), "w1")

    def source(on_fetched: OnFetched, on_lost: OnLost) -> Any:
        return ReplaySource(on_fetched, on_lost, script)

    engine = OffloadEngine(
        EngineOptions(segment_bytes=1 << 20, segment_ms=60_000, block_bytes=4096, buffer_bytes=1 << 22),
        source,
        copier,
        lambda tps: {tp: PartitionRemoteState() for tp in tps},
    )
    engine.start()
    try:
        engine.assign({TP: 1})
        time.sleep(0.3)
        engine.roll_all()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and (
            engine.status()[TP].pending_segments or engine.status()[TP].copying
        ):
            time.sleep(0.02)
        assert engine.failure is None
    finally:
        engine.stop()
    return sink, storage


def finished(sink: ListSink) -> list[Any]:
    return [r for r in sink.records if getattr(r, "state", None) is SegmentState.COPY_SEGMENT_FINISHED]


def test_offsets_deleted_before_offload_are_reported_and_offloading_continues(tmp_path: Path) -> None:
    lost_before = metrics.OFFSETS_LOST.labels(TP.topic, "0")._value.get()
    script: list[Response] = [
        (batch(0, 5) + batch(5, 5), [], 0),
        (b"", [], 20),  # the log now starts at 20: 10..19 were deleted before they were archived
        (batch(20, 5), [], 20),
    ]
    sink, storage = run_engine(tmp_path, script)
    assert metrics.OFFSETS_LOST.labels(TP.topic, "0")._value.get() - lost_before == 10
    segments = finished(sink)
    assert [(s.start_offset, s.end_offset) for s in segments] == [(0, 9), (20, 24)]
    offsets = [
        r.offset
        for s in segments
        for block in iter_blocks(storage.read(s.data_object_key, 0, s.segment_size_in_bytes))
        for r in block
    ]
    assert offsets == [*range(10), *range(20, 25)]


@pytest.mark.parametrize(
    ("first_batch", "lost"),
    [((12, 8), 2), ((10, 10), 0)],
    ids=["the batch holding the new log start begins inside the gap", "it begins where the archive ends"],
)
def test_a_log_start_inside_a_batch_archives_that_batch_whole_and_reports_only_what_is_gone(
    tmp_path: Path, first_batch: tuple[int, int], lost: int
) -> None:
    """DeleteRecords (or retention) can move the log start into a batch: the broker still answers the
    whole batch, whose records below the log start are there to archive. The segment starts at the
    batch's base offset and only the offsets before it are reported lost. (Reported lost up to the log
    start, the segment started there too, and every copy of it was refused: the record count of the
    whole batch did not fit its offsets, and the partition stopped being archived.)"""
    lost_before = metrics.OFFSETS_LOST.labels(TP.topic, "0")._value.get()
    base, count = first_batch
    script: list[Response] = [
        (batch(0, 5) + batch(5, 5), [], 0),
        (b"", [], 15),  # the log now starts at 15
        (batch(base, count), [], 15),
    ]
    sink, storage = run_engine(tmp_path, script)
    assert metrics.OFFSETS_LOST.labels(TP.topic, "0")._value.get() - lost_before == lost
    segments = finished(sink)
    # a gap seals the open segment; with nothing lost the archive goes on in the same segment
    ranges = [(0, 9), (base, base + count - 1)] if lost else [(0, base + count - 1)]
    assert [(s.start_offset, s.end_offset) for s in segments] == ranges
    offsets = [
        r.offset
        for s in segments
        for block in iter_blocks(storage.read(s.data_object_key, 0, s.segment_size_in_bytes))
        for r in block
    ]
    assert offsets == [*range(10), *range(base, base + count)]


def test_aborted_batches_and_markers_are_dropped_but_covered(tmp_path: Path) -> None:
    tx = make_batch(3, [(1, None, b"aborted", [])], producer_id=9, transactional=True)
    script: list[Response] = [
        (batch(0, 3) + tx + control_batch(4, 9, commit=False) + batch(5, 2), [(9, 3)], 0)
    ]
    sink, storage = run_engine(tmp_path, script)
    (segment,) = finished(sink)
    assert (segment.start_offset, segment.end_offset) == (0, 6)
    data = storage.read(segment.data_object_key, 0, segment.segment_size_in_bytes)
    assert [r.offset for block in iter_blocks(data) for r in block] == [0, 1, 2, 5, 6]
