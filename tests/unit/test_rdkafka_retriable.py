"""librdkafka's warnings about what it retries by itself ("Failed to acquire idempotence PID ...
Coordinator load in progress: retrying", which a producer started right after the broker writes)
reach the user only through the project's own lines: at debug level while it retries, and as one
warning in the project's words if the condition lasts. Driven with log records the way
confluent-kafka logs (``logger.log(level, "%s [%s] %s", facility, client, message)``)."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator

import pytest

from processor.kafka.rdkafka_log import RDKAFKA_LOG, RetriableWarnings
from tests.unit.test_quiet_kafka_logs import Clock, Lines

GETPID = (
    "[thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:30585/1: "
    "Broker: Coordinator load in progress: retrying"
)
OURS = "processor.kafka.rdkafka_log"


def rdkafka(logger: logging.Logger, message: str, facility: str = "GETPID", client: str = "") -> None:
    logger.log(
        logging.WARNING, "%s [%s] %s", facility, client or f"sample#producer-{uuid.uuid4().hex}", message
    )


def test_a_retried_getpid_warning_is_not_written_as_librdkafkas_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.DEBUG):
        rdkafka(RDKAFKA_LOG, GETPID)
    assert [r for r in caplog.records if r.name == "librdkafka"] == []
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    (ours,) = [r for r in caplog.records if r.name == OURS]
    assert ours.levelno == logging.DEBUG
    assert "Coordinator load in progress" in ours.getMessage() and "[thrd:" not in ours.getMessage()


def test_other_librdkafka_warnings_are_still_written(caplog: pytest.LogCaptureFixture) -> None:
    message = f"[thrd:main]: Topic {uuid.uuid4().hex} [0]: something the user must see"
    with caplog.at_level(logging.DEBUG):
        rdkafka(RDKAFKA_LOG, message, facility="PARTCNT")
    assert [r.getMessage() for r in caplog.records if r.name == "librdkafka"] == [
        f"PARTCNT [{caplog.records[0].args[1]}] {message}"  # type: ignore[index]
    ]


@pytest.fixture
def retried() -> Iterator[tuple[logging.Logger, Lines, Lines, Clock]]:
    """A librdkafka logger with the filter (on a clock of its own), what it writes, and ours."""
    logger = logging.Logger(f"librdkafka-test-{uuid.uuid4().hex}", logging.DEBUG)
    logger.propagate = False
    clock = Clock()
    logger.addFilter(RetriableWarnings(lasting_s=30.0, quiet_s=30.0, window_s=60.0, clock=clock))
    written, ours = Lines(), Lines()
    logger.addHandler(written)
    logging.getLogger(OURS).addHandler(ours)
    yield logger, written, ours, clock
    logging.getLogger(OURS).removeHandler(ours)


def test_a_condition_that_lasts_is_said_once_a_window_in_the_projects_words(retried) -> None:
    logger, written, ours, clock = retried
    for _ in range(10):  # every 5 s for 45 s: said once, at 30 s
        rdkafka(logger, GETPID, client="demo#producer-1")
        clock.now += 5
    warnings = [r for r in ours.records if r.levelno == logging.WARNING]
    assert written.records == [] and len(warnings) == 1
    said = warnings[0].getMessage()
    assert said.startswith("Kafka client demo#producer-1 has been retrying for 30 s")
    assert said.endswith("Broker: Coordinator load in progress")
    for _ in range(9):  # on to 90 s, a window after it was said: said again
        rdkafka(logger, GETPID, client="demo#producer-1")
        clock.now += 5
    assert len([r for r in ours.records if r.levelno == logging.WARNING]) == 2


def test_a_condition_that_clears_is_never_said(retried) -> None:
    logger, written, ours, clock = retried
    for _ in range(4):  # a producer started with the broker: a few lines for a couple of seconds
        rdkafka(logger, GETPID, client="demo#producer-1")
        clock.now += 0.5
    clock.now += 120  # cleared; much later it happens again, briefly
    for _ in range(4):
        rdkafka(logger, GETPID, client="demo#producer-1")
        clock.now += 5
    assert written.records == []
    assert [r for r in ours.records if r.levelno > logging.DEBUG] == []
