"""A new assignment is claimed after Faust's rebalance signal returns (a worker taking over many
partitions must not miss its session timeout while it claims them), in the order assignments came;
a claim that Kafka or the bucket refuses now is left to the reclaim timer, and one that fails
unexpectedly stops the worker."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

from processor.errors import ServiceUnavailableError
from processor.kafka.partition import TopicPartition
from processor.leader.leadership import Leadership
from processor.wiring.rebalance import connect_rebalance
from tests.unit.test_copier_fencing import FakeClaims, FakeEngine, FakePlanner, tps


class Signal:
    def __init__(self) -> None:
        self.receivers: list[Callable[..., Any]] = []

    def connect(self, receiver: Callable[..., Any]) -> None:
        self.receivers.append(receiver)

    def send(self, partitions: list[TopicPartition]) -> None:
        for receiver in self.receivers:
            asyncio.run(receiver(None, partitions))


class App:
    """What connect_rebalance uses of the Faust app: its two signals and the group generation."""

    def __init__(self) -> None:
        self.on_partitions_assigned, self.on_partitions_revoked = Signal(), Signal()
        self.consumer_generation_id = 7


class BlockingPlanner(FakePlanner):
    def __init__(self) -> None:
        super().__init__()
        self.go = threading.Event()
        self.failure: BaseException | None = None

    def prepare(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        assert self.go.wait(10)
        if self.failure is not None:
            raise self.failure
        return super().prepare(tps)


def wait_for(condition: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_the_rebalance_signal_returns_before_the_new_partitions_are_claimed() -> None:
    planner, engine = BlockingPlanner(), FakeEngine()
    lead = Leadership(engine, planner)  # type: ignore[arg-type]
    app = App()
    connect_rebalance(app, lead, frozenset({"t"}))  # type: ignore[arg-type]
    app.on_partitions_assigned.send(tps(0, 1))  # returns with the claims still blocked
    app.on_partitions_assigned.send(tps(1, 2))  # the next assignment waits for the first's claims
    assert lead.led() == {}
    planner.go.set()
    assert wait_for(lambda: sorted(lead.led()) == tps(1, 2))
    calls = [(c[0], c[1]) for c in engine.calls]
    assert calls == [("assign", tps(0, 1)), ("revoke", tps(0)), ("assign", tps(2))]
    assert lead.failure is None


def test_an_unexpected_claim_failure_is_kept_for_the_worker_to_stop_on() -> None:
    planner = BlockingPlanner()
    planner.failure = RuntimeError("a bug")
    lead = Leadership(FakeEngine(), planner)  # type: ignore[arg-type]
    app = App()
    connect_rebalance(app, lead, frozenset({"t"}))  # type: ignore[arg-type]
    app.on_partitions_assigned.send(tps(0))
    planner.go.set()
    assert wait_for(lambda: lead.failure is not None)
    assert isinstance(lead.failure, RuntimeError)


def test_claims_kafka_refuses_now_are_left_to_the_reclaim_timer() -> None:
    planner, claims = BlockingPlanner(), FakeClaims()
    planner.go.set()
    planner.failure = ServiceUnavailableError("metadata topic unreachable")
    lead = Leadership(FakeEngine(), planner, claims)  # type: ignore[arg-type]
    lead.assigned(tps(0, 1), 3)
    assert lead.led() == {} and lead.failure is None
    planner.failure = None
    assert sorted(lead.reclaim()) == tps(0, 1)  # nobody else's claim: claimed at the next tick
    assert sorted(lead.led()) == tps(0, 1)
