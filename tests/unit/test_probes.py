"""Readiness probes report to HEALTH and clear when the dependency returns."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from processor import probes
from processor.errors import ServiceUnavailableError, StorageError
from processor.follower.materializer import FollowerState
from processor.health import HEALTH
from processor.kafka.clients import list_topics_or_unavailable, new_admin


@pytest.fixture(autouse=True)
def clean_health() -> Iterator[None]:
    HEALTH.reset()
    yield
    HEALTH.reset()


def test_storage_probe_reports_and_clears() -> None:
    down = [True]

    def head_bucket() -> None:
        if down[0]:
            raise StorageError("S3 endpoint http://x is unreachable: connection refused")

    watch = probes.ReadinessWatch([probes.storage_probe(head_bucket)], interval_s=1)
    watch.run_once()
    assert [p.component for p in HEALTH.problems()] == ["storage"]
    assert "unreachable" in HEALTH.problems()[0].reason
    assert not HEALTH.problems()[0].fatal
    assert REGISTRY.get_sample_value("processor_storage_reachable") == 0.0
    down[0] = False
    watch.run_once()
    assert HEALTH.ready
    assert REGISTRY.get_sample_value("processor_storage_reachable") == 1.0


def test_kafka_probe() -> None:
    def list_topics(timeout: float) -> object:
        raise ServiceUnavailableError("broker down")

    probe = probes.kafka_probe(list_topics, "k:9092")
    reason = probe.check()
    assert reason is not None and "k:9092" in reason
    assert probes.kafka_probe(lambda t: None, "k:9092").check() is None


def test_a_kafka_that_does_not_answer_is_unavailable_to_the_probe() -> None:
    # a real client against a port nothing listens on: librdkafka's timeout becomes the probe's reason
    admin = new_admin("127.0.0.1:1", "probe-test")
    with pytest.raises(ServiceUnavailableError):
        list_topics_or_unavailable(admin, 0.5)
    reason = probes.kafka_probe(lambda t: list_topics_or_unavailable(admin, t), "127.0.0.1:1").check()
    assert reason is not None and reason.startswith("Kafka at 127.0.0.1:1 unreachable: ")


def test_a_probe_that_breaks_is_a_problem_not_a_dead_watch() -> None:
    def broken() -> str | None:
        raise RuntimeError("bug")

    watch = probes.ReadinessWatch([probes.Probe("kafka", broken)], interval_s=1)
    watch.run_once()
    assert "probe error: RuntimeError: bug" in HEALTH.problems()[0].reason


def test_follower_probe_states() -> None:
    state = FollowerState()
    probe = probes.follower_probe(lambda: state)
    assert "starting" in (probe.check() or "")
    state.lag_records = 50
    assert "catching up" in (probe.check() or "")
    state.lag_records = 0
    state.caught_up_once = True
    assert probe.check() is None
    state.lag_records = 10
    state.progress_at = time.monotonic()
    assert probe.check() is None  # a little behind while progressing is fine
    state.progress_at = time.monotonic() - probes.FOLLOWER_STALL_S - 1
    assert "behind: 10 records" in (probe.check() or "")
    state.stopped = "RuntimeError: x"
    assert "stopped" in (probe.check() or "")


def test_storage_probe_does_not_clear_what_the_data_path_reported() -> None:
    """A PutObject denied while HeadBucket succeeds: the probe passes, the pod stays unready."""
    watch = probes.ReadinessWatch([probes.storage_probe(lambda: None)], interval_s=1)
    HEALTH.report("storage", "copy of orders-0 blocked: S3 PutObject failed: AccessDenied")
    for _ in range(3):
        watch.run_once()
    assert not HEALTH.ready
    assert [(p.component, p.source) for p in HEALTH.problems()] == [("storage", "data_path")]
    assert REGISTRY.get_sample_value("processor_storage_reachable") == 1.0
    HEALTH.clear("storage")  # the data path succeeded
    watch.run_once()
    assert HEALTH.ready
