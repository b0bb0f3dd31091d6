"""The processor against a secured Kafka (the secured dev stack): SASL_SSL-only and mutual TLS.

A worker offloads (Faust's group and the batch source on aiokafka, the metadata producer on
librdkafka, all through TLS and SASL), a read-only follower serves /fetch, and the CLI's
``segments``, ``fetch`` and ``verify`` read it back; the same on the mutual-TLS listener. A wrong
password, an untrusted certificate or a missing client certificate exits 3 naming the broker and
the mechanism, never the secret.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from processor import cli
from processor.config import load_settings
from processor.devstack.sample_data import produce_samples
from processor.devstack.secure import SASL_VARIABLES
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.kafka.security import KafkaConnection, KafkaSecurity
from processor.wiring.gateway_server import GatewayServer
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, WorkerProcess
from tests.support.gateway_thread import gateway_running
from tests.support.kafka_acls import user_with_exactly
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "secured-orders"
PARTITIONS = 2
RECORDS = 600
META = "__remote_log_metadata_secured"
# The two listeners reach one cluster: the mutual-TLS worker archives a topic of its own
MTLS_TOPIC, MTLS_META = f"{TOPIC}-mtls", f"{META}_mtls"
TOKEN = "secured-read-token"


def _offload(info: StackInfo, kafka: KafkaConnection, env: dict[str, str], tmp: Path) -> WorkerProcess:
    """Produce to the worker's topic on ``kafka`` and run it until every record is in a finished
    segment."""
    topic, meta = env["PROCESSOR_TOPICS"], env["PROCESSOR_METADATA_TOPIC"]
    ensure_topic(new_admin(kafka, "secured-test"), topic, PARTITIONS, 1, {})
    produced = produce_samples(kafka, topic, RECORDS, PARTITIONS, big_every=0)
    counts = Counter(r.partition for r in produced)
    worker = WorkerProcess(env, tmp / "worker.log")
    ends = {TopicPartition(topic, p): counts[p] - 1 for p in range(PARTITIONS)}
    try:
        wait_offloaded(kafka, meta, ends, 120, worker.proc)
    except BaseException:
        worker.stop()
        raise AssertionError(f"worker did not offload:\n{worker.log()[-3000:]}") from None
    return worker


def _worker_env(info: StackInfo, tmp: Path, **extra: str) -> dict[str, str]:
    mtls = extra.get("PROCESSOR_SECURITY_PROTOCOL") == "SSL"
    env = info.worker_env(
        tmp / "data",
        MTLS_TOPIC if mtls else TOPIC,
        PROCESSOR_METADATA_TOPIC=MTLS_META if mtls else META,
        PROCESSOR_METADATA_PARTITIONS="2",
        PROCESSOR_SEGMENT_BYTES="32KiB",
        PROCESSOR_BLOCK_BYTES="8KiB",
        PROCESSOR_SEGMENT_MS="1s",
        PROCESSOR_BUFFER_BYTES="8MiB",
        PROCESSOR_SESSION_TIMEOUT_MS=TEST_SESSION_TIMEOUT_MS,
        PROCESSOR_S3_PREFIX=f"secured-{extra.get('PROCESSOR_SECURITY_PROTOCOL', 'sasl')}".lower(),
        PROCESSOR_LOG_LEVEL="info",
        **extra,
    )
    if extra.get("PROCESSOR_SECURITY_PROTOCOL") == "SSL":  # the mutual-TLS listener: no SASL
        env = {k: v for k, v in env.items() if k not in SASL_VARIABLES}
    return env


@pytest.fixture(scope="module")
def sasl_ssl_archive(
    secured_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """TOPIC offloaded from the SASL_SSL-only listener; yields the environment that reaches it."""
    tmp = tmp_path_factory.mktemp("sasl-ssl")
    env = _worker_env(secured_stack, tmp)
    worker = _offload(secured_stack, secured_stack.kafka, env, tmp)
    try:
        yield env
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


@pytest.fixture(scope="module")
def mtls_archive(
    secured_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    """MTLS_TOPIC offloaded from the mutual-TLS listener (the same cluster, another principal)."""
    secured = secured_stack.secured
    assert secured is not None
    tmp = tmp_path_factory.mktemp("mtls")
    env = _worker_env(secured_stack, tmp, **secured.mtls_env())
    worker = _offload(secured_stack, secured.mtls_kafka(), env, tmp)
    try:
        yield env
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]


def _cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], env: dict[str, str], *argv: str
):
    for name in [n for n in os.environ if n.startswith("PROCESSOR_")]:
        monkeypatch.delenv(name)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    capsys.readouterr()
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _read_back(monkeypatch, capsys, env: dict[str, str]) -> None:
    topic = env["PROCESSOR_TOPICS"]
    code, out, err = _cli(monkeypatch, capsys, env, "segments", "--topic", topic, "--json")
    assert code == 0, err
    segments = [json.loads(line) for line in out.splitlines()]
    assert {s["partition"] for s in segments} == set(range(PARTITIONS))
    code, out, err = _cli(
        monkeypatch, capsys, env, "fetch", "--topic", topic, "--partition", "1", "--offset", "0",
        "--max-records", "5", "--json",
    )  # fmt: skip
    assert code == 0, err
    assert [json.loads(line)["offset"] for line in out.splitlines()] == [0, 1, 2, 3, 4]
    code, out, err = _cli(monkeypatch, capsys, env, "verify", "--topic", topic, "--json")
    assert code == 0, (out, err)


def test_sasl_ssl_worker_offloads_and_the_cli_reads_back(sasl_ssl_archive, monkeypatch, capsys) -> None:
    assert sasl_ssl_archive["PROCESSOR_SECURITY_PROTOCOL"] == "SASL_SSL"
    _read_back(monkeypatch, capsys, sasl_ssl_archive)


def test_mutual_tls_worker_offloads_and_the_cli_reads_back(mtls_archive, monkeypatch, capsys) -> None:
    assert mtls_archive["PROCESSOR_SECURITY_PROTOCOL"] == "SSL"
    _read_back(monkeypatch, capsys, mtls_archive)


def _get(url: str, token: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")
    except (urllib.error.URLError, ConnectionError):
        return 0, None


def test_follower_reads_through_sasl_ssl_behind_its_token(sasl_ssl_archive, tmp_path) -> None:
    port = free_port()
    env = {
        **sasl_ssl_archive,
        "PROCESSOR_WEB_HOST": "0.0.0.0",  # off loopback: the token is required, and given
        "PROCESSOR_WEB_PORT": str(port),
        "PROCESSOR_WEB_TOKEN": TOKEN,
        "PROCESSOR_DATA_DIR": str(tmp_path / "follower"),
    }
    with (tmp_path / "follower.log").open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor", "follower"], env=env, stdout=out, stderr=out
        )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while _get(f"{base}/readyz")[0] != 200:
            assert proc.poll() is None and time.monotonic() < deadline, (
                tmp_path / "follower.log"
            ).read_text()
            time.sleep(0.2)
        query = f"/fetch?topic={TOPIC}&partition=0&offset=2&max_records=3"
        assert _get(base + query)[0] == 401
        status, body = _get(base + query, TOKEN)
        while status == 404 and time.monotonic() < deadline:  # ready, still applying the archive's records
            time.sleep(0.2)
            status, body = _get(base + query, TOKEN)
        assert status == 200 and [r["offset"] for r in body["records"]] == [2, 3, 4]
        status, body = _get(f"{base}/segments?topic={TOPIC}&limit=1", TOKEN)
        assert status == 200 and len(body["segments"]) == 1 and body["next"]
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_worker_open_off_loopback_refuses_to_start(secured_stack: StackInfo, tmp_path: Path) -> None:
    env = {**_worker_env(secured_stack, tmp_path), "PROCESSOR_WEB_HOST": "0.0.0.0"}
    done = subprocess.run(
        [sys.executable, "-m", "processor", "worker"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert "PROCESSOR_WEB_TOKEN" in done.stderr and "PROCESSOR_WEB_AUTH=none" in done.stderr


def _segments_in_a_child(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "processor", "segments", "--topic", TOPIC]
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"PROCESSOR_SASL_PASSWORD": 'wrong-"canary\\pw'}, "Authentication failed"),
        (
            {"PROCESSOR_SASL_MECHANISM": "SCRAM-SHA-256", "PROCESSOR_SASL_USERNAME": "nobody-canary"},
            "Authentication",
        ),
        ({"PROCESSOR_SSL_CAFILE": "untrusted"}, "certificate verify failed"),
    ],
)
def test_refused_credentials_exit_3_naming_broker_and_mechanism(
    secured_stack: StackInfo, change: dict[str, str], reason: str
) -> None:
    secured = secured_stack.secured
    assert secured is not None
    env = {**secured_stack.worker_env("unused", TOPIC), **change}
    if change.get("PROCESSOR_SSL_CAFILE") == "untrusted":
        env["PROCESSOR_SSL_CAFILE"] = secured.pki.untrusted_ca_file
    done = _segments_in_a_child(env)
    assert done.returncode == 3, done.stderr
    assert secured_stack.bootstrap_servers in done.stderr and reason in done.stderr
    assert env["PROCESSOR_SASL_MECHANISM"] in done.stderr and "SASL_SSL" in done.stderr
    assert "canary\\pw" not in done.stderr and secured.password not in done.stderr


def test_mutual_tls_without_a_client_certificate_exits_3(secured_stack: StackInfo) -> None:
    secured = secured_stack.secured
    assert secured is not None
    env = {**secured_stack.worker_env("unused", TOPIC), **secured.mtls_env()}
    for name in (
        "PROCESSOR_SSL_CERTFILE",
        "PROCESSOR_SSL_KEYFILE",
        "PROCESSOR_SSL_KEY_PASSWORD",
        *SASL_VARIABLES,
    ):
        env.pop(name)
    done = _segments_in_a_child(env)
    assert done.returncode == 3, done.stderr
    assert secured.mtls.bootstrap_servers in done.stderr and "SSL" in done.stderr


def test_the_gateway_serves_the_archive_over_tls_with_sasl_passed_through(
    sasl_ssl_archive: dict[str, str], secured_stack: StackInfo, tmp_path: Path
) -> None:
    """`processor gateway` in front of the SASL_SSL listener: TLS towards the brokers from the Kafka
    security settings, TLS towards clients from its own certificate, and the client's SASL login
    passed through to the brokers. A confluent-kafka consumer group reads every archived record from
    offset 0, the archived ones from the archive."""
    from confluent_kafka import Consumer

    from processor.kafka.clients import consumer_config

    secured = secured_stack.secured
    assert secured is not None
    port, web = free_port(), free_port()
    env = {
        **sasl_ssl_archive,
        "PROCESSOR_DATA_DIR": str(tmp_path / "gateway"),
        "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
        "PROCESSOR_GATEWAY_PORT": str(port),
        "PROCESSOR_GATEWAY_NODE_IDS": secured_stack.gateway_node_ids,
        "PROCESSOR_GATEWAY_ARCHIVE_READS": "archived",
        "PROCESSOR_GATEWAY_TLS_CERTFILE": secured.pki.broker_cert,  # valid for 127.0.0.1
        "PROCESSOR_GATEWAY_TLS_KEYFILE": secured.pki.broker_key,
        "PROCESSOR_WEB_HOST": "127.0.0.1",
        "PROCESSOR_WEB_PORT": str(web),
    }
    with (tmp_path / "gateway.log").open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor", "gateway"], env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 90
        while _get(f"http://127.0.0.1:{web}/readyz")[0] != 200:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "gateway.log").read_text()
            time.sleep(0.2)
        client = KafkaConnection(f"127.0.0.1:{port}", KafkaSecurity.from_env(secured.sasl_ssl_env()))
        consumer = Consumer(
            consumer_config(
                client, "gw-secured",
                **{"group.id": "gw-secured", "auto.offset.reset": "earliest", "enable.auto.commit": False,
                   "session.timeout.ms": 6000, "fetch.wait.max.ms": 10},
            )
        )  # fmt: skip
        consumer.subscribe([TOPIC])
        seen: Counter[int] = Counter()
        offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        try:
            while sum(seen.values()) < RECORDS and time.monotonic() < deadline + 60:
                msg = consumer.poll(0.2)
                if msg is None:
                    continue
                assert msg.error() is None, msg.error()
                seen[msg.partition() or 0] += 1
                offsets[msg.partition() or 0].append(msg.offset() or 0)
                consumer.commit(message=msg, asynchronous=False)  # through the gateway too
        finally:
            consumer.close()
        assert sum(seen.values()) == RECORDS
        assert all(got == list(range(len(got))) for got in offsets.values())
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{web}/metrics", timeout=10).read().decode()
        served = [
            line for line in metrics.splitlines()
            if line.startswith("processor_gateway_fetch_bytes_total{") and f'topic="{TOPIC}"' in line
        ]  # fmt: skip
        assert served and float(served[0].rsplit(" ", 1)[1]) > 0, "nothing came from the archive"
    finally:
        proc.terminate()
        proc.wait(30)


async def _raw_fetch(target: KafkaConnection) -> list[tuple[int, int, bytes | None]]:
    """One Fetch of every partition of TOPIC from offset 0, sent as it is (aiokafka's low-level
    client): (partition, error code, record bytes) as the gateway answers."""
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.fetch import FetchRequest

    from processor.kafka.clients import aiokafka_client_kwargs

    client = AIOKafkaClient(**aiokafka_client_kwargs(target), client_id="outsider")
    await client.bootstrap()
    try:
        node = next(iter(client.cluster.brokers())).nodeId
        request = FetchRequest(10, 1, 1 << 20, 0, [(TOPIC, [(p, 0, 1 << 20) for p in range(PARTITIONS)])])
        response = await client.send(node, request)
        return [
            (int(partition), int(error), data[-1] if data else None)
            for _topic, partitions in response.topics
            for partition, error, _high, *data in partitions
        ]
    finally:
        await client.close()


def _outsider(secured_stack: StackInfo) -> KafkaSecurity:
    """A SCRAM user of the secured stack allowed its consumer groups, but nothing on any topic."""
    secured = secured_stack.secured
    assert secured is not None
    password = "outsider-password"
    user_with_exactly(secured_stack, "outsider", password, [("GROUP", "*", "LITERAL", ["READ"])])
    return KafkaSecurity.from_env(
        {**secured.sasl_ssl_env(), "PROCESSOR_SASL_USERNAME": "outsider", "PROCESSOR_SASL_PASSWORD": password}
    )


@pytest.mark.parametrize("reads", ["below-log-start", "archived"])
def test_a_principal_without_read_on_the_topic_gets_no_archived_record_through_the_gateway(
    sasl_ssl_archive: dict[str, str], secured_stack: StackInfo, tmp_path: Path, reads: str
) -> None:
    """The gateway passes the client's SASL login through: the broker's ACLs decide. A principal
    without Read on the topic that sends a Fetch for archived offsets anyway (a client library would
    stop at the Metadata refusal) gets TOPIC_AUTHORIZATION_FAILED, and no record, archived or not."""
    from confluent_kafka import KafkaError

    secured = secured_stack.secured
    assert secured is not None
    outsider = _outsider(secured_stack)
    port, web = free_port(), free_port()
    settings = load_settings(
        {
            **sasl_ssl_archive,
            "PROCESSOR_DATA_DIR": str(tmp_path / "gateway"),
            "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
            "PROCESSOR_GATEWAY_PORT": str(port),
            "PROCESSOR_GATEWAY_ARCHIVE_READS": reads,
            "PROCESSOR_GATEWAY_TLS_CERTFILE": secured.pki.broker_cert,
            "PROCESSOR_GATEWAY_TLS_KEYFILE": secured.pki.broker_key,
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(web),
        }
    )
    with gateway_running(GatewayServer.build(settings)):
        answers = asyncio.run(_raw_fetch(KafkaConnection(f"127.0.0.1:{port}", outsider)))
        # the same request of the dev user, allowed to read: the archive's records
        allowed = asyncio.run(
            _raw_fetch(KafkaConnection(f"127.0.0.1:{port}", secured.sasl_ssl_kafka().security))
        )
    assert {error for _p, error, _r in allowed} == {0} and all(batch for _p, _e, batch in allowed)
    errors = {error for _partition, error, _records in answers}
    records = sum(len(batch or b"") for _partition, _error, batch in answers)
    refused = errors == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert records == 0, f"{records} records reached a principal without Read on {TOPIC}"
    assert refused, f"the gateway answered {errors}, not TOPIC_AUTHORIZATION_FAILED"
