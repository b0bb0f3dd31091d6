"""The copy scheduler's failure paths (each of these was a defect of the old engine's copy loop):
every pool future is read, unexpected errors stop the data path, only retriable errors are retried
(bounded backoff with jitter), non-retriable ones block visibly without a retry loop, and a revoke
interrupts both a sleeping retry and an upload in progress."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from processor import metrics
from processor.errors import StorageError
from processor.health import HEALTH
from processor.kafka.partition import TopicPartition
from processor.leader.copy_scheduler import Backoff, CopyScheduler
from processor.leader.offload_buffer import OffloadBuffer
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import SegmentState
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler
from processor.storage.chunk_storage import Buffer, ChunkInfo
from processor.storage.filesystem import FilesystemChunkStorage
from tests.batch_samples import make_batch
from tests.unit.test_segment_copier import ListSink

TP = TopicPartition("orders", 0)


class ScriptedStorage(FilesystemChunkStorage):
    """Filesystem storage whose creates of data objects fail with the scripted errors first, or block
    on a gate (index objects and manifests pass)."""

    def __init__(self, root: Path, errors: Sequence[BaseException] = ()) -> None:
        super().__init__(root)
        self.errors = list(errors)
        self.attempts = 0
        self.gate: threading.Event | None = None
        self.entered = threading.Event()

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        if not key.endswith(("-index", "-manifest")):
            self.attempts += 1
            self.entered.set()
            if self.gate is not None:
                self.gate.wait(10)
            if self.errors:
                raise self.errors.pop(0)
        return super().create(key, parts)


def sealed(start: int = 0) -> SealedSegment:
    asm = SegmentAssembler(0, start, 4096)
    raw = make_batch(start, [(1, None, b"v", []), (2, None, b"w", [])])
    asm.append(parse_batch_header(raw), raw)
    return asm.seal()


@pytest.fixture(autouse=True)
def _clean_health() -> Iterator[None]:
    HEALTH.reset()
    yield
    HEALTH.reset()


def scheduler(
    storage: ScriptedStorage, sink: ListSink, backoff: Backoff
) -> tuple[CopyScheduler, OffloadBuffer]:
    buffer = OffloadBuffer(1 << 20)
    copier = SegmentCopier(storage, sink, ObjectKeyFactory("t"), "w1")
    failures: list[BaseException] = []
    sched = CopyScheduler(copier, buffer, 2, backoff, on_failure=failures.append)
    sched.failures = failures  # type: ignore[attr-defined]
    return sched, buffer


def submit(sched: CopyScheduler, buffer: OffloadBuffer, segment: SealedSegment) -> None:
    buffer.add(segment.held_bytes)
    sched.submit(TP, segment)


def wait_for(cond: object, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def finished(sink: ListSink) -> list[object]:
    return [r for r in sink.records if getattr(r, "state", None) is SegmentState.COPY_SEGMENT_FINISHED]


def test_an_unexpected_error_stops_the_data_path(tmp_path: Path) -> None:
    storage, sink = ScriptedStorage(tmp_path, [KeyError("a bug")]), ListSink()
    sched, buffer = scheduler(storage, sink, Backoff(0.01, 0.05))
    sched.open(TP, 1, None, [])
    submit(sched, buffer, sealed())
    assert wait_for(lambda: sched.failure is not None)
    assert isinstance(sched.failure, KeyError)
    assert sched.failures == [sched.failure]  # type: ignore[attr-defined]
    problem = HEALTH.fatal()
    assert problem is not None and problem.component == "data_path"
    time.sleep(0.1)  # a window for a retry that must not come (the backoff is 0.01-0.05 s)
    assert storage.attempts == 1  # not retried
    sched.stop()


def test_retriable_errors_are_retried_with_bounded_backoff(tmp_path: Path) -> None:
    errors = [StorageError("503", retriable=True) for _ in range(3)]
    storage, sink = ScriptedStorage(tmp_path, errors), ListSink()
    sched, buffer = scheduler(storage, sink, Backoff(0.01, 0.04))
    sched.open(TP, 1, None, [])
    submit(sched, buffer, sealed())
    assert wait_for(lambda: len(finished(sink)) == 1)
    assert storage.attempts == 4 and sched.failure is None
    assert wait_for(lambda: buffer.used == 0)  # released after the copy's last step (its manifest)
    sched.stop()


def test_backoff_doubles_from_500_ms_to_30_s_with_20_percent_jitter() -> None:
    b = Backoff()
    for attempt, base in [(1, 0.5), (2, 1.0), (3, 2.0), (7, 30.0), (30, 30.0)]:
        delays = [b.delay(attempt) for _ in range(200)]
        assert min(delays) >= base * 0.8 and max(delays) <= base * 1.2
        assert max(delays) - min(delays) > base * 0.1  # jittered


def test_a_non_retriable_error_blocks_visibly_without_a_retry_loop(tmp_path: Path) -> None:
    errors = [StorageError("AccessDenied", retriable=False) for _ in range(2)]
    storage, sink = ScriptedStorage(tmp_path, errors), ListSink()
    sched, buffer = scheduler(storage, sink, Backoff(0.001, 0.4))
    blocked_before = metrics.COPY_BLOCKED.labels(TP.topic)._value.get()
    sched.open(TP, 1, None, [])
    segment = sealed()
    submit(sched, buffer, segment)
    assert wait_for(lambda: storage.attempts >= 1)
    time.sleep(0.2)  # a window shorter than the maximum backoff (0.4 s): no retry may come in it
    assert storage.attempts == 1, "retried before the maximum backoff"
    assert [p.component for p in HEALTH.problems()] == ["storage"] and HEALTH.fatal() is None
    assert metrics.COPY_BLOCKED.labels(TP.topic)._value.get() - blocked_before >= 1
    lane = sched.lane(TP)
    assert lane is not None and list(lane.pending) == [segment]  # stays pending
    # re-checked at the maximum backoff: once fixed, it goes through and the problem clears
    assert wait_for(lambda: len(finished(sink)) == 1)
    assert storage.attempts == 3
    assert wait_for(lambda: HEALTH.ready)  # cleared once the copy's last step (its manifest) is done
    sched.stop()


def test_a_revoke_wakes_a_sleeping_retry(tmp_path: Path) -> None:
    storage, sink = ScriptedStorage(tmp_path, [StorageError("503", retriable=True)]), ListSink()
    sched, buffer = scheduler(storage, sink, Backoff(20.0, 30.0))
    sched.open(TP, 1, None, [])
    submit(sched, buffer, sealed())
    assert wait_for(lambda: storage.attempts == 1)
    time.sleep(0.05)  # the failed attempt goes to sleep for its 20 s backoff (no event tells when)
    lane = sched.revoke(TP)
    assert lane is not None
    t0 = time.monotonic()
    assert lane.idle.wait(2.0), "the retry kept sleeping after the revoke"
    assert time.monotonic() - t0 < 2.0
    assert finished(sink) == [] and buffer.used == 0
    sched.stop()


def test_a_revoke_interrupts_an_upload_in_progress(tmp_path: Path) -> None:
    storage, sink = ScriptedStorage(tmp_path), ListSink()
    storage.gate = threading.Event()
    sched, buffer = scheduler(storage, sink, Backoff(0.01, 0.05))
    sched.open(TP, 1, None, [])
    submit(sched, buffer, sealed())
    assert storage.entered.wait(5)  # the data object upload is under way
    lane = sched.revoke(TP)
    storage.gate.set()
    assert lane is not None and lane.idle.wait(5)
    assert finished(sink) == []
    assert not [info for info in storage.list("") if info.key.endswith("-index")], "went on uploading"
    assert buffer.used == 0
    sched.stop()


def test_segments_of_a_partition_are_copied_in_order(tmp_path: Path) -> None:
    storage, sink = ScriptedStorage(tmp_path), ListSink()
    sched, buffer = scheduler(storage, sink, Backoff(0.01, 0.05))
    sched.open(TP, 1, None, [])
    for start in (0, 2, 4, 6):
        submit(sched, buffer, sealed(start))
    assert wait_for(lambda: len(finished(sink)) == 4)
    assert [r.start_offset for r in finished(sink)] == [0, 2, 4, 6]  # type: ignore[attr-defined]
    sched.stop()
