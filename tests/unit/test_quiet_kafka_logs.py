"""librdkafka's repeated log lines are folded into one line and a count (rdkafka_log.RepeatFolder):
with no broker a client retries every few milliseconds and wrote ~190 identical FAIL lines before
the one error that matters. Driven with log records directly, the way confluent-kafka logs
(``logger.log(level, "%s [%s] %s", facility, client, message)``): no broker needed."""

from __future__ import annotations

import collections
import logging
import uuid

import pytest

from processor.kafka import rdkafka_log as rdkafka_log_module
from processor.kafka.rdkafka_log import RepeatFolder

REFUSED = (
    "[thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to ipv4#127.0.0.1:1 failed: "
    "Connection refused (after {ms}ms in state CONNECT)"
)


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def lines(self) -> list[str]:
        return [r.getMessage() for r in self.records]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def folded() -> tuple[logging.Logger, RepeatFolder, Lines, Clock]:
    logger = logging.Logger(f"librdkafka-test-{uuid.uuid4().hex}", logging.DEBUG)
    logger.propagate = False
    clock = Clock()
    folder = RepeatFolder(logger, window_s=60.0, clock=clock)
    logger.addFilter(folder)
    lines = Lines()
    logger.addHandler(lines)
    return logger, folder, lines, clock


def rdkafka(
    logger: logging.Logger, message: str, facility: str = "FAIL", client: str = "rdkafka#producer-1"
) -> None:
    logger.log(logging.ERROR, "%s [%s] %s", facility, client, message)


def test_200_identical_fail_lines_are_one_line_and_a_count(folded):
    logger, folder, lines, clock = folded
    for _ in range(200):
        rdkafka(logger, REFUSED.format(ms=0))
        clock.now += 0.05
    assert lines.lines == [f"FAIL [rdkafka#producer-1] {REFUSED.format(ms=0)}"]
    folder.flush()
    assert len(lines.lines) == 2
    assert lines.lines[1].startswith(f"FAIL [rdkafka#producer-1] {REFUSED.format(ms=0)} ")
    assert "(repeated 199 more times in 10 s)" in lines.lines[1]
    assert lines.records[1].levelno == logging.ERROR
    assert lines.records[1].__dict__["rdkafka_repeated"] == 199
    folder.flush()  # the count is written once
    assert len(lines.lines) == 2


def test_distinct_messages_are_each_written(folded):
    logger, folder, lines, _ = folded
    messages = [REFUSED.format(ms=0).replace("127.0.0.1:1", f"10.0.0.{i}:9092") for i in range(3)]
    for _ in range(50):
        for message in messages:
            rdkafka(logger, message)
    rdkafka(logger, "Metadata request failed", facility="METADATA")
    assert lines.lines == [f"FAIL [rdkafka#producer-1] {m}" for m in messages] + [
        "METADATA [rdkafka#producer-1] Metadata request failed"
    ]
    folder.flush()
    summaries = lines.lines[4:]
    assert len(summaries) == 3  # the METADATA line never repeated: no summary of it
    for message, summary in zip(messages, summaries, strict=True):
        assert summary.startswith(f"FAIL [rdkafka#producer-1] {message} (repeated 49 more times")


def test_the_timing_and_librdkafkas_own_count_do_not_make_a_line_distinct(folded):
    logger, folder, lines, _ = folded
    rdkafka(logger, REFUSED.format(ms=0))
    rdkafka(logger, REFUSED.format(ms=3))
    rdkafka(logger, REFUSED.format(ms=1).replace("CONNECT)", "CONNECT, 4 identical error(s) suppressed)"))
    assert len(lines.lines) == 1
    folder.flush()
    assert "(repeated 2 more times" in lines.lines[1]


def test_a_lasting_problem_shows_once_per_window_with_its_count(folded):
    logger, folder, lines, clock = folded
    for _ in range(130):  # 130 s, a line a second
        rdkafka(logger, REFUSED.format(ms=0))
        clock.now += 1.0
    assert len(lines.lines) == 3  # at 0 s, 60 s and 120 s
    assert lines.lines[0] == f"FAIL [rdkafka#producer-1] {REFUSED.format(ms=0)}"
    assert lines.lines[1].endswith("(repeated 59 more times in the last 60 s)")
    assert lines.lines[2].endswith("(repeated 59 more times in the last 60 s)")
    folder.flush()
    assert lines.lines[3].endswith("(repeated 9 more times in 10 s)")


def test_a_closed_window_is_summarised_when_another_line_comes(folded):
    logger, _, lines, clock = folded
    for _ in range(5):
        rdkafka(logger, REFUSED.format(ms=0))
    clock.now += 61
    rdkafka(logger, "Broker is back", facility="STATE")
    assert lines.lines[1].endswith("(repeated 4 more times in 61 s)")
    assert lines.lines[2] == "STATE [rdkafka#producer-1] Broker is back"


def test_other_records_pass_unfolded(folded):
    logger, folder, lines, _ = folded
    for _ in range(3):
        logger.warning("not a librdkafka line: %s", "x")
        logger.warning("no arguments at all")
    folder.flush()
    assert len(lines.lines) == 6


def test_the_reasons_kept_for_the_error_message_are_all_there():
    """check_broker's reasons logger sees every FAIL line (its deque keeps the reasons) and writes
    none of them: the check's error names the reason once; other warnings still reach ``librdkafka``."""
    seen: collections.deque[tuple[str, str]] = collections.deque(maxlen=20)
    reasons = rdkafka_log_module.reasons_logger(seen)
    lines = Lines()
    rdkafka_log = logging.getLogger("librdkafka")
    rdkafka_log.addHandler(lines)
    message = f"{REFUSED.format(ms=0)} [{uuid.uuid4().hex}]"  # no earlier test folded this one
    try:
        for _ in range(200):
            rdkafka(reasons, message, client="processor-check#producer-1")
        assert list(seen) == [("FAIL", message)] * 20
        rdkafka_log_module.RDKAFKA_FOLD.flush()
        assert lines.lines == []
        rdkafka(reasons, "Broker is slow", facility="REQTMOUT", client="processor-check#producer-1")
        assert lines.lines == ["REQTMOUT [processor-check#producer-1] Broker is slow"]
    finally:
        rdkafka_log.removeHandler(lines)


def test_refused_connections_are_told_apart_by_broker():
    seen = [
        ("FAIL", REFUSED.format(ms=0)),
        ("FAIL", "sasl_ssl://b:9093/bootstrap: Connect to ipv4#10.0.0.2:9093 failed: Connection refused"),
        ("_TRANSPORT", "3/3 brokers are down"),
    ]
    assert rdkafka_log_module.refusing_brokers(seen) == {
        "127.0.0.1:1/bootstrap",
        "sasl_ssl://b:9093/bootstrap",
    }
