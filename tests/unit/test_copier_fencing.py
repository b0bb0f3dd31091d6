"""The copier under a claim (fence check, read-your-write, in-flight registry) and leadership's
bookkeeping of rebalances, fenced revocations and claiming again."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import pytest

from processor import metrics
from processor.follower.cache_writes import ApplyResult
from processor.kafka.partition import TopicPartition
from processor.leader.leadership import Leadership
from processor.leader.segment_copier import FencedWriterError, SegmentCopier
from processor.metadata.model import MetadataRecord, RemoteLogSegmentMetadata, SegmentState
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_segment_copier import TP, ListSink, segment

S = SegmentState


def test_a_copier_whose_claim_is_not_current_publishes_and_uploads_nothing(tmp_path: Path) -> None:
    storage, sink = FilesystemChunkStorage(tmp_path), ListSink()
    copier = SegmentCopier(storage, sink, ObjectKeyFactory(""), "w1", current_claim=lambda tp: 5)
    with pytest.raises(FencedWriterError):
        copier.copy(TP, segment(), writer_epoch=4)
    assert sink.records == [] and list(storage.list("")) == []
    assert copier.copy(TP, segment(), writer_epoch=5).state is S.COPY_SEGMENT_FINISHED


def test_a_rejected_started_uploads_nothing_and_only_a_rejected_finished_deletes_its_objects(
    tmp_path: Path,
) -> None:
    """After FINISHED is published the copier deletes its objects only if the readers definitely
    rejected it; not confirmed in time, they stay (had it been accepted they are served; if not,
    the owner's cleanup removes them)."""
    storage, sink = FilesystemChunkStorage(tmp_path), ListSink()
    answers: dict[SegmentState, bool | None] = {S.COPY_SEGMENT_STARTED: False}

    def confirm(record: MetadataRecord, offset: int) -> bool | None:
        assert isinstance(record, RemoteLogSegmentMetadata)
        return answers.get(record.state, True)

    copier = SegmentCopier(storage, sink, ObjectKeyFactory(""), "w1", confirm=confirm)
    with pytest.raises(FencedWriterError):
        copier.copy(TP, segment(), 1)
    assert [r.state for r in sink.records] == [S.COPY_SEGMENT_STARTED]
    assert list(storage.list("")) == []
    answers = {S.COPY_SEGMENT_FINISHED: None}
    sink.records.clear()
    with pytest.raises(FencedWriterError):
        copier.copy(TP, segment(), 1)
    assert [r.state for r in sink.records] == [S.COPY_SEGMENT_STARTED, S.COPY_SEGMENT_FINISHED]
    assert len(list(storage.list(""))) == 2
    answers = {S.COPY_SEGMENT_FINISHED: False}
    with pytest.raises(FencedWriterError):
        copier.copy(TP, segment(), 1)
    assert len(list(storage.list(""))) == 2, "the rejected attempt's objects went, the unknown one's stay"
    assert copier.in_flight(TP) == frozenset()


def test_a_copy_is_in_flight_from_before_its_started_until_it_ends(tmp_path: Path) -> None:
    seen: list[frozenset[uuid.UUID]] = []
    copier: SegmentCopier

    def confirm(record: MetadataRecord, offset: int) -> bool:
        seen.append(copier.in_flight(TP))
        return True

    copier = SegmentCopier(
        FilesystemChunkStorage(tmp_path), ListSink(), ObjectKeyFactory(""), "w1", confirm=confirm
    )
    done = copier.copy(TP, segment(), 1)
    assert seen == [frozenset({done.segment_id.id})] * 2 and copier.in_flight(TP) == frozenset()


def test_topic_ids_go_into_the_segment_id_and_the_keys(tmp_path: Path) -> None:
    tid = str(uuid.uuid4())
    copier = SegmentCopier(
        FilesystemChunkStorage(tmp_path), ListSink(), ObjectKeyFactory("p"), "w1", topic_ids={TP.topic: tid}
    )
    done = copier.copy(TP, segment(), 0)
    assert done.segment_id.topic_id == tid and done.data_object_key.startswith(f"p/{TP.topic}-{tid}/2/")


class FakeEngine:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[TopicPartition], object]] = []
        self.revoked = threading.Event()

    def assign(self, epochs: dict[TopicPartition, int]) -> None:
        self.calls.append(("assign", sorted(epochs), dict(epochs)))

    def revoke(self, tps: list[TopicPartition], watch: bool = False) -> None:
        self.calls.append(("revoke", list(tps), watch))
        self.revoked.set()


class FakePlanner:
    """Claims succeed except for ``lost`` partitions; each claim gets the next offset."""

    def __init__(self) -> None:
        self.offset = 100
        self.lost: set[TopicPartition] = set()

    def prepare(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        out = {}
        for tp in tps:
            self.offset += 1
            if tp not in self.lost:
                out[tp] = self.offset
        return out


class FakeClaims:
    def __init__(self) -> None:
        self.current: dict[TopicPartition, int | None] = {}
        self.quiet: dict[TopicPartition, float] = {}

    def current_epoch(self, tp: TopicPartition) -> int | None:
        return self.current.get(tp)

    def quiet_s(self, tp: TopicPartition) -> float:
        return self.quiet.get(tp, 0.0)


def tps(*ps: int) -> list[TopicPartition]:
    return [TopicPartition("t", p) for p in ps]


def test_rebalances_revoke_only_what_left_and_claim_only_what_is_new() -> None:
    engine = FakeEngine()
    lead = Leadership(engine, FakePlanner())  # type: ignore[arg-type]
    lead.assigned(tps(0, 1, 2, 3), 1)
    lead.revoked(tps(0, 1, 2, 3))  # eager protocol: everything, then the new assignment
    lead.assigned(tps(0, 1, 4), 2)
    assert engine.calls == [
        ("assign", tps(0, 1, 2, 3), dict(zip(tps(0, 1, 2, 3), [101, 102, 103, 104], strict=True))),
        ("revoke", tps(2, 3), False),
        ("assign", tps(4), {TopicPartition("t", 4): 105}),
    ]
    assert lead.led() == {
        TopicPartition("t", 0): 101,
        TopicPartition("t", 1): 102,
        TopicPartition("t", 4): 105,
    }


def test_another_claim_on_a_led_partition_revokes_it_at_once_and_keeps_its_gauges() -> None:
    engine = FakeEngine()
    lead = Leadership(engine, FakePlanner())  # type: ignore[arg-type]
    lead.assigned(tps(0, 1), 3)
    before = metrics.FENCED_REVOCATIONS._value.get()
    lead.on_metadata(ApplyResult(claims={TopicPartition("t", 0): 101, TopicPartition("t", 1): 200}))
    assert engine.revoked.wait(5)
    deadline = time.monotonic() + 5
    while engine.calls[-1][0] != "revoke" and time.monotonic() < deadline:
        time.sleep(0.01)
    assert engine.calls[-1] == ("revoke", tps(1), True)
    assert set(lead.led()) == set(tps(0)) and lead.fenced_revocations == 1
    assert metrics.FENCED_REVOCATIONS._value.get() - before == 1


def test_a_partition_another_claim_holds_is_claimed_again_once_released_or_quiet() -> None:
    engine, planner, claims = FakeEngine(), FakePlanner(), FakeClaims()
    planner.lost = set(tps(1))
    lead = Leadership(engine, planner, claims, reclaim_after_s=30)  # type: ignore[arg-type]
    lead.assigned(tps(0, 1), 3)
    assert set(lead.led()) == set(tps(0)) and set(lead.fenced) == set(tps(1))
    planner.lost = set()
    claims.current[TopicPartition("t", 1)] = 77
    claims.quiet[TopicPartition("t", 1)] = 5.0
    assert lead.reclaim() == {}  # held by a live claim: left alone
    claims.quiet[TopicPartition("t", 1)] = 31.0
    assert set(lead.reclaim()) == set(tps(1))
    assert set(lead.led()) == set(tps(0, 1)) and lead.fenced == {}
    lead.fence(tps(1))
    claims.current[TopicPartition("t", 1)] = None  # released (an operator command finished)
    claims.quiet[TopicPartition("t", 1)] = 0.0
    assert set(lead.reclaim()) == set(tps(1))
    lead.fence(tps(0))
    lead.assigned(tps(1), 4)  # Faust moved partition 0 away: no longer claimed again here
    claims.current[TopicPartition("t", 0)] = None
    assert lead.reclaim() == {}
