"""A worker assigned many partitions at once: the claims are published and the bucket's manifest
folders listed several at a time (the assignment callback must end within the group's session
timeout), and every partition is still decided by its own claim and its own listing."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from typing import Any

from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest

from processor.kafka.partition import TopicPartition
from processor.leader.batch_source import BatchSource
from processor.leader.resume import ResumePlanner
from processor.metadata.model import ClaimKind, MetadataRecord, PartitionClaim
from processor.metadata.remote_log_state import PartitionRemoteState, RemoteLogState

ID = "0b6c1a52-3c39-4f5e-9d2c-6a4e3f0f6d11"


class SlowSink:
    """Claims applied to an in-memory fold, each after a round trip of ``delay_s`` (thread-safe)."""

    def __init__(self, state: RemoteLogState, delay_s: float) -> None:
        self.state = state
        self.delay_s = delay_s
        self.lock = threading.Lock()
        self.claims: list[PartitionClaim] = []
        self.at_once = 0
        self._now = 0

    def publish(self, record: MetadataRecord) -> int:
        assert isinstance(record, PartitionClaim)
        with self.lock:
            self._now += 1
            self.at_once = max(self.at_once, self._now)
        time.sleep(self.delay_s)
        with self.lock:
            self._now -= 1
            self.claims.append(record)
            return self.state.apply(record)


def test_many_partitions_are_claimed_at_once_each_under_its_own_claim() -> None:
    state = RemoteLogState()
    sink = SlowSink(state, 0.01)
    listed: list[TopicPartition] = []
    archived = {TopicPartition("orders", p) for p in (7, 300)}  # the bucket knows these two

    def manifests(tp: TopicPartition, topic_id: str | None) -> bool:
        assert topic_id == ID
        time.sleep(0.01)
        listed.append(tp)
        return tp in archived

    def load(tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        return {tp: state.partition(tp) for tp in tps}

    planner = ResumePlanner(
        "w1", 4, load, lambda topics: dict.fromkeys(topics, ID), sink, archived_manifests=manifests
    )
    tps = [TopicPartition("orders", p) for p in range(500)]
    started = time.monotonic()
    held = planner.prepare(tps)
    took = time.monotonic() - started

    assert len(sink.claims) == 500 and {c.topic_partition for c in sink.claims} == set(tps)
    assert sink.at_once > 1, "published one at a time"
    assert took < 0.5 * 500 * 0.02, f"{took:.1f} s: not faster than one at a time"
    assert set(held) == set(tps) - archived, "a partition the bucket knows is refused"
    assert planner.behind == archived
    assert sorted(listed) == sorted(tps), "every partition that knows nothing is listed, once"
    for tp, epoch in held.items():
        assert state.partition(tp).current_epoch == epoch, f"{tp} is led under its own claim"
    assert planner(sorted(held)).keys() == held.keys()


def test_a_claim_another_worker_made_after_ours_wins_also_among_many() -> None:
    state = RemoteLogState()
    sink = SlowSink(state, 0.0)
    tps = [TopicPartition("orders", p) for p in range(40)]
    late = TopicPartition("orders", 17)

    def load(wanted: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        # another worker claimed one of them after this worker's claims, before the read-back
        state.apply(PartitionClaim(late, uuid.uuid4(), ClaimKind.LEAD, "w2", 0, ID))
        return {tp: state.partition(tp) for tp in wanted}

    planner = ResumePlanner("w1", 4, load, lambda topics: dict.fromkeys(topics, ID), sink)
    held = planner.prepare(tps)
    assert set(held) == set(tps) - {late}


# -- the batch source: partitions without a position, idle partitions ---------------------------------


class _Response:
    def __init__(self, topics: list[Any], version: int) -> None:
        self.topics = topics
        self.API_VERSION = version
        self.throttle_time_ms = 0


class FakeClient:
    """Answers ListOffsets with each partition's log start (partition * 10) and fetches with
    nothing; records the requests."""

    def __init__(self) -> None:
        self.requests: list[Any] = []

    async def send(self, node: int, request: Any) -> Any:
        self.requests.append(request)
        if isinstance(request, OffsetRequest):
            return _Response([(t, [(p, 0, -1, p * 10) for p, _ in parts]) for t, parts in request._topics], 1)
        assert isinstance(request, FetchRequest)
        return _Response(
            [(t, [(p, 0, off, off, [], b"") for p, off, _ in parts]) for t, parts in request._topics], 4
        )

    def force_metadata_update(self) -> None:
        pass


def test_partitions_without_a_position_are_placed_by_one_list_offsets_then_idle_ones_rest() -> None:
    source = BatchSource("unused:9092", "test", lambda fetched: fetched.fetch_offset, lambda *a: None)
    client = FakeClient()
    source._client = client
    tps = [TopicPartition("orders", p) for p in range(300)]
    for tp in tps:
        source.positions[tp] = None

    asyncio.run(source._fetch(0, [(tp, None) for tp in tps]))

    lists = [r for r in client.requests if isinstance(r, OffsetRequest)]
    assert len(lists) == 1, f"{len(lists)} ListOffsets requests for 300 partitions"
    assert all(source.positions[tp] == tp.partition * 10 for tp in tps)
    fetches = [r for r in client.requests if isinstance(r, FetchRequest)]
    assert len(fetches) == 1 and sum(len(parts) for _t, parts in fetches[0]._topics) == 300
    assert fetches[0]._max_wait_ms == source.options.max_wait_ms
    # every one of them answered nothing: none is asked again before the idle backoff ends
    assert source._take_ready() is None
    assert all(source._not_before[tp] > time.monotonic() for tp in tps)
