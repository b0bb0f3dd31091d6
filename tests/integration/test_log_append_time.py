"""A topic with ``message.timestamp.type=LogAppendTime`` on Apache Kafka, archived and read back after the
broker deleted it: every record carries the time the broker appended it, not the producer's (which
are years old here), through every way the archive is read. ``processor fetch --timestamp`` and
``RemoteReader.read_from_timestamp`` find records by the append time and return it as
``LOG_APPEND_TIME``; through the gateway, a consumer's ``offsets_for_times`` and an admin's ListOffsets
by timestamp answer what the broker answered before the truncation, and a consumer in a group reads
every record with the broker's timestamp and type.

A LogAppendTime batch keeps the producer's times in its records (``firstTimestamp`` and the deltas):
only the header's ``maxTimestamp`` and attributes say the append time, so a reader that took the
records' own times would find the wrong offsets and return the wrong timestamps.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from processor.config import load_settings
from processor.devstack import stack
from processor.devstack.stack import StackInfo
from processor.errors import OffsetNotInRemoteError
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.segment.records import TimestampType
from processor.wiring.gateway_server import GatewayServer
from processor.wiring.read_side import open_read_side
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.cli import run_cli
from tests.support.gateway_thread import gateway_running, loopback_gateway
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "lat-orders"
PARTITIONS = 2
ROUNDS = 8  # produced one after another: a batch a partition each, appended at distinct times
PER_ROUND = 40  # records a partition in a round
CREATED = 1_690_000_000_000  # the producer's timestamps (July 2023): what the broker overrides
META = "__remote_log_metadata_lat"
PREFIX = "lat"
IDLE_S = 5.0

Row = tuple[int, int, bytes | None, bytes | None, int, int]  # partition, offset, key, value, type, timestamp


def _produce(bootstrap: str) -> None:
    """Rounds of records stamped with 2023 times; every other round lz4-compressed (the broker sets the
    append time in a compressed batch's header the same way), each round appended at a later
    millisecond than the one before."""
    plain = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "enable.idempotence": True})
    packed = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "compression.type": "lz4",
            "enable.idempotence": True,
        }
    )
    for n in range(ROUNDS):
        producer = packed if n % 2 else plain
        for p in range(PARTITIONS):
            for i in range(PER_ROUND):
                key, value = b"k%d-%d" % (n, i), b"lat-%d-%d-%d" % (n, p, i) * 8
                producer.produce(TOPIC, key=key, value=value, partition=p, timestamp=CREATED + n * 1000 + i)
        assert producer.flush(30) == 0, "records not delivered"
        after = time.time_ns() // 1_000_000 + 2  # the next round lands at a later broker millisecond
        while time.time_ns() // 1_000_000 < after:
            time.sleep(0.001)


def _read(bootstrap: str, group: str) -> list[Row]:
    """Every partition from offset 0 to its end, in a group that commits."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
            "enable.auto.commit": False, "fetch.wait.max.ms": 10, "check.crcs": True,
        }
    )  # fmt: skip
    want = ROUNDS * PER_ROUND * PARTITIONS
    consumer.subscribe([TOPIC])
    rows: list[Row] = []
    try:
        last = time.monotonic()
        while len(rows) < want and time.monotonic() - last < 60:
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            last = time.monotonic()
            kind, ts = msg.timestamp()
            rows.append((msg.partition() or 0, msg.offset() or 0, msg.key(), msg.value(), kind, ts))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return sorted(rows)


def _asked_times(rows: list[Row]) -> list[int]:
    """Timestamps to look up: each append time, one past it, the producers' own times and past the end."""
    appended = sorted({r[5] for r in rows})
    return [CREATED, CREATED + 5000, *appended, *(t + 1 for t in appended[:-1]), appended[-1] + 60_000]


def _consumer_offsets_for_times(bootstrap: str, times: list[int]) -> dict[tuple[int, int], int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat-times"})
    try:
        return {
            (p, t): consumer.offsets_for_times([KafkaTP(TOPIC, p, t)], timeout=15)[0].offset
            for p in range(PARTITIONS)
            for t in times
        }
    finally:
        consumer.close()


def _admin_offsets_for_times(bootstrap: str, times: list[int]) -> dict[tuple[int, int], tuple[int, int]]:
    """ListOffsets by timestamp as the admin client asks it: the offset and the timestamp found."""
    admin = new_admin(bootstrap, "lat-admin-times")
    out = {}
    for t in times:
        asked = {KafkaTP(TOPIC, p): OffsetSpec.for_timestamp(t) for p in range(PARTITIONS)}
        for tp, future in admin.list_offsets(asked).items():
            answer = future.result(timeout=15)
            out[(tp.partition, t)] = (answer.offset, answer.timestamp)
    return out


@dataclass
class Archived:
    env: dict[str, str]  # the archive's settings for the CLI and the read side
    gateway: str
    rows: list[Row]  # what a consumer got from the broker before the truncation
    times: list[int]
    consumer_answers: dict[tuple[int, int], int]  # the broker's, before the truncation
    admin_answers: dict[tuple[int, int], tuple[int, int]]


@pytest.fixture(scope="module")
def archived(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Archived]:
    if local_stack.broker != stack.KAFKA:
        pytest.skip("Tansu answers every ListOffsets by timestamp with 0 and never truncates")
    tmp = tmp_path_factory.mktemp("lat")
    bootstrap = local_stack.bootstrap_servers
    ensure_topic(
        new_admin(bootstrap, "t"), TOPIC, PARTITIONS, 1,
        {"message.timestamp.type": "LogAppendTime", "retention.ms": "-1"},
    )  # fmt: skip
    _produce(bootstrap)
    rows = _read(bootstrap, "lat-direct")
    assert len(rows) == ROUNDS * PER_ROUND * PARTITIONS
    assert {r[4] for r in rows} == {TIMESTAMP_LOG_APPEND_TIME} and min(r[5] for r in rows) > CREATED + 10**9
    assert len({r[5] for r in rows if r[0] == 0}) == ROUNDS  # one append time a round
    times = _asked_times(rows)
    consumer_answers = _consumer_offsets_for_times(bootstrap, times)
    admin_answers = _admin_offsets_for_times(bootstrap, times)

    ends = {p: 1 + max(r[1] for r in rows if r[0] == p) for p in range(PARTITIONS)}
    env = worker_env(
        local_stack, tmp / "data", TOPIC, PROCESSOR_METADATA_TOPIC=META, PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_SEGMENT_BYTES=str(24 * 1024), PROCESSOR_BLOCK_BYTES=str(4 * 1024),
        PROCESSOR_SEGMENT_MS="500",
    )  # fmt: skip
    worker = WorkerProcess(env, tmp / "worker.log")
    try:
        wait_offloaded(
            bootstrap, META, {TopicPartition(TOPIC, p): e - 1 for p, e in ends.items()}, 120, worker.proc
        )
    finally:
        worker.stop()
    admin = new_admin(bootstrap, "lat-delete")
    for future in admin.delete_records([KafkaTP(TOPIC, p, e) for p, e in ends.items()]).values():
        future.result(timeout=30)
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat-starts"})
    try:
        starts = {p: probe.get_watermark_offsets(KafkaTP(TOPIC, p), timeout=10)[0] for p in range(PARTITIONS)}
    finally:
        probe.close()
    assert starts == ends, "the broker still holds archived records"

    archive_env = {**local_stack.env(), "PROCESSOR_METADATA_TOPIC": META, "PROCESSOR_S3_PREFIX": PREFIX}
    gateway = loopback_gateway(archive_env, tmp / "gateway")
    with gateway_running(GatewayServer.build(gateway.settings)):
        yield Archived(archive_env, gateway.bootstrap, rows, times, consumer_answers, admin_answers)


def _first_at_or_after(rows: list[Row], partition: int, timestamp: int) -> Row:
    return next(r for r in rows if r[0] == partition and r[5] >= timestamp)


def test_fetch_by_timestamp_finds_and_returns_the_append_times(archived: Archived) -> None:
    """``processor fetch --timestamp`` and the Python API: the append time is what they search and return."""
    for p in range(PARTITIONS):
        mine = [r for r in archived.rows if r[0] == p]
        for t in (CREATED, mine[PER_ROUND][5], mine[3 * PER_ROUND][5] + 1):
            first = _first_at_or_after(archived.rows, p, t)
            result = run_cli(
                archived.env, "fetch", "--topic", TOPIC, "--partition", str(p), "--timestamp", str(t),
                "--max-records", str(PER_ROUND + 1), "--format", "jsonl",
            )  # fmt: skip
            assert result.returncode == 0, result.stderr
            got = [json.loads(line) for line in result.stdout.splitlines()]
            want = [r for r in mine if r[1] >= first[1]][: PER_ROUND + 1]
            assert [(g["offset"], g["timestamp"], g["timestamp_type"]) for g in got] == [
                (r[1], r[5], "LOG_APPEND_TIME") for r in want
            ], (p, t)

    side = open_read_side(load_settings(archived.env), TOPIC, None)
    try:
        for p in range(PARTITIONS):
            mine = [r for r in archived.rows if r[0] == p]
            for t in archived.times:
                tp = TopicPartition(TOPIC, p)
                if t > mine[-1][5]:  # past the partition's last append time: nothing, as from the broker
                    with pytest.raises(OffsetNotInRemoteError):
                        side.reader.read_from_timestamp(tp, t)
                    continue
                records = side.reader.read_from_timestamp(tp, t, max_records=len(mine))
                want = [r for r in mine if r[1] >= _first_at_or_after(archived.rows, p, t)[1]]
                assert [(r.offset, r.key, r.value, r.timestamp_type, r.timestamp) for r in records] == [
                    (r[1], r[2], r[3], TimestampType.LOG_APPEND_TIME, r[5]) for r in want
                ], (p, t)
    finally:
        side.close()


def test_offsets_for_times_through_the_gateway_are_what_the_broker_answered(archived: Archived) -> None:
    assert _consumer_offsets_for_times(archived.gateway, archived.times) == archived.consumer_answers
    assert _admin_offsets_for_times(archived.gateway, archived.times) == archived.admin_answers
    # and they are the append times' offsets, not the producers' (2023) times' ones
    for p in range(PARTITIONS):
        later = [r for r in archived.rows if r[0] == p][PER_ROUND]
        assert archived.consumer_answers[(p, later[5])] == later[1] > 0
        assert archived.consumer_answers[(p, CREATED + 5000)] == 0


def test_a_consumer_through_the_gateway_gets_the_brokers_append_times(archived: Archived) -> None:
    got = _read(archived.gateway, "lat-gateway")
    assert got == archived.rows
    assert TIMESTAMP_CREATE_TIME not in {r[4] for r in got}
