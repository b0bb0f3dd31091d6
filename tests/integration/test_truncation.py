"""The moment the project exists for, on Apache Kafka: the broker drops offsets the worker archived
(DeleteRecords on one partition, then ``retention.ms`` on 1 MiB segments on both), and unmodified
consumers of five kinds read the topic from offset 0 to its end through the gateway in its default
``below-log-start`` mode: every record once, in order, byte-exact, in a group that commits.

One archive for the module: a worker offloads the topic and stops; the broker then truncates; records
produced after that are the broker's alone.
"""

from __future__ import annotations

import dataclasses
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    OffsetSpec,
)

from processor.devstack import stack
from processor.devstack.sample_data import SampleRecord, produce_samples, sample_record
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.wiring.gateway_server import GatewayServer
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.consumers import READERS, REPORTS_HEADERS, check_every_record_once, committed_offsets
from tests.support.gateway_thread import gateway_running, loopback_gateway
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "trunc-orders"
PARTITIONS = 2
ARCHIVED = 4000  # ~1.6 MB a partition: two 1 MiB segments, the first closed
TAIL = 300  # produced after the truncation, stamped now: the broker's alone
DELETED_TO = 1200  # partition 0's log start after DeleteRecords
META = "__remote_log_metadata_trunc"
PREFIX = "trunc"
SEGMENT_BYTES = 1024 * 1024  # Kafka 4's smallest segment.bytes


@dataclass
class Truncated:
    bootstrap: str  # the gateway
    web: str
    direct: str  # the broker
    by_partition: dict[int, list[SampleRecord]]
    log_start: dict[int, int]  # the broker's log start after the truncation


def _log_starts(bootstrap: str) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "trunc-watermarks"})
    try:
        return {
            p: int(consumer.get_watermark_offsets(KafkaTP(TOPIC, p), timeout=10)[0])
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def _produce_fresh(bootstrap: str, start: int, count: int) -> list[SampleRecord]:
    """Sample records stamped with the current time (not the samples' own 2023 timestamps)."""
    now = int(time.time() * 1000)
    records = [
        dataclasses.replace(sample_record(i, PARTITIONS, big_every=0), timestamp=now + i)
        for i in range(start, start + count)
    ]
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5})
    for r in records:
        producer.produce(
            TOPIC, value=r.value, key=r.key, partition=r.partition, headers=list(r.headers) or None,
            timestamp=r.timestamp,
        )  # fmt: skip
    assert producer.flush(60) == 0, "records not delivered"
    return records


def _set_topic_configs(bootstrap: str, **configs: str) -> None:
    admin = new_admin(bootstrap, "trunc-config")
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        TOPIC,
        incremental_configs=[
            ConfigEntry(name.replace("_", "."), value, incremental_operation=AlterConfigOpType.SET)
            for name, value in configs.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=30)


@pytest.fixture(scope="module")
def truncated(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Truncated]:
    if local_stack.broker != stack.KAFKA:
        pytest.skip("Tansu never moves a partition's log start: truncation needs Apache Kafka")
    tmp = tmp_path_factory.mktemp("truncation")
    bootstrap = local_stack.bootstrap_servers
    # kept while the worker archives (the sample records carry timestamps of 2023: Kafka's default
    # 7-day retention would delete each closed segment at once)
    topic_config = {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
    ensure_topic(new_admin(bootstrap, "t"), TOPIC, PARTITIONS, 1, topic_config)
    by_partition: dict[int, list[SampleRecord]] = {p: [] for p in range(PARTITIONS)}
    for r in produce_samples(
        bootstrap, TOPIC, ARCHIVED, PARTITIONS, big_every=10**9, producer_config={"batch.size": 16 * 1024}
    ):
        by_partition[r.partition].append(r)
    env = worker_env(
        local_stack,
        tmp / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_S3_PREFIX=PREFIX,
        PROCESSOR_SEGMENT_BYTES=str(256 * 1024),
        PROCESSOR_BLOCK_BYTES=str(32 * 1024),
        PROCESSOR_SEGMENT_MS="500",
    )
    ends = {TopicPartition(TOPIC, p): len(rs) - 1 for p, rs in by_partition.items()}
    worker = WorkerProcess(env, tmp / "worker.log")
    try:
        wait_offloaded(bootstrap, META, ends, 180, worker.proc)
    finally:
        worker.stop()
    # the broker drops what was archived: DeleteRecords on partition 0, then a day's retention on
    # both (every archived record is years old: its segments go, the active one rolled first)
    admin = new_admin(bootstrap, "trunc-delete")
    for future in admin.delete_records([KafkaTP(TOPIC, 0, DELETED_TO)]).values():
        future.result(timeout=30)
    assert _log_starts(bootstrap)[0] == DELETED_TO
    _set_topic_configs(bootstrap, retention_ms=str(24 * 3600 * 1000))
    deadline = time.monotonic() + 60
    while (log_start := _log_starts(bootstrap)) != {p: len(rs) for p, rs in by_partition.items()}:
        assert time.monotonic() < deadline, f"retention.ms deleted up to {log_start} only"
        time.sleep(0.5)  # polling the broker's retention pass (every second here)
    for r in _produce_fresh(bootstrap, ARCHIVED, TAIL):  # today's records: retention keeps them
        by_partition[r.partition].append(r)
    gateway = loopback_gateway(
        {**local_stack.env(), "PROCESSOR_METADATA_TOPIC": META, "PROCESSOR_S3_PREFIX": PREFIX},
        tmp / "gateway-data",
    )
    settings = gateway.settings
    assert settings.gateway_archive_reads == "below-log-start"  # the default, under test here
    with gateway_running(GatewayServer.build(settings)):
        yield Truncated(gateway.bootstrap, gateway.web, bootstrap, by_partition, log_start)


def _metric(web: str, name: str, **labels: str) -> float:
    text = urllib.request.urlopen(f"{web}/metrics", timeout=10).read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items())
    )


def test_the_broker_itself_no_longer_has_the_first_offsets(truncated: Truncated) -> None:
    """What a consumer of the broker alone gets: the partitions from their new log start."""
    starts = _log_starts(truncated.direct)
    assert starts == truncated.log_start and all(s > 0 for s in starts.values())
    got = READERS["confluent-kafka"](truncated.direct, "trunc-direct", TOPIC, TAIL)
    assert {p: min(g[1] for g in got if g[0] == p) for p in range(PARTITIONS)} == truncated.log_start


@pytest.mark.parametrize("client", list(READERS))
def test_a_consumer_reads_what_the_broker_deleted_through_the_gateway(
    truncated: Truncated, client: str
) -> None:
    before = _metric(truncated.web, "processor_gateway_fetch_records_total", topic=TOPIC, source="archive")
    want = sum(len(rs) for rs in truncated.by_partition.values())
    group = f"trunc-{client}"
    got = READERS[client](truncated.bootstrap, group, TOPIC, want)
    check_every_record_once(got, truncated.by_partition, client, headers=REPORTS_HEADERS[client])
    served = _metric(truncated.web, "processor_gateway_fetch_records_total", topic=TOPIC, source="archive")
    assert served - before >= sum(truncated.log_start.values()), "the deleted offsets came from the archive"
    # the group's commits reached the broker through the gateway: each partition at its end
    offsets = committed_offsets(truncated.direct, group, TOPIC, PARTITIONS)
    assert offsets == {p: len(rs) for p, rs in truncated.by_partition.items()}


def _first_at_or_after(records: list[SampleRecord], timestamp: int) -> int:
    """The offset ListOffsets answers for ``timestamp``: the first whose timestamp is >= it."""
    return next(offset for offset, r in enumerate(records) if r.timestamp >= timestamp)


def test_offsets_by_time_through_the_gateway_are_the_archives_below_the_log_start_the_brokers_above(
    truncated: Truncated,
) -> None:
    through = Consumer({"bootstrap.servers": truncated.bootstrap, "group.id": "trunc-times"})
    direct = Consumer({"bootstrap.servers": truncated.direct, "group.id": "trunc-times"})
    try:
        for p, records in truncated.by_partition.items():
            start = truncated.log_start[p]
            for timestamp in (records[start // 3].timestamp, records[(2 * start) // 3].timestamp + 1):
                found = through.offsets_for_times([KafkaTP(TOPIC, p, timestamp)], timeout=15)[0]
                assert found.offset == _first_at_or_after(records, timestamp), (p, timestamp)
            live = records[start + TAIL // PARTITIONS // 2].timestamp
            asked = [KafkaTP(TOPIC, p, live)]
            ours = through.offsets_for_times(asked, timeout=15)[0].offset
            assert (
                ours
                == direct.offsets_for_times(asked, timeout=15)[0].offset
                == _first_at_or_after(records, live)
            )
    finally:
        through.close()
        direct.close()

    # the latest timestamp (KIP-734) is the live tail's, through the gateway as from the broker
    def max_timestamps(bootstrap: str) -> dict[int, tuple[int, int]]:
        admin = new_admin(bootstrap, "trunc-max-ts")
        asked = {KafkaTP(TOPIC, p): OffsetSpec.max_timestamp() for p in range(PARTITIONS)}  # type: ignore[no-untyped-call]
        answers = {tp.partition: f.result(timeout=15) for tp, f in admin.list_offsets(asked).items()}
        return {p: (a.offset, a.timestamp) for p, a in answers.items()}

    assert max_timestamps(truncated.bootstrap) == max_timestamps(truncated.direct)
