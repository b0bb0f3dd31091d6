"""``processor restore`` and ``restore-groups`` on bad input, unreachable targets, a second run of
the same restore (fencing) and positions outside what was restored: the exit codes every command
has (0 ok, 1 problems, 2 bad input, 3 unreachable) and a message naming what was wrong."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack import servers, stack
from processor.devstack.stack import StackInfo
from processor.kafka.admin import check_broker, ensure_topic, partition_counts
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.kafka.security import KafkaConnection, KafkaSecurity
from tests.integration.restore_support import (
    RUNNER,
    archive_topics,
    archived,
    committed_transactions,
    content,
    produce_plain,
    run_cli,
)
from tests.integration.restore_support import committed_target as target_records
from tests.support.cli import CliResult
from tests.support.fault_proxy import FaultProxy

pytestmark = pytest.mark.integration

SRC = "cli-src"


@pytest.fixture(scope="module")
def archive(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    produce_plain(local_stack.bootstrap_servers, SRC, 6000, 2)
    yield archive_topics(local_stack, tmp_path_factory.mktemp("cli"), {SRC: 2}, "__meta_cli", "cli")


def _clean(result: CliResult) -> str:
    assert "Traceback" not in result.stdout + result.stderr
    return result.stderr


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--topic", "no-such-topic", "--to-topic", "x"], "no archived segments"),
        (["--topic", SRC, "--to-topic", "x", "--partition", "7"], "partition 7"),
        (["--topic", SRC, "--to-topic", "x", "--from-offset", "-1"], "never negative"),
        (["--topic", SRC, "--to-topic", "x", "--from-offset", "1", "--from-time", "2"], "not allowed with"),
        (["--topic", SRC, "--to-topic", "x", "--from-time", "yesterday"], "ISO 8601"),
        (["--topic", SRC], "needs --to-topic"),
        (
            ["--topic", SRC, "--to-topic", "x", "--max-batch-bytes", "0"],
            "--max-batch-bytes must be at least 1",
        ),
        (["--topic", SRC, "--to-topic", "x", "--restore-id", "a/b"], "invalid restore id"),
        (["--topic", "../x", "--to-topic", "x"], "invalid topic name"),
        (["--topic", SRC, "--to-topic", "x", "--target-security-protocol", "SASL_SSL"], "SASL"),
    ],
)
def test_bad_input_is_exit_2_with_the_reason(archive: dict[str, str], args: list[str], expected: str) -> None:
    result = run_cli(["restore", *args], archive)
    assert result.returncode == 2, result.stdout + result.stderr
    assert expected in _clean(result)


def test_a_target_with_too_few_partitions_needs_a_partitioner(
    local_stack: StackInfo, archive: dict[str, str]
) -> None:
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), "cli-narrow", 1, 1, {})
    result = run_cli(["restore", "--topic", SRC, "--to-topic", "cli-narrow"], archive)
    assert result.returncode == 2 and "--partitioner modulo" in _clean(result)
    folded = run_cli(
        ["restore", "--topic", SRC, "--to-topic", "cli-narrow", "--partitioner", "modulo"], archive
    )
    assert folded.returncode == 0, folded.stderr
    got, _ = target_records(local_stack.bootstrap_servers, TopicPartition("cli-narrow", 0))
    source = archived(archive, SRC)
    assert Counter(map(repr, content(got))) == Counter(map(repr, content(source[0] + source[1])))
    groups = run_cli(["restore-groups", "--topic", SRC, "--to-topic", "cli-narrow", "--group", "g"], archive)
    assert groups.returncode == 2 and "cannot be moved" in _clean(groups)


@pytest.mark.usefixtures("unreachable_fails_fast")
def test_an_unreachable_target_is_exit_3(archive: dict[str, str]) -> None:
    port = servers.free_port()
    result = run_cli(
        ["restore", "--topic", SRC, "--to-topic", "x", "--target-bootstrap", f"127.0.0.1:{port}"], archive
    )
    assert result.returncode == 3 and f"127.0.0.1:{port}" in _clean(result)


def test_a_rerun_with_another_range_is_refused(archive: dict[str, str]) -> None:
    first = run_cli(["restore", "--topic", SRC, "--to-topic", "cli-ranges", "--to-offset", "100"], archive)
    assert first.returncode == 0, first.stderr
    other = run_cli(["restore", "--topic", SRC, "--to-topic", "cli-ranges", "--to-offset", "200"], archive)
    assert other.returncode == 2
    assert "--restore-id" in _clean(other) and "range_to" in other.stderr
    again = run_cli(
        [
            "restore",
            "--topic",
            SRC,
            "--to-topic",
            "cli-ranges",
            "--to-offset",
            "200",
            "--restore-id",
            "second",
        ],
        archive,
    )
    assert again.returncode == 0, again.stderr


def test_a_second_run_of_the_same_restore_fences_the_first(
    local_stack: StackInfo, archive: dict[str, str], tmp_path: Path
) -> None:
    """Two runs at once: the second fences the first (exit 1, what it committed stays), finishes,
    and the target holds every record once."""
    args = ["restore", "--topic", SRC, "--to-topic", "cli-fenced", "--max-records-per-second", "300"]
    args += ["--transaction-records", "200"]
    before = committed_transactions(local_stack.bootstrap_servers)
    with (tmp_path / "first.log").open("w") as log:
        first = subprocess.Popen(RUNNER + args, env=archive, stdout=log, stderr=subprocess.STDOUT, text=True)
        while committed_transactions(local_stack.bootstrap_servers) <= before and first.poll() is None:
            time.sleep(0.02)  # polling a condition (the first run committed a transaction)
        second = run_cli([*args[:-4], "--json"], archive)
        first.wait(timeout=120)
    assert second.returncode == 0, second.stderr
    assert first.returncode == 1
    assert "another run of this restore took over" in (tmp_path / "first.log").read_text()
    source = archived(archive, SRC)
    for p, records in source.items():
        got, _ = target_records(local_stack.bootstrap_servers, TopicPartition("cli-fenced", p))
        assert content(got) == content(records)


def test_restore_groups_reports_positions_it_cannot_move(
    local_stack: StackInfo, archive: dict[str, str]
) -> None:
    run = run_cli(["restore", "--topic", SRC, "--to-topic", "cli-groups", "--to-offset", "1000"], archive)
    assert run.returncode == 0, run.stderr
    admin = new_admin(local_stack.bootstrap_servers, "t")
    request = ConsumerGroupTopicPartitions("cli-group", [KafkaTP(SRC, 0, 400), KafkaTP(SRC, 1, 2500)])
    admin.alter_consumer_group_offsets([request])["cli-group"].result(timeout=30)
    moved = run_cli(
        ["restore-groups", "--topic", SRC, "--to-topic", "cli-groups", "--group", "cli-group", "--json"],
        archive,
    )
    assert moved.returncode == 1, moved.stderr
    rows = [json.loads(line) for line in moved.stdout.splitlines()]
    by_partition = {r["source_partition"]: r for r in rows}
    assert by_partition[0]["committed"] and by_partition[0]["problem"] is None
    assert not by_partition[1]["committed"] and "outside the restored range" in by_partition[1]["problem"]
    missing = run_cli(
        ["restore-groups", "--topic", SRC, "--to-topic", "cli-nothing", "--group", "cli-group"], archive
    )
    assert missing.returncode == 2 and "no offset maps" in _clean(missing)


def test_s3_lost_mid_restore_is_exit_3_and_the_next_run_completes(
    local_stack: StackInfo, archive: dict[str, str], fault_proxy: FaultProxy, tmp_path: Path
) -> None:
    """The archive's S3 goes away while a restore runs: it stops with exit code 3 (Kafka or S3
    unreachable), its open transaction aborted; run again once S3 is back, it finishes exactly once."""
    args = ["restore", "--topic", SRC, "--to-topic", "cli-s3-lost", "--max-records-per-second", "1500"]
    args += ["--transaction-records", "300"]
    proxied = {**archive, "PROCESSOR_S3_ENDPOINT_URL": fault_proxy.endpoint_url}
    before = committed_transactions(local_stack.bootstrap_servers)
    with (tmp_path / "restore.log").open("w") as log:
        run = subprocess.Popen(RUNNER + args, env=proxied, stdout=log, stderr=subprocess.STDOUT, text=True)
        while committed_transactions(local_stack.bootstrap_servers) <= before and run.poll() is None:
            time.sleep(0.02)  # polling a condition (a first commit)
        fault_proxy.down()
        run.wait(timeout=300)
    output = (tmp_path / "restore.log").read_text()
    assert run.returncode == 3, output[-3000:]
    assert "Traceback" not in output
    fault_proxy.up()
    again = run_cli([*args[:-4], "--json"], proxied)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout.strip().splitlines()[-1])["partitions"][0]["resumed_from"] is not None
    for p, records in archived(archive, SRC).items():
        got, _ = target_records(local_stack.bootstrap_servers, TopicPartition("cli-s3-lost", p))
        assert content(got) == content(records)


def test_a_restore_rides_out_a_target_that_drops_every_connection(
    secured_stack: StackInfo, archive: dict[str, str], tmp_path: Path
) -> None:
    """In the middle of a restore (held with SIGSTOP), the target's broker is SIGKILLed and started
    again on its log: every connection the restore holds is dead when it goes on. It reconnects, asks again or
    aborts and redoes its open transaction with a new producer epoch, and finishes exactly once."""
    secured = secured_stack.secured
    assert secured is not None
    target_env = {
        k.replace("PROCESSOR_", "PROCESSOR_TARGET_", 1): v for k, v in secured.sasl_ssl_env().items()
    }
    target = KafkaConnection(secured_stack.bootstrap_servers, KafkaSecurity.from_env(secured.sasl_ssl_env()))
    args = ["restore", "--topic", SRC, "--to-topic", "cli-dropped", "--target-bootstrap"]
    args += [secured_stack.bootstrap_servers, "--max-records-per-second", "600", "--max-batch-bytes", "2048"]
    args += ["--transaction-records", "300", "--json"]
    source = archived(archive, SRC)
    with (tmp_path / "restore.log").open("w") as log:
        run = subprocess.Popen(
            RUNNER + args, env={**archive, **target_env}, stdout=log, stderr=subprocess.STDOUT
        )
        admin = new_admin(target, "cli-dropped-watch")

        def committed_once() -> bool:
            # asked only once the restore made the topic: a client's metadata request for a topic
            # that does not exist yet would have Apache Kafka create it, with one partition
            if "cli-dropped" not in partition_counts(admin, ["cli-dropped"]):
                return False
            return bool(target_records(target, TopicPartition("cli-dropped", 0))[0])

        while run.poll() is None and not committed_once():
            time.sleep(0.1)  # polling a condition: a first committed transaction
        assert run.poll() is None, "the restore ended before the fault"
        os.kill(run.pid, signal.SIGSTOP)
        try:
            os.kill(secured_stack.pids[stack.KAFKA], signal.SIGKILL)
            stack.start_broker_again(secured_stack.dir)
            check_broker(target, timeout_s=60)  # the broker answers again
        finally:
            os.kill(run.pid, signal.SIGCONT)
        run.wait(timeout=300)
    output = (tmp_path / "restore.log").read_text()
    assert run.returncode == 0, output[-3000:]
    summary = json.loads(output.strip().splitlines()[-1])
    assert summary["transactions"] >= 2  # it went on after the cut
    for p, records in source.items():
        got, _aborted = target_records(target, TopicPartition("cli-dropped", p))
        assert content(got) == content(records)  # every record once, in order


def test_restore_into_a_secured_cluster_with_its_groups(
    local_stack: StackInfo, secured_stack: StackInfo, archive: dict[str, str]
) -> None:
    """Another cluster behind SASL_SSL: the target's settings as PROCESSOR_TARGET_* (the password
    never on the command line, never in the output), records and groups moved there."""
    secured = secured_stack.secured
    assert secured is not None
    target_env = {
        k.replace("PROCESSOR_", "PROCESSOR_TARGET_", 1): v for k, v in secured.sasl_ssl_env().items()
    }
    env = {**archive, **target_env}
    target = KafkaConnection(secured_stack.bootstrap_servers, KafkaSecurity.from_env(secured.sasl_ssl_env()))
    done = run_cli(
        ["restore", "--topic", SRC, "--target-bootstrap", secured_stack.bootstrap_servers, "--json"], env
    )
    assert done.returncode == 0, done.stderr
    assert secured.password not in done.stdout + done.stderr
    for p, records in archived(archive, SRC).items():
        got, _ = target_records(target, TopicPartition(SRC, p))
        assert content(got) == content(records)
    admin = new_admin(local_stack.bootstrap_servers, "t")
    request = ConsumerGroupTopicPartitions("cli-secure-group", [KafkaTP(SRC, 0, 10), KafkaTP(SRC, 1, 20)])
    admin.alter_consumer_group_offsets([request])["cli-secure-group"].result(timeout=30)
    moved = run_cli(
        [
            "restore-groups",
            "--topic",
            SRC,
            "--group",
            "cli-secure-group",
            "--target-bootstrap",
            secured_stack.bootstrap_servers,
        ],
        env,
    )
    assert moved.returncode == 0, moved.stdout + moved.stderr
    target_admin = check_broker(target)  # kept: a dropped AdminClient never completes its futures
    committed = target_admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions("cli-secure-group")])[
        "cli-secure-group"
    ].result(timeout=30)
    assert {tp.partition: tp.offset for tp in committed.topic_partitions} == {
        0: 10,
        1: 20,
    }  # a target that was empty
