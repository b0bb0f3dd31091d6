"""Topic ids are never guessed: processor.kafka.admin.topic_ids tells "no such topic" from "no answer"
(retried, then TopicIdUnknownError), and the resume planner never drops a known id nor leads a
partition whose topic id could not be read."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Uuid

from processor.errors import TopicIdUnknownError
from processor.health import HEALTH
from processor.kafka.admin import topic_ids
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.leader.resume import HEALTH_COMPONENT, ResumePlanner
from processor.metadata.model import MetadataRecord, PartitionClaim
from processor.metadata.remote_log_state import PartitionRemoteState, RemoteLogState

ID_A = "0b6c1a52-3c39-4f5e-9d2c-6a4e3f0f6d11"
ID_B = "5f0d3c7e-8a41-4a8e-b1c5-2f7d9e6b4a22"


def described(topic_id: str | None) -> Any:
    class Described:
        pass

    d = Described()
    if topic_id is not None:
        value = uuid.UUID(topic_id).int
        msb, lsb = value >> 64, value & (2**64 - 1)
        # confluent-kafka's Uuid holds signed 64-bit halves
        d.topic_id = Uuid(msb - 2**64 if msb >= 2**63 else msb, lsb - 2**64 if lsb >= 2**63 else lsb)  # type: ignore[attr-defined]
    else:
        d.topic_id = Uuid(0, 0)  # type: ignore[attr-defined]
    return d


class FakeAdmin:
    """describe_topics answered from a script: per call, per topic, an id, None (all-zero) or an error
    code; a topic missing from a call's script gets no answer in time (the future never completes)."""

    def __init__(self, *calls: dict[str, str | int | None]) -> None:
        self.calls = list(calls)
        self.asked: list[list[str]] = []

    def describe_topics(self, topics: Any, request_timeout: float) -> dict[str, Future[Any]]:
        names = list(topics.topic_names)
        self.asked.append(names)
        script = self.calls.pop(0)
        out: dict[str, Future[Any]] = {}
        for name in names:
            f: Future[Any] = Future()
            if name in script:
                answer = script[name]
                if isinstance(answer, int):
                    f.set_exception(KafkaException(KafkaError(answer)))
                else:
                    f.set_result(described(answer))
            out[name] = f
        return out


def test_the_ids_of_existing_topics_and_nothing_for_topics_that_do_not_exist() -> None:
    admin = FakeAdmin(
        {
            "a": ID_A,
            "gone": KafkaError.UNKNOWN_TOPIC_OR_PART,
            "gone-id": KafkaError.UNKNOWN_TOPIC_ID,
            "z": None,
        }
    )
    absent: set[str] = set()
    assert topic_ids(admin, ["a", "gone", "gone-id", "z"], absent=absent) == {"a": ID_A}  # type: ignore[arg-type]
    assert absent == {"gone", "gone-id"}, "an all-zero id is a topic without one, not a missing topic"
    assert len(admin.asked) == 1, "a definite answer is never asked again"


def test_other_failures_are_asked_again_and_only_for_the_topics_they_hit() -> None:
    admin = FakeAdmin(
        {"a": ID_A, "b": KafkaError._TIMED_OUT},
        {"b": KafkaError._TRANSPORT},
        {"b": ID_B},
    )
    assert topic_ids(admin, ["a", "b"], timeout_s=0.05, attempts=3, backoff_s=0.01) == {"a": ID_A, "b": ID_B}  # type: ignore[arg-type]
    assert admin.asked == [["a", "b"], ["b"], ["b"]]


@pytest.mark.parametrize(
    "failure",
    [KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, "no answer"],
)
def test_a_failure_that_lasts_raises_naming_the_topics_with_what_was_read(failure: int | str) -> None:
    # "no answer": b is left out of the script, so its future never completes in time
    b: dict[str, str | int | None] = {} if isinstance(failure, str) else {"b": failure}
    admin = FakeAdmin({"a": ID_A, **b}, b, b)
    with pytest.raises(TopicIdUnknownError, match="topic id of b could not be read") as raised:
        topic_ids(admin, ["a", "b"], timeout_s=0.05, attempts=3, backoff_s=0.01)  # type: ignore[arg-type]
    assert raised.value.topics == ["b"] and raised.value.found == {"a": ID_A}
    assert raised.value.retriable
    assert len(admin.asked) == 3, "bounded: as many attempts as asked for, no more"


def test_a_broker_that_never_answers_raises_after_a_bounded_backed_off_retry() -> None:
    """A real client against a closed port: DescribeTopics times out; never "no such topic"."""
    admin = new_admin("127.0.0.1:1", "test-topic-ids")
    started = time.monotonic()
    with pytest.raises(
        TopicIdUnknownError, match=r"topic id of orders, payments could not be read.*2 attempts"
    ):
        topic_ids(admin, ["payments", "orders"], timeout_s=0.5, attempts=2, backoff_s=0.2)
    assert time.monotonic() - started < 10


# -- the resume planner ------------------------------------------------------------------------------


class FoldSink:
    """Claims applied to an in-memory fold (the claim's epoch is its offset there)."""

    def __init__(self, state: RemoteLogState) -> None:
        self.state = state
        self.claims: list[PartitionClaim] = []

    def publish(self, record: MetadataRecord) -> int:
        assert isinstance(record, PartitionClaim)
        self.claims.append(record)
        return self.state.apply(record)


class Source:
    def __init__(self) -> None:
        self.ids = {"orders": ID_A}
        self.failing: set[str] = set()

    def __call__(self, topics: list[str]) -> dict[str, str]:
        found = {t: self.ids[t] for t in topics if t in self.ids and t not in self.failing}
        if self.failing & set(topics):
            raise TopicIdUnknownError(sorted(self.failing & set(topics)), "timed out", found)
        return found


def planner() -> tuple[ResumePlanner, Source, FoldSink]:
    state = RemoteLogState()
    sink = FoldSink(state)
    source = Source()

    def load(tps: list[TopicPartition]) -> dict[TopicPartition, PartitionRemoteState]:
        return {tp: state.partition(tp) for tp in tps}

    return ResumePlanner("w1", 4, load, source, sink), source, sink


@pytest.fixture(autouse=True)
def clean_health() -> Any:
    HEALTH.reset()
    yield
    HEALTH.reset()


def test_a_failed_lookup_keeps_the_known_id_and_leaves_the_partitions_unclaimed_and_unled() -> None:
    plan, source, sink = planner()
    o0, o1, p0 = TopicPartition("orders", 0), TopicPartition("orders", 1), TopicPartition("payments", 0)
    source.ids["payments"] = ID_B
    assert set(plan.prepare([o0])) == {o0}
    shared = plan.topic_ids  # the copier's map
    assert shared == {"orders": ID_A}
    assert plan([o0])[o0].current_topic_id == ID_A

    source.failing = {"orders"}
    held = plan.prepare([o1, p0])
    assert set(held) == {p0}, "only the topic whose id was read is led"
    assert [c.topic_partition for c in sink.claims] == [o0, p0], "no claim for a partition that is not led"
    assert shared is plan.topic_ids and shared == {"orders": ID_A, "payments": ID_B}, "the known id stays"
    [problem] = HEALTH.problems()
    assert problem.component == HEALTH_COMPONENT and "orders" in problem.reason and not problem.fatal

    with pytest.raises(TopicIdUnknownError, match="not leading"):
        plan([o1])  # a fresh load hands out nothing with a guessed id
    assert shared == {"orders": ID_A, "payments": ID_B}

    source.failing = set()
    assert set(plan.prepare([o1])) == {o1}, "claimed once the lookup works"
    assert plan([o1])[o1].current_topic_id == ID_A
    assert HEALTH.ready, "the problem clears when a lookup succeeds"


def test_a_topic_the_broker_no_longer_has_is_dropped_from_the_map_as_before() -> None:
    plan, source, _sink = planner()
    o0 = TopicPartition("orders", 0)
    plan.prepare([o0])
    del source.ids["orders"]
    plan.refresh_topic_ids(["orders"])
    assert plan.topic_ids == {}
    assert HEALTH.ready
