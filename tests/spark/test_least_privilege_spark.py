"""The Spark reader as a principal with exactly the ACLs docs/security.md lists for it, on the secured
stack (Apache Kafka's StandardAuthorizer, nobody allowed anything unless granted).

One archive for the module, written by the dev user's worker (allowed everything) with segments
rolled by size only, so each partition keeps a tail on the live topic. The reader's principal reads
it all with ``tiered_records`` (archive and live tail, batch and a stream) and ``remote_log_metadata``,
with Spark's Kafka option names; without one of its grants each read fails with a line naming the
topic and what was refused. Spark's own Kafka source reads it all through the gateway (SASL passed
through) with Read and Describe on the topic.
"""

from __future__ import annotations

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
from confluent_kafka import TopicPartition as KafkaTP

from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_consumer
from processor.kafka.partition import TopicPartition
from processor.metadata.topic_io import load_remote_state
from tests.integration.worker_process import TEST_SESSION_TIMEOUT_MS, WorkerProcess
from tests.support.gateway_thread import tls_gateway_env
from tests.support.kafka_acls import Grant, user_with_exactly

TOPIC = "lp-spark"
PARTITIONS = 2
META = "__remote_log_metadata_lp_spark"
PREFIX = "lp-spark"
READER, PASSWORD = "lp-spark-reader", "lp-spark-pw"
# docs/security.md: Read and Describe on the metadata topic; the live tail, Read and Describe on the
# source topics
READER_GRANTS: list[Grant] = [
    ("TOPIC", META, "LITERAL", ["READ", "DESCRIBE"]),
    ("TOPIC", TOPIC, "LITERAL", ["READ", "DESCRIBE"]),
]


@dataclass
class Archive:
    stack: StackInfo
    env: dict[str, str]  # the dev user's worker environment, without its data dir
    archived: dict[int, int]  # next offset after each partition's archive
    highs: dict[int, int]  # each partition's high watermark (the live tail past the archive)


def _archive_ends(stack: StackInfo) -> dict[int, int]:
    state, _ = load_remote_state(stack.kafka, META)
    return {
        p: (state.partition(TopicPartition(TOPIC, p)).highest_finished_offset() or -1) + 1
        for p in range(PARTITIONS)
    }


@pytest.fixture(scope="module")
def archive(secured_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archive]:
    tmp = tmp_path_factory.mktemp("lp-spark")
    kafka = secured_stack.kafka
    ensure_topic(new_admin(kafka, "lp-spark"), TOPIC, PARTITIONS, 1, {})
    produce_samples(kafka, TOPIC, 240, PARTITIONS, big_every=0)
    env = secured_stack.worker_env(
        tmp / "data", TOPIC, PROCESSOR_METADATA_TOPIC=META, PROCESSOR_METADATA_PARTITIONS="2",
        PROCESSOR_SEGMENT_BYTES="16KiB", PROCESSOR_BLOCK_BYTES="4KiB",
        PROCESSOR_SEGMENT_MS="1h",  # rolled by size only: a tail stays on the topic
        PROCESSOR_BUFFER_BYTES="8MiB", PROCESSOR_SESSION_TIMEOUT_MS=TEST_SESSION_TIMEOUT_MS,
        PROCESSOR_S3_PREFIX=PREFIX, PROCESSOR_FOLLOWER_ENABLED="false",
    )  # fmt: skip
    worker = WorkerProcess(env, tmp / "worker.log")
    try:
        deadline = time.monotonic() + 120
        while not all(end > 0 for end in _archive_ends(secured_stack).values()):
            assert worker.proc.poll() is None and time.monotonic() < deadline, worker.log()[-3000:]
            time.sleep(0.5)  # polling: the worker's first finished segments
    finally:
        assert worker.stop() == 0, worker.log()[-3000:]
    # more records while no worker runs: the live tail (the stopped worker rolled what it held)
    produce_samples(kafka, TOPIC, 40, PARTITIONS, start=240, big_every=0)
    archived = _archive_ends(secured_stack)
    consumer = new_consumer(kafka, "lp-spark-highs")
    highs = {p: consumer.get_watermark_offsets(KafkaTP(TOPIC, p), timeout=10)[1] for p in range(PARTITIONS)}
    consumer.close()
    assert all(highs[p] > archived[p] > 0 for p in range(PARTITIONS)), (archived, highs)
    env = {k: v for k, v in env.items() if k != "PROCESSOR_DATA_DIR"}
    yield Archive(secured_stack, {**env, "PROCESSOR_S3_REGION": "us-east-1"}, archived, highs)


def _jaas(user: str, password: str) -> str:
    login = "org.apache.kafka.common.security.scram.ScramLoginModule"
    return f'{login} required username="{user}" password="{password}";'


def _options(archive: Archive, cache: Path, **extra: str) -> dict[str, str]:
    """The reader's connection in Spark's Kafka option names (SCRAM over SASL_SSL), with a metadata
    cache of its own (a cache another principal filled would hide a missing Read)."""
    secured = archive.stack.secured
    assert secured is not None
    return {
        "kafka.bootstrap.servers": archive.stack.bootstrap_servers,
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": _jaas(READER, PASSWORD),
        "kafka.ssl.ca.location": secured.pki.ca_file,
        "metadata.topic": META,
        "metadata.cacheDir": str(cache),
        "s3.endpoint": archive.stack.s3_endpoint_url,
        "s3.bucket": archive.stack.bucket,
        "s3.prefix": PREFIX,
        "s3.region": "us-east-1",
        **extra,
    }


def _without(grants: list[Grant], name: str, op: str) -> list[Grant]:
    return [(k, n, pt, [o for o in ops if not (n == name and o == op)]) for k, n, pt, ops in grants]


def _refusal(action: Any) -> str:
    """The line of the error ``action`` raises that says what was refused (Spark wraps it in the Python
    worker's traceback, which ends with it)."""
    try:
        action()
    except Exception as exc:
        lines = [line for line in str(exc).splitlines() if "authorization" in line.lower()]
        assert lines, str(exc)[-3000:]
        return lines[-1]
    raise AssertionError("the read succeeded")


def _records(spark: Any, options: dict[str, str], **extra: str) -> list[tuple[int, int]]:
    reader = spark.read.format("tiered_records").options(subscribe=TOPIC, **options, **extra)
    return sorted(
        (r["partition"], r["offset"]) for r in reader.load().select("partition", "offset").collect()
    )


def _metadata_rows(spark: Any, options: dict[str, str]) -> int:
    reader = spark.read.format("remote_log_metadata").options(
        **{k: v for k, v in options.items() if k.startswith(("kafka.", "metadata.topic"))}
    )
    return int(reader.load().where("decode_error IS NULL").count())


def _metadata_ends(stack: StackInfo) -> int:
    consumer = new_consumer(stack.kafka, "lp-spark-meta-highs")
    try:
        return sum(consumer.get_watermark_offsets(KafkaTP(META, p), timeout=10)[1] for p in range(PARTITIONS))
    finally:
        consumer.close()


def test_the_spark_reader_with_exactly_the_documented_acls_reads_archive_tail_and_metadata(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    """``tiered_records`` over the archive and the live tail (a batch and a stream) and
    ``remote_log_metadata`` read everything with Read and Describe on the metadata topic and the
    source topic. Read alone is enough (Kafka's Read implies Describe); without Read on the source
    topic the archive alone is still read when the query does not ask for the live tail."""
    everything = [(p, o) for p in range(PARTITIONS) for o in range(archive.highs[p])]
    user_with_exactly(archive.stack, READER, PASSWORD, READER_GRANTS)
    options = _options(archive, tmp_path / "cache")
    assert _records(spark, options, tail="live") == everything
    stream = (
        spark.readStream.format("tiered_records")
        .options(subscribe=TOPIC, tail="live", startingOffsets="earliest", **options)
        .load()
        .writeStream.format("memory")
        .queryName("lp_spark_stream")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    stream.awaitTermination(300)
    assert stream.exception() is None
    streamed = spark.table("lp_spark_stream").select("partition", "offset").collect()
    assert sorted((r["partition"], r["offset"]) for r in streamed) == everything
    assert _metadata_rows(spark, options) == _metadata_ends(archive.stack)

    read_only = [(k, n, pt, ["READ"]) for k, n, pt, _ops in READER_GRANTS]
    user_with_exactly(archive.stack, READER, PASSWORD, read_only)
    assert _records(spark, _options(archive, tmp_path / "read-only"), tail="live") == everything

    # nothing on the source topic: the archive (its access is the bucket's), not the live tail
    user_with_exactly(archive.stack, READER, PASSWORD, READER_GRANTS[:1])
    archived = [(p, o) for p in range(PARTITIONS) for o in range(archive.archived[p])]
    assert _records(spark, _options(archive, tmp_path / "archive-only")) == archived


def test_the_spark_reader_without_one_of_its_acls_is_told_which(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    """Each grant taken away in turn: the read fails with a line naming the topic, the refusal and the
    operation the principal needs (never a read of less than was asked, never a wait)."""
    cases = [
        # the metadata topic's Read: planning's catch-up, the metadata source's executors
        ([(META, "READ")], META, "Read"),
        # nothing on the metadata topic: planning cannot even list it
        ([(META, "READ"), (META, "DESCRIBE")], META, "Read and Describe on the metadata topic"),
        # the source topic's Read: the live tail's executors
        ([(TOPIC, "READ")], TOPIC, "needs Read"),
        # nothing on the source topic: tail=live refuses at planning, never reads the archive alone
        ([(TOPIC, "READ"), (TOPIC, "DESCRIBE")], TOPIC, "tail=live needs Read and Describe"),
    ]
    for number, (missing, topic, needs) in enumerate(cases):
        grants = READER_GRANTS
        for name, op in missing:
            grants = _without(grants, name, op)
        user_with_exactly(archive.stack, READER, PASSWORD, grants)
        options = _options(archive, tmp_path / f"cache-{number}")
        said = _refusal(lambda options=options: _records(spark, options, tail="live"))
        assert f"topic {topic}" in said and needs in said, (missing, said)
        if topic == META:
            said = _refusal(lambda options=options: _metadata_rows(spark, options))
            assert f"topic {META}" in said and "Read" in said, (missing, said)


# -- Spark's own Kafka source through the gateway ------------------------------------------------------

GATEWAY = "lp-spark-gateway"
# the gateway's own follower of the metadata topic, and nothing else (docs/security.md)
GATEWAY_GRANTS: list[Grant] = [("TOPIC", META, "LITERAL", ["READ", "DESCRIBE", "DESCRIBE_CONFIGS"])]
# Spark's Kafka source through the gateway needs on the brokers what it needs without it
KAFKA_SOURCE_GRANTS: list[Grant] = [("TOPIC", TOPIC, "LITERAL", ["READ", "DESCRIBE"])]


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


@pytest.fixture
def gateway(archive: Archive, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``processor gateway`` as its own principal, every archived offset read from the archive, TLS
    towards clients (their SASL login passed through to the broker): its bootstrap and web address."""
    secured = archive.stack.secured
    assert secured is not None
    user_with_exactly(archive.stack, GATEWAY, PASSWORD, GATEWAY_GRANTS)
    own, port, web = tls_gateway_env(archive.stack, tmp_path / "gateway-data")
    env = {**archive.env, "PROCESSOR_SASL_USERNAME": GATEWAY, "PROCESSOR_SASL_PASSWORD": PASSWORD, **own}
    log = tmp_path / "gateway.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor", "gateway"], env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 90
        while not _ready(f"http://127.0.0.1:{web}/readyz"):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)  # polling: the gateway's follower catching up
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{web}"
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


def test_sparks_kafka_source_through_the_gateway_with_exactly_read_and_describe_on_the_topic(
    spark: Any, archive: Archive, gateway: tuple[str, str]
) -> None:
    """Spark's own Kafka source (the Java client, SCRAM over TLS to the gateway, which passes the login
    through) reads every record, the archived ones from the archive, with Read and Describe on the
    topic and nothing else; without Read it fails naming the topic."""
    secured = archive.stack.secured
    assert secured is not None
    options = {
        "kafka.bootstrap.servers": gateway[0],
        "kafka.security.protocol": "SASL_SSL",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.jaas.config": _jaas(READER, PASSWORD),
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.location": secured.pki.ca_file,
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
    }

    def read() -> list[tuple[int, int]]:
        df = spark.read.format("kafka").options(**options).load()
        return sorted((r["partition"], r["offset"]) for r in df.select("partition", "offset").collect())

    user_with_exactly(archive.stack, READER, PASSWORD, KAFKA_SOURCE_GRANTS)
    assert read() == [(p, o) for p in range(PARTITIONS) for o in range(archive.highs[p])]
    with urllib.request.urlopen(f"{gateway[1]}/metrics", timeout=10) as resp:
        metrics = resp.read().decode()
    from_archive = sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("processor_gateway_fetch_records_total{")
        and f'topic="{TOPIC}"' in line
        and 'source="archive"' in line
    )
    assert from_archive >= sum(archive.archived.values()), metrics[-3000:]
    user_with_exactly(archive.stack, READER, PASSWORD, _without(KAFKA_SOURCE_GRANTS, TOPIC, "READ"))
    said = _refusal(read)
    assert TOPIC in said, said


def test_an_audit_that_may_not_describe_an_archived_topic_says_so_and_resolves_nothing(
    spark: Any, archive: Archive, tmp_path: Path
) -> None:
    """The audit compares each archived topic's offsets with the archive's (offload lag, offsets lost
    before the offload). A principal that may not describe the topic got a listing without it, and the
    lag check counted as done: its open problems resolved, unseen. Now the pass fails naming the topic."""
    from processor.commands.audit import refusal_in
    from processor.spark.audit.run import AuditOptions, run_audit
    from processor.spark_sources.entry import connection_from

    user_with_exactly(archive.stack, READER, PASSWORD, READER_GRANTS[:1])  # nothing on the topic
    conn = connection_from(_options(archive, tmp_path / "cache"), {})
    options = AuditOptions(conn, tmp_path / "checkpoint", tmp_path / "out", format="console", once=True)
    with pytest.raises(Exception) as failed:  # raised in the pass's batch function: Spark wraps it
        run_audit(spark, options)
    said = refusal_in(str(failed.value))  # what the audit command reports (exit 3)
    assert said is not None, str(failed.value)[-3000:]
    assert f"topic {TOPIC}" in said and "Describe" in said, said
