"""Unmodified Kafka consumers of five kinds, each in a consumer group that commits, reading one topic
from its earliest offset: confluent-kafka (librdkafka), aiokafka, kafka-python, Debian's kcat and
Apache Kafka's own Java client (``tests/support/java/RecordDump.java`` run from the stack's jars).

Each returns what it got as :data:`Seen` tuples, ``(partition, offset, key, value, headers,
timestamp)``, so one check compares them all with what was produced.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer

from processor.devstack import jars
from processor.devstack.sample_data import SampleRecord

Seen = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]
Reader = Callable[[str, str, str, int], list[Seen]]
# A group's first JoinGroup on Apache Kafka is answered at once (group.initial.rebalance.delay.ms=0);
# a short session lets a test's leftover member leave quickly.
SESSION_MS = 6000
IDLE_S = 60.0  # no record for this long: the reader stops with what it has
JAVA_SOURCE = Path(__file__).parent / "java" / "RecordDump.java"


def read_confluent(bootstrap: str, group: str, topic: str, want: int, **config: Any) -> list[Seen]:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "session.timeout.ms": SESSION_MS,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 10,
            "check.crcs": True,
            **config,
        }
    )
    consumer.subscribe([topic])
    got: list[Seen] = []
    try:
        last = time.monotonic()
        while len(got) < want and time.monotonic() - last < IDLE_S:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            last = time.monotonic()
            raw_headers: list[tuple[str, Any]] = list(msg.headers() or [])  # type: ignore[arg-type]
            headers = [(k, v if isinstance(v, bytes | None) else v.encode()) for k, v in raw_headers]
            got.append(
                (msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(), headers, msg.timestamp()[1])
            )
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return got


def read_aiokafka(bootstrap: str, group: str, topic: str, want: int) -> list[Seen]:
    from aiokafka import AIOKafkaConsumer

    async def consume() -> list[Seen]:
        consumer = AIOKafkaConsumer(
            topic, bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=SESSION_MS,
            auto_offset_reset="earliest", enable_auto_commit=False, fetch_max_wait_ms=10,
        )  # fmt: skip
        await consumer.start()
        got: list[Seen] = []
        try:
            last = time.monotonic()
            while len(got) < want and time.monotonic() - last < IDLE_S:
                batch = await asyncio.wait_for(consumer.getmany(timeout_ms=200), 60)
                for tp, messages in batch.items():
                    got += [
                        (tp.partition, m.offset, m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp)
                        for m in messages
                    ]
                    last = time.monotonic()
            await consumer.commit()
        finally:
            await consumer.stop()
        return got

    return asyncio.run(consume())


def read_kafka_python(bootstrap: str, group: str, topic: str, want: int) -> list[Seen]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=1000, auto_offset_reset="earliest", enable_auto_commit=False,
        fetch_max_wait_ms=10,
    )  # fmt: skip
    # The topic's metadata before the group's first join: kafka-python 3.0 joining before it knows the
    # topic gets an empty first assignment, then rejoins, and on a loaded machine it sometimes stopped
    # there (no request after the second SyncGroup, no heartbeat): tests/integration/test_gateway.py.
    assert consumer.partitions_for_topic(topic), f"{topic}: no partitions known"
    consumer.subscribe([topic])
    got: list[Seen] = []
    try:
        last = time.monotonic()
        while len(got) < want and time.monotonic() - last < IDLE_S:
            for tp, messages in consumer.poll(timeout_ms=200).items():
                got += [
                    (tp.partition, m.offset, m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp)
                    for m in messages
                ]
                last = time.monotonic()
        got += _commit_through_rebalances(consumer)
    finally:
        consumer.close()
    return got


def _commit_through_rebalances(consumer: Any, attempts: int = 10) -> list[Seen]:
    """kafka-python refuses a commit while its group rebalances (a member joined or left, often on a
    loaded machine): poll, which completes the rebalance, and commit again. Returns what those polls
    read (nothing, once every record was read)."""
    from kafka.errors import CommitFailedError, RebalanceInProgressError

    got: list[Seen] = []
    for attempt in range(attempts):
        try:
            consumer.commit()
            return got
        except (RebalanceInProgressError, CommitFailedError):
            if attempt == attempts - 1:
                raise
            for tp, messages in consumer.poll(timeout_ms=500).items():
                got += [
                    (tp.partition, m.offset, m.key, m.value, [(k, v) for k, v in m.headers], m.timestamp)
                    for m in messages
                ]
    return got


def kcat() -> str:
    """Debian's kcat (librdkafka's command line client): installed here when missing."""
    found = shutil.which("kcat")
    if found is None:
        subprocess.run(
            ["apt-get", "install", "-y", "-q", "kcat"], check=False, capture_output=True, timeout=300
        )
        found = shutil.which("kcat")
    assert found is not None, "kcat is not installed and `apt-get install kcat` did not install it"
    return found


def parse_kcat(out: bytes) -> list[Seen]:
    """Records written by kcat with the format "%p %o %T %K %S\\n%k%s": sizes first, then the key and
    value bytes as they are (binary safe). kcat prints headers only as text: none are reported."""
    got: list[Seen] = []
    pos = 0
    while pos < len(out):
        end = out.index(b"\n", pos)
        head = out[pos:end].split(b" ", 5)
        p, o, ts, klen, vlen = (int(x) for x in head[:5])
        pos = end + 1
        key = None if klen < 0 else out[pos : pos + klen]
        pos += max(klen, 0)
        value = None if vlen < 0 else out[pos : pos + vlen]
        pos += max(vlen, 0)
        got.append((p, o, key, value, [], ts))
    return got


def read_kcat(bootstrap: str, group: str, topic: str, want: int) -> list[Seen]:
    """kcat in a consumer group (balanced mode), exiting at the end of every partition."""
    result = subprocess.run(
        [
            kcat(), "-b", bootstrap, "-G", group, topic, "-o", "beginning", "-e", "-q",
            "-X", "fetch.wait.max.ms=10", "-X", f"session.timeout.ms={SESSION_MS}",
            "-f", "%p %o %T %K %S\n%k%s",
        ],
        capture_output=True, timeout=180, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode(errors="replace")
    return parse_kcat(result.stdout)


def _unb64(field: str) -> bytes | None:
    return None if field == "-" else base64.b64decode(field)


def parse_record_dump(out: str) -> list[Seen]:
    got: list[Seen] = []
    for line in out.splitlines():
        if not line.startswith("R\t"):
            continue  # the client's own logging
        _, p, o, ts, key, value, headers = line.split("\t")
        pairs = [h.split(":", 1) for h in headers.split(",")] if headers else []
        got.append(
            (
                int(p),
                int(o),
                _unb64(key),
                _unb64(value),
                [((_unb64(k) or b"").decode(), _unb64(v)) for k, v in pairs],
                int(ts),
            )
        )
    return got


def read_java(bootstrap: str, group: str, topic: str, want: int, *properties: str) -> list[Seen]:
    """Apache Kafka's Java consumer (kafka-clients from the stack's jars), run as a source file."""
    java = shutil.which("java")
    assert java is not None, "java is not on PATH"
    result = subprocess.run(
        [java, "-cp", jars.classpath("kafka"), str(JAVA_SOURCE), bootstrap, group, topic, str(want),
         *properties],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    return parse_record_dump(result.stdout)


READERS: dict[str, Reader] = {
    "confluent-kafka": read_confluent,
    "aiokafka": read_aiokafka,
    "kafka-python": read_kafka_python,
    "kcat": read_kcat,
    "java": read_java,
}
# kcat prints headers only as text: its headers are not compared
REPORTS_HEADERS = {
    "confluent-kafka": True,
    "aiokafka": True,
    "kafka-python": True,
    "kcat": False,
    "java": True,
}


def check_every_record_once(
    got: Sequence[Seen], by_partition: dict[int, list[SampleRecord]], client: str, headers: bool = True
) -> None:
    """Every record of ``by_partition`` (offset i of partition p is ``by_partition[p][i]``) once, in
    offset order per partition, byte-exact: key, value, timestamp and (where reported) headers."""
    want = sum(len(rs) for rs in by_partition.values())
    assert len(got) == want, f"{client}: {len(got)} records, not {want}"
    for p, records in by_partition.items():
        mine = [g for g in got if g[0] == p]
        assert [g[1] for g in mine] == list(range(len(records))), (
            f"{client} partition {p}: not every offset once, in order"
        )
        for g, r in zip(mine, records, strict=True):
            seen = (g[2], g[3], g[4] if headers else [], g[5])
            assert seen == (r.key, r.value, list(r.headers) if headers else [], r.timestamp), (
                f"{client}: partition {p} offset {g[1]} differs"
            )


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets on ``topic``, as the broker (or a gateway) answers them."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KafkaTP

    from processor.kafka.clients import new_admin

    admin = new_admin(bootstrap, "tests-committed")  # held: its futures die with it
    asked = ConsumerGroupTopicPartitions(group, [KafkaTP(topic, p) for p in range(partitions)])
    listed = admin.list_consumer_group_offsets([asked])[group].result(timeout=30)
    return {tp.partition: tp.offset for tp in listed.topic_partitions}
