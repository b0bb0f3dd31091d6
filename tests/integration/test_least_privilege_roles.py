"""The roles besides the worker, each as a principal with exactly the ACLs docs/security.md lists for it,
on the secured stack (Apache Kafka's StandardAuthorizer, nobody allowed anything unless granted):
the read-only follower (``processor follower`` and its read API; the CLI's ``fetch``, ``segments``
and ``verify``) and the restore's target principal (``restore`` and ``restore-groups``). Each does its
work with exactly those, and without one of them stops with a message naming what it was refused.

One archive for the module, written by the dev user's worker (allowed everything).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupTopicPartitions
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import check_broker, ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, WorkerProcess
from tests.support.cli import run_cli
from tests.support.gateway_thread import tls_gateway_env
from tests.support.kafka_acls import Grant, user_with_exactly
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "lp-roles"
PARTITIONS = 2
RECORDS = 400
META = "__remote_log_metadata_lp_roles"
PREFIX = "lp-roles"
PASSWORD = "least-privilege-pw"


@dataclass
class Archive:
    stack: StackInfo
    env: dict[str, str]  # the dev user's: reaches the archive on the SASL_SSL listener
    by_partition: dict[int, list[SampleRecord]]

    def as_user(self, user: str, **extra: str) -> dict[str, str]:
        return {**self.env, "PROCESSOR_SASL_USERNAME": user, "PROCESSOR_SASL_PASSWORD": PASSWORD, **extra}


@pytest.fixture(scope="module")
def archive(secured_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    tmp = tmp_path_factory.mktemp("lp-roles")
    kafka = secured_stack.kafka
    ensure_topic(new_admin(kafka, "lp-roles"), TOPIC, PARTITIONS, 1, {})
    by_partition: dict[int, list[SampleRecord]] = {p: [] for p in range(PARTITIONS)}
    for r in produce_samples(kafka, TOPIC, RECORDS, PARTITIONS, big_every=0):
        by_partition[r.partition].append(r)
    env = secured_stack.worker_env(
        tmp / "data", TOPIC, PROCESSOR_METADATA_TOPIC=META, PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_SEGMENT_MS="500", PROCESSOR_SESSION_TIMEOUT_MS=TEST_SESSION_TIMEOUT_MS,
        PROCESSOR_APP_ID="lp-roles-app",
    )  # fmt: skip
    worker = WorkerProcess(env, tmp / "worker.log")
    ends = {TopicPartition(TOPIC, p): len(rs) - 1 for p, rs in by_partition.items()}
    try:
        wait_offloaded(kafka, META, ends, 120, worker.proc)
    finally:
        worker.stop()
    archive_env = {k: v for k, v in env.items() if k != "PROCESSOR_DATA_DIR"}
    yield Archive(secured_stack, {**archive_env, "PROCESSOR_S3_REGION": "us-east-1"}, by_partition)


def _without(grants: list[Grant], kind: str, name: str, op: str) -> list[Grant]:
    return [
        (k, n, pt, [o for o in ops if not (k == kind and n == name and o == op)]) for k, n, pt, ops in grants
    ]


# -- the read-only follower -----------------------------------------------------------------------

READER = "lp-reader"
READER_GRANTS: list[Grant] = [("TOPIC", META, "LITERAL", ["READ", "DESCRIBE"])]  # segments, fetch, verify
# the long-running readers check at start that the metadata topic is compacted
FOLLOWER_GRANTS: list[Grant] = [("TOPIC", META, "LITERAL", ["READ", "DESCRIBE", "DESCRIBE_CONFIGS"])]


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (urllib.error.URLError, ConnectionError):
        return 0, None


def _follower(env: dict[str, str], tmp: Path) -> tuple[subprocess.Popen[bytes], str, Path]:
    port = free_port()
    env = {**env, "PROCESSOR_WEB_HOST": "127.0.0.1", "PROCESSOR_WEB_PORT": str(port)}
    env["PROCESSOR_DATA_DIR"] = str(tmp / "data")
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "follower.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor", "follower"], env=env, stdout=out, stderr=out
        )
    return proc, f"http://127.0.0.1:{port}", log


def test_a_follower_and_the_cli_with_exactly_the_documented_acls_read_and_without_one_name_it(
    archive: Archive, tmp_path: Path
) -> None:
    env = archive.as_user(READER)
    user_with_exactly(archive.stack, READER, PASSWORD, FOLLOWER_GRANTS)
    proc, base, log = _follower(env, tmp_path / "granted")
    try:
        deadline = time.monotonic() + 90
        query = f"{base}/fetch?topic={TOPIC}&partition=1&offset=0&max_records={RECORDS}"
        status, body = _get(query)
        while status != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)  # polling: ready, then the archive's records applied
            status, body = _get(query)
        assert [r["offset"] for r in body["records"]] == list(range(len(archive.by_partition[1])))
    finally:
        proc.terminate()
        proc.wait(30)
    # without DescribeConfigs on the metadata topic it cannot check that the topic is compacted: exit 3
    user_with_exactly(
        archive.stack, READER, PASSWORD, _without(FOLLOWER_GRANTS, "TOPIC", META, "DESCRIBE_CONFIGS")
    )
    proc, _base, log = _follower(env, tmp_path / "refused")
    try:
        assert proc.wait(90) == 3, log.read_text()[-3000:]
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)
    said = log.read_text()
    assert f"metadata topic {META} (DescribeConfigs)" in said and "TOPIC_AUTHORIZATION_FAILED" in said, said

    # the CLI's read-only commands: Read and Describe are enough
    user_with_exactly(archive.stack, READER, PASSWORD, READER_GRANTS)
    fetched = run_cli(env, "fetch", "--topic", TOPIC, "--partition", "0", "--offset", "0", "--json")
    assert fetched.returncode == 0, fetched.stderr
    assert len(fetched.stdout.splitlines()) == min(100, len(archive.by_partition[0]))
    for command in ("segments", "verify"):
        done = run_cli(env, command, "--topic", TOPIC, "--json")
        assert done.returncode == 0, (command, done.stdout[-2000:], done.stderr[-2000:])
    user_with_exactly(archive.stack, READER, PASSWORD, _without(READER_GRANTS, "TOPIC", META, "READ"))
    refused = run_cli(env, "fetch", "--topic", TOPIC, "--partition", "0", "--offset", "0")
    assert refused.returncode != 0
    assert META in refused.stderr and "authoriz" in refused.stderr.lower(), refused.stderr[-2000:]


# -- the restore's target principal ---------------------------------------------------------------

RESTORER, RESTORE_ID, RESTORED, PROGRESS, MOVED = (
    "lp-restorer",
    "lp",
    "lp-restored",
    "lp-progress",
    "lp-moved",
)


def _restore_grants() -> list[Grant]:
    return [
        # Read for restore-groups: committing a group's offset (OffsetCommit) asks Read on the topic
        ("TOPIC", RESTORED, "LITERAL", ["CREATE", "DESCRIBE", "WRITE", "READ"]),
        ("TOPIC", PROGRESS, "LITERAL", ["CREATE", "DESCRIBE", "WRITE", "READ"]),
        ("TRANSACTIONAL_ID", f"processor-restore.{RESTORE_ID}", "LITERAL", ["WRITE", "DESCRIBE"]),
        ("GROUP", MOVED, "LITERAL", ["READ"]),
    ]


def _target_env(archive: Archive) -> dict[str, str]:
    secured = archive.stack.secured
    assert secured is not None
    target = {
        **secured.sasl_ssl_env(),
        "PROCESSOR_SASL_USERNAME": RESTORER,
        "PROCESSOR_SASL_PASSWORD": PASSWORD,
        "PROCESSOR_BOOTSTRAP_SERVERS": archive.stack.bootstrap_servers,
    }
    return {
        **archive.env,  # the source: the archive, read as the dev user
        **{k.replace("PROCESSOR_", "PROCESSOR_TARGET_", 1): v for k, v in target.items()},
    }


def _restore(env: dict[str, str]) -> Any:
    return run_cli(
        env, "restore", "--topic", TOPIC, "--to-topic", RESTORED, "--restore-id", RESTORE_ID,
        "--progress-topic", PROGRESS, "--json",
    )  # fmt: skip


def test_a_restore_target_principal_with_exactly_the_documented_acls_restores_and_moves_groups(
    archive: Archive,
) -> None:
    env = _target_env(archive)
    grants = _restore_grants()
    user_with_exactly(
        archive.stack, RESTORER, PASSWORD, _without(grants, "TRANSACTIONAL_ID", grants[2][1], "WRITE")
    )
    refused = _restore(env)
    assert refused.returncode != 0
    assert grants[2][1] in refused.stderr and "authoriz" in refused.stderr.lower(), refused.stderr[-2000:]

    user_with_exactly(archive.stack, RESTORER, PASSWORD, grants)
    done = _restore(env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1])["records"] == RECORDS

    source = new_admin(archive.stack.kafka, "lp-source-group")
    request = ConsumerGroupTopicPartitions(MOVED, [KafkaTP(TOPIC, 0, 10), KafkaTP(TOPIC, 1, 20)])
    source.alter_consumer_group_offsets([request])[MOVED].result(timeout=30)
    moved = run_cli(
        env, "restore-groups", "--topic", TOPIC, "--to-topic", RESTORED, "--restore-id", RESTORE_ID,
        "--group", MOVED, "--maps-from", "bucket",  # restore-groups has no --progress-topic
    )  # fmt: skip
    assert moved.returncode == 0, moved.stdout[-2000:] + moved.stderr[-2000:]
    admin = check_broker(archive.stack.kafka)
    committed = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(MOVED)])[MOVED].result(
        timeout=30
    )
    assert {(tp.topic, tp.partition, tp.offset) for tp in committed.topic_partitions} >= {
        (RESTORED, 0, 10),
        (RESTORED, 1, 20),
    }


# -- the gateway and its clients --------------------------------------------------------------------

GATEWAY = "lp-gateway"
GATEWAY_GRANTS = FOLLOWER_GRANTS  # its own follower of the metadata topic, and nothing else
GW_CLIENT, GW_GROUP = "lp-gw-client", "lp-gw-group"
# a consumer in a group, through the gateway as straight from the broker (Read implies Describe)
GW_CLIENT_GRANTS: list[Grant] = [
    ("TOPIC", TOPIC, "LITERAL", ["READ", "DESCRIBE"]),
    ("GROUP", GW_GROUP, "LITERAL", ["READ"]),
]


def _gateway(archive: Archive, tmp: Path) -> tuple[subprocess.Popen[bytes], str, str, Path]:
    """``processor gateway`` as the gateway's principal, reading every archived offset from the archive,
    TLS towards clients (their SASL login is passed through): (process, bootstrap, web, log)."""
    own, port, web = tls_gateway_env(archive.stack, tmp / "data")
    env = {**archive.as_user(GATEWAY), **own}
    tmp.mkdir(parents=True, exist_ok=True)
    log = tmp / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor", "gateway"], env=env, stdout=out, stderr=out
        )
    return proc, f"127.0.0.1:{port}", f"http://127.0.0.1:{web}", log


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        proc.wait(30)


def _consume(archive: Archive, bootstrap: str, want: int) -> tuple[dict[int, list[int]], list[str]]:
    """The client principal's consumer in its group (commits through the gateway): the offsets it read
    by partition and the errors it was given, until ``want`` records or an error or 60 s."""
    from confluent_kafka import Consumer

    from processor.kafka.clients import consumer_config
    from processor.kafka.security import KafkaConnection, KafkaSecurity

    secured = archive.stack.secured
    assert secured is not None
    security = KafkaSecurity.from_env(
        {**secured.sasl_ssl_env(), "PROCESSOR_SASL_USERNAME": GW_CLIENT, "PROCESSOR_SASL_PASSWORD": PASSWORD}
    )
    consumer = Consumer(
        consumer_config(
            KafkaConnection(bootstrap, security), GW_GROUP,
            **{"group.id": GW_GROUP, "auto.offset.reset": "earliest", "enable.auto.commit": False,
               "session.timeout.ms": 6000, "fetch.wait.max.ms": 10},
        )
    )  # fmt: skip
    consumer.subscribe([TOPIC])
    offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    errors: list[str] = []
    try:
        deadline = time.monotonic() + 60
        while sum(map(len, offsets.values())) < want and not errors and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error() is not None:
                errors.append(str(msg.error()))
                continue
            offsets[msg.partition() or 0].append(msg.offset() or 0)
            consumer.commit(message=msg, asynchronous=False)
    finally:
        consumer.close()
    return offsets, errors


def test_a_gateway_and_its_client_with_exactly_the_documented_acls_serve_and_without_one_name_it(
    archive: Archive, tmp_path: Path
) -> None:
    """The gateway's principal with Read, Describe and DescribeConfigs on the metadata topic serves the
    archive; a client principal with Read and Describe on the topic and Read on its group reads every
    record through it from the archive, in its group, committing. Without Read on the topic or on the
    group the client is told which (TOPIC_ / GROUP_AUTHORIZATION_FAILED); a gateway without
    DescribeConfigs or Read on the metadata topic stops at start naming the topic and what it lacks."""
    user_with_exactly(archive.stack, GATEWAY, PASSWORD, GATEWAY_GRANTS)
    user_with_exactly(archive.stack, GW_CLIENT, PASSWORD, GW_CLIENT_GRANTS)
    proc, bootstrap, web, log = _gateway(archive, tmp_path / "granted")
    try:
        deadline = time.monotonic() + 90
        while _get(f"{web}/readyz")[0] != 200:
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)  # polling: the gateway's follower catching up
        offsets, errors = _consume(archive, bootstrap, RECORDS)
        assert not errors, errors
        assert offsets == {p: list(range(len(rs))) for p, rs in archive.by_partition.items()}
        metrics = urllib.request.urlopen(f"{web}/metrics", timeout=10).read().decode()
        served = [
            float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("processor_gateway_fetch_records_total{")
            and f'topic="{TOPIC}"' in line
            and 'source="archive"' in line
        ]
        assert sum(served) == RECORDS, "not every record came from the archive"
        # the client without one of its grants: the broker's refusal, passed on by the gateway
        for kind, name, refusal in (("TOPIC", TOPIC, "TOPIC_AUTHORIZATION_FAILED"),
                                 ("GROUP", GW_GROUP, "GROUP_AUTHORIZATION_FAILED")):  # fmt: skip
            user_with_exactly(
                archive.stack, GW_CLIENT, PASSWORD, _without(GW_CLIENT_GRANTS, kind, name, "READ")
            )
            offsets, errors = _consume(archive, bootstrap, 1)
            assert not any(offsets.values()) and errors, (kind, offsets, errors)
            assert any(refusal in e or refusal.replace("_", " ").lower() in e.lower() for e in errors), (
                kind,
                errors,
            )
    finally:
        _stop(proc)
    # the gateway without DescribeConfigs, then without Read, on the metadata topic: it stops at start
    for missing, said in (("DESCRIBE_CONFIGS", "DescribeConfigs"), ("READ", "TOPIC_AUTHORIZATION_FAILED")):
        user_with_exactly(archive.stack, GATEWAY, PASSWORD, _without(GATEWAY_GRANTS, "TOPIC", META, missing))
        proc, _bootstrap, _web, log = _gateway(archive, tmp_path / f"without-{missing.lower()}")
        try:
            exit_code = proc.wait(90)
        finally:
            _stop(proc)
        text = log.read_text()
        assert exit_code == 3, (missing, exit_code, text[-3000:])
        assert META in text and said in text, (missing, text[-3000:])
