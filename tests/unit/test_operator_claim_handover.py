"""A worker that loses a partition to an operator command's claim (merge, erase, delete-before: an
``ADMIN`` claim) hands it over as planned and says so at INFO, naming the command's writer and
claim; a claim of another worker is a fence and stays a warning. The command logs the same claim."""

from __future__ import annotations

import logging
import threading
import types
import uuid

import pytest

from processor.follower.cache_writes import ApplyResult
from processor.kafka.partition import TopicPartition
from processor.leader.leadership import Leadership
from processor.metadata.fold_state import Claim, PartitionHeader
from processor.metadata.model import ClaimKind
from tests.unit.test_copier_fencing import FakeClaims, FakeEngine, FakePlanner

TP0 = TopicPartition("t", 0)


class FakeCache:
    def __init__(self) -> None:
        self.headers: dict[TopicPartition, PartitionHeader] = {}

    def header(self, tp: TopicPartition) -> PartitionHeader:
        return self.headers.get(tp, PartitionHeader())


class Claims(FakeClaims):
    def __init__(self) -> None:
        super().__init__()
        self.cache = FakeCache()

    def claimed(self, tp: TopicPartition, epoch: int, kind: ClaimKind, writer: str) -> None:
        claim = Claim(epoch, uuid.uuid4(), kind, writer, None, 0)
        self.cache.headers[tp] = PartitionHeader(claimed=True, claim=claim, highest_claim_epoch=epoch)


def leading_t0() -> tuple[Leadership, FakeEngine, Claims]:
    engine, claims = FakeEngine(), Claims()
    lead = Leadership(engine, FakePlanner(), claims)  # type: ignore[arg-type]
    lead.assigned([TP0], 1)  # claim 101
    return lead, engine, claims


def lines_about(caplog: pytest.LogCaptureFixture, tp: TopicPartition) -> list[logging.LogRecord]:
    return [
        r for r in caplog.records if r.name == "processor.leader.leadership" and str(tp) in r.getMessage()
    ]


def test_an_operator_claim_is_a_planned_hand_over_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    lead, engine, claims = leading_t0()
    claims.claimed(TP0, 129, ClaimKind.ADMIN, "cli-ops-1")
    with caplog.at_level(logging.INFO, logger="processor.leader.leadership"):
        lead.on_metadata(ApplyResult(claims={TP0: 129}))
    assert engine.revoked.wait(5) and lead.led() == {}
    (line,) = lines_about(caplog, TP0)
    assert line.levelno == logging.INFO
    message = line.getMessage()
    assert "operator command" in message and "cli-ops-1" in message and "129" in message
    assert "101" in message


def test_an_operator_claim_already_released_is_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    lead, engine, _ = leading_t0()
    with caplog.at_level(logging.INFO, logger="processor.leader.leadership"):
        lead.on_metadata(ApplyResult(claims={TP0: None}))  # the ADMIN claim and its RELEASE in one batch
    assert engine.revoked.wait(5)
    (line,) = lines_about(caplog, TP0)
    assert line.levelno == logging.INFO and "operator command" in line.getMessage()


def test_another_workers_claim_is_a_fence_and_stays_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    lead, engine, claims = leading_t0()
    claims.claimed(TP0, 130, ClaimKind.LEAD, "worker-2")
    with caplog.at_level(logging.INFO, logger="processor.leader.leadership"):
        lead.on_metadata(ApplyResult(claims={TP0: 130}))
    assert engine.revoked.wait(5) and lead.led() == {}
    (line,) = lines_about(caplog, TP0)
    assert line.levelno == logging.WARNING
    assert "worker-2" in line.getMessage() and "stopping at once" in line.getMessage()


def test_without_a_claim_view_a_lost_claim_stays_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    engine = FakeEngine()
    lead = Leadership(engine, FakePlanner())  # type: ignore[arg-type]
    lead.assigned([TP0], 1)
    with caplog.at_level(logging.INFO, logger="processor.leader.leadership"):
        lead.on_metadata(ApplyResult(claims={TP0: 140}))
    assert engine.revoked.wait(5)
    assert [r.levelno for r in lines_about(caplog, TP0)] == [logging.WARNING]


def test_the_merge_command_logs_the_operator_claim_it_takes_and_releases(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    from processor.commands import merge as merge_cmd
    from processor.rewrite.merge_plan import MergeLimits
    from processor.rewrite.merge_runner import MergeReport
    from tests.unit.test_merge_dry_run_report import FakeContext, archive

    class Claiming(FakeContext):
        released = threading.Event()

        def claim(self, tp: TopicPartition) -> int:
            return 129

        def release(self, tp: TopicPartition) -> None:
            self.released.set()

    tools = types.SimpleNamespace(build=None, copier=None, delete=None)
    monkeypatch.setattr(merge_cmd, "merge_tools", lambda *a: tools)
    monkeypatch.setattr(merge_cmd, "merge_claimed", lambda tp, *a: (MergeReport(tp, runs=1), [], False))
    ctx = Claiming(archive([0, 0]))
    limits = MergeLimits(target_bytes=4000, small_bytes=1500, min_age_ms=0)
    with caplog.at_level(logging.INFO, logger="processor.commands.merge"):
        _, _, _, claim = merge_cmd._merge(ctx, None, TopicPartition("orders", 0), limits, False)  # type: ignore[arg-type]
    assert claim == 129 and ctx.released.is_set()
    said = [r for r in caplog.records if r.name == "processor.commands.merge"]
    assert [r.levelno for r in said] == [logging.INFO, logging.INFO]
    assert all("operator claim" in r.getMessage() and "129" in r.getMessage() for r in said)
