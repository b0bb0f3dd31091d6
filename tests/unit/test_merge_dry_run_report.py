"""What ``processor merge`` tells a user whose merge does little: on a fresh archive every segment is
younger than PROCESSOR_MERGE_MIN_AGE_MS, and the dry run says so, with the setting's value and how to
change it, instead of "0 runs would merge 0 segments"; counts are singular where they are one."""

from __future__ import annotations

import dataclasses
import json
import time

import pytest

from processor.commands import merge as merge_cmd
from processor.metadata.model import SegmentState
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.rewrite.merge_plan import LeftAlone, MergeLimits, left_alone, plan_merges
from tests.support.cli import run_cli
from tests.unit.test_claims import TP, Log, segment

ENV = {"PROCESSOR_TOPICS": TP.topic}
HOUR = 3_600_000


class FakeContext:
    """The command's view of the archive: one partition, as the fold shows it."""

    def __init__(self, log: Log) -> None:
        self.log = log

    def partitions_of(self, topic: str) -> list[object]:
        return [TP] if topic == TP.topic else []

    def state(self, tp: object) -> PartitionRemoteState:
        return self.log.state()

    def close(self) -> None:
        pass


def archive(uploaded_ms: list[int]) -> Log:
    """A partition of small adjacent segments, each uploaded at its time in ``uploaded_ms``."""
    log = Log()
    epoch = log.claim("w")
    for n, at in enumerate(uploaded_ms):
        started = segment(n * 10, n * 10 + 9, epoch, SegmentState.COPY_SEGMENT_STARTED)
        log.publish(started)
        log.publish(started.with_state(SegmentState.COPY_SEGMENT_FINISHED, at))
    return log


@pytest.fixture
def context(monkeypatch: pytest.MonkeyPatch) -> list[Log]:
    logs: list[Log] = []
    monkeypatch.setattr(merge_cmd, "open_context", lambda settings, topic: FakeContext(logs[0]))
    return logs


def test_a_dry_run_on_a_fresh_archive_says_the_segments_are_too_young_and_how_to_merge_them(
    context: list[Log],
) -> None:
    now = int(time.time() * 1000)
    context.append(archive([now - 5 * 60_000, now - 4 * 60_000, now - 60_000]))
    result = run_cli(ENV, "merge", "--topic", TP.topic, "--dry-run")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "0 runs would merge 0 segments" not in out
    assert f"{TP}: nothing would merge (3 segments served)" in out
    assert "3 segments younger than PROCESSOR_MERGE_MIN_AGE_MS (1h; the oldest is old enough in 5" in out
    assert "PROCESSOR_MERGE_MIN_AGE_MS=0 merges them now" in out

    as_json = json.loads(run_cli(ENV, "merge", "--topic", TP.topic, "--dry-run", "--json").stdout)
    assert as_json["partitions"][0]["left_alone"]["young"] == 3


def test_one_run_is_one_run(context: list[Log]) -> None:
    now = int(time.time() * 1000)
    context.append(archive([now - 3 * HOUR, now - 2 * HOUR, now - 60_000]))
    result = run_cli(ENV, "merge", "--topic", TP.topic, "--dry-run")
    assert result.returncode == 0, result.stderr
    assert f"{TP}: 1 run would merge 2 segments" in result.stdout
    assert "1 segment younger than PROCESSOR_MERGE_MIN_AGE_MS (1h; it is old enough in " in result.stdout


def test_every_segment_left_out_of_a_run_is_counted_under_one_reason() -> None:
    now = 100 * HOUR
    limits = MergeLimits(target_bytes=1000, small_bytes=500, min_age_ms=HOUR)
    epoch = Log().claim("w")
    finished = []
    for n, (size, at, fmt, txn_empty) in enumerate(
        [
            (100, 0, 2, True),  # old and small: alone (its neighbour is big)
            (600, 0, 2, True),  # big
            (100, 0, 1, True),  # format 1
            (100, 0, 2, False),  # transaction index
            (100, 0, 2, True),  # a run with the next
            (100, 0, 2, True),
            (100, now - 60_000, 2, True),  # young
        ]
    ):
        s = segment(n * 10, n * 10 + 9, epoch, SegmentState.COPY_SEGMENT_FINISHED)
        finished.append(
            dataclasses.replace(
                s,
                segment_size_in_bytes=size,
                event_timestamp_ms=at,
                segment_format_version=fmt,
                txn_index_empty=txn_empty,
            )
        )
    runs = plan_merges(finished, limits, now)
    assert [len(r.segments) for r in runs] == [2]
    assert left_alone(finished, runs, limits, now) == LeftAlone(
        other_format=1, transactional=1, big=1, young=1, single=1, oldest_young_age_ms=60_000
    )
    lines = merge_cmd.why_left_alone(left_alone(finished, runs, limits, now), limits)
    assert len(lines) == 5 and all(line.startswith("1 segment ") for line in lines)
