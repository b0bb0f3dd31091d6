"""HighWatermarks: observations on their own schedule, staleness, the behind-since streak, failures."""

from __future__ import annotations

import pytest

from processor import metrics
from processor.kafka.partition import TopicPartition
from processor.leader.high_watermarks import HighWatermarks

A = TopicPartition("orders", 0)
B = TopicPartition("orders", 1)


class Broker:
    def __init__(self) -> None:
        self.ends: dict[TopicPartition, int] = {A: 10, B: 20}
        self.down = False
        self.asked: list[list[TopicPartition]] = []

    def __call__(self, tps: list[TopicPartition], timeout_s: float) -> dict[TopicPartition, int]:
        self.asked.append(tps)
        if self.down:
            raise RuntimeError("broker unreachable")
        return {tp: self.ends[tp] for tp in tps}


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup() -> tuple[HighWatermarks, Broker, Clock]:
    broker, clock = Broker(), Clock()
    hw = HighWatermarks(broker, interval_s=5.0, clock=clock)
    hw.add(A)
    return hw, broker, clock


def test_asks_only_for_the_partitions_led(setup):
    hw, broker, _clock = setup
    hw.poll_once()
    assert broker.asked == [[A]]
    assert hw.get(A) is not None and hw.get(A).high_watermark == 10
    assert hw.get(B) is None
    hw.add(B)
    hw.poll_once()
    assert broker.asked[-1] == [A, B]
    hw.remove(A)
    hw.poll_once()
    assert broker.asked[-1] == [B]
    assert hw.get(A) is None


def test_nothing_led_asks_nothing(setup):
    hw, broker, _clock = setup
    hw.remove(A)
    hw.poll_once()
    assert broker.asked == []


def test_old_observations_are_not_used(setup):
    hw, _broker, clock = setup
    hw.poll_once()
    clock.now += hw.stale_after_s - 0.1
    assert hw.get(A) is not None
    clock.now += 0.2
    assert hw.get(A) is None


def test_failures_are_counted_and_keep_the_old_answer_until_stale(setup):
    hw, broker, clock = setup
    hw.poll_once()
    before = metrics.HIGH_WATERMARK_ERRORS._value.get()
    broker.down = True
    clock.now += 1
    hw.poll_once()
    hw.poll_once()
    assert metrics.HIGH_WATERMARK_ERRORS._value.get() == before + 2
    seen = hw.get(A)
    assert seen is not None and seen.asked_at == 100.0
    broker.down = False
    broker.ends[A] = 15
    hw.poll_once()
    seen = hw.get(A)
    assert seen is not None and seen.high_watermark == 15 and seen.asked_at == 101.0


def test_existed_since_is_the_earliest_observation_showing_the_record(setup):
    hw, broker, clock = setup
    hw.poll_once()  # high watermark 10 at t=100: records 0..9 exist
    assert hw.existed_since(A, 10) is None  # everything observed is taken
    broker.ends[A] = 12
    clock.now = 105.0
    hw.poll_once()  # 12 at t=105: records 10, 11 exist
    broker.ends[A] = 30
    clock.now = 110.0
    hw.poll_once()  # 30 at t=110
    assert hw.existed_since(A, 10) == 105.0  # record 10 existed at t=105 (not yet at t=100)
    assert hw.existed_since(A, 12) == 110.0  # record 12 was first seen at t=110
    assert hw.existed_since(A, 30) is None
    clock.now = 115.0
    hw.poll_once()  # no growth: no new entry
    broker.ends[A] = 31
    clock.now = 120.0
    hw.poll_once()
    assert hw.existed_since(A, 30) == 120.0


def test_the_bound_survives_failed_asks_and_stays_a_lower_bound_when_capped(setup):
    from processor.leader import high_watermarks

    hw, broker, clock = setup
    broker.ends[A] = 50
    hw.poll_once()  # t=100
    broker.down = True
    clock.now += hw.stale_after_s + 1
    hw.poll_once()
    assert hw.get(A) is None  # too old to give a lag in records ...
    assert hw.existed_since(A, 10) == 100.0  # ... but record 10 did exist at t=100
    broker.down = False
    for i in range(high_watermarks.HISTORY_CAP + 10):
        broker.ends[A] = 51 + i
        clock.now += 1
        hw.poll_once()
    assert hw.existed_since(A, 10) == 100.0  # the earliest entry is kept
    later = hw.existed_since(A, 60)
    assert later is not None and later >= 100.0 + hw.stale_after_s  # later: a dropped middle entry
