"""Read a whole partition's log as record batches, markers included (aiokafka's low-level client).

confluent-kafka never shows transaction markers or producer ids, and a read_committed fetch can stop
at another producer's open transaction, so the restore reads its progress partition, and the tests
read restored partitions, as raw batches from offset 0 (read_uncommitted) up to the high watermark
seen by the first fetch, and resolves transactions from the markers
(:mod:`processor.restore.transaction_view`). No wire protocol is written here: the requests are
kio's encodings of Kafka's message schemas (:mod:`processor.restore.requests`), carried by aiokafka's
client.
"""

from __future__ import annotations

import asyncio
import random

from aiokafka import errors as kafka_errors
from aiokafka.client import AIOKafkaClient
from aiokafka.structs import TopicPartition as KafkaTP

from processor.errors import ServiceUnavailableError
from processor.kafka import wire
from processor.kafka.clients import KafkaTarget, aiokafka_client_kwargs, connection
from processor.kafka.partition import TopicPartition
from processor.kafka.security import KafkaConnection
from processor.restore import requests
from processor.segment.entries_v2 import BatchHeader, split_batches

READ_UNCOMMITTED = 0
EARLIEST = -2
LATEST = -1
FETCH_MAX_BYTES = 8 * 1024 * 1024
# The reader only fetches below the high watermark, where any broker answers as soon as it has the
# bytes (min_bytes 1), so a long wait costs nothing; a short one starves on Tansu, which answers a
# partition of a few hundred thousand batches with nothing when the wait is below its listing time.
FETCH_MAX_WAIT_MS = 5000
_RETRIES = 8


class _NothingYet(Exception):
    """An empty answer below the high watermark."""


_RETRIABLE = (
    _NothingYet,
    kafka_errors.NotLeaderForPartitionError,
    kafka_errors.LeaderNotAvailableError,
    kafka_errors.KafkaTimeoutError,
    kafka_errors.RequestTimedOutError,
    kafka_errors.KafkaConnectionError,
)


def read_partition_log(
    target: KafkaTarget, tp: TopicPartition, start: int = 0, last: int | None = None
) -> list[tuple[BatchHeader, memoryview]]:
    """The batches of ``tp`` holding offsets ``start..last`` (default: from the log start to the
    high watermark of the first answer). An unknown topic or partition reads as an empty log.
    ``start`` must be the base offset of a batch (or 0): Tansu answers a fetch from inside a batch
    with the batches after it, where Kafka includes the batch holding the offset."""
    return asyncio.run(_read(connection(target), tp, start, last))


async def _read(
    target: KafkaConnection, tp: TopicPartition, start: int, last: int | None
) -> list[tuple[BatchHeader, memoryview]]:
    client = AIOKafkaClient(client_id="processor-log-reader", **aiokafka_client_kwargs(target))
    try:
        await client.bootstrap()
    except (kafka_errors.KafkaError, OSError) as exc:
        await client.close()
        raise ServiceUnavailableError(f"Kafka at {target.describe()} is unreachable: {exc}") from None
    try:
        await client.add_topic(tp.topic)
        out: list[tuple[BatchHeader, memoryview]] = []
        position = start
        end: int | None = None
        failures = 0
        while end is None or position < end:
            try:
                try:
                    if end is None and await _list_offset(client, tp, LATEST) == position:
                        # nothing to read (a restore's new progress partition): asked first, as a
                        # fetch at the end would wait FETCH_MAX_WAIT_MS for bytes that never come
                        return []
                    records, high_watermark, log_start = await _fetch(client, tp, position)
                except kafka_errors.UnknownTopicOrPartitionError:
                    return []
                except kafka_errors.OffsetOutOfRangeError:
                    # below the log start (retention, compaction): begin there, once
                    earliest = await _list_offset(client, tp, EARLIEST)
                    if out or earliest <= position:
                        raise ServiceUnavailableError(f"{tp}: offset {position} is out of range") from None
                    position = earliest
                    continue
                if end is None:
                    end = high_watermark if last is None else min(high_watermark, last + 1)
                    position = max(position, log_start)
                got = [
                    (h, b)
                    for h, b in split_batches(records, where=f"fetch of {tp}")
                    if h.last_offset >= position and h.base_offset < end
                ]
                if not got and position < end:
                    # Tansu raises a partition's high watermark before it stores the batch
                    # (tansu-storage, dynostore produce): for a moment a fetch below the watermark
                    # can find nothing. Asked again, boundedly, like any transient error.
                    raise _NothingYet(f"nothing at offset {position}, below {end} (read from {start})")
            except _RETRIABLE as exc:
                failures += 1
                if failures > _RETRIES:
                    raise ServiceUnavailableError(f"reading {tp} keeps failing: {exc}") from None
                await client.force_metadata_update()
                await asyncio.sleep(min(0.1 * 2**failures, 5.0) * random.uniform(0.8, 1.2))
                continue
            failures = 0
            if not got:
                break
            out += got
            position = got[-1][0].last_offset + 1
        return out
    finally:
        await client.close()


async def _list_offset(client: AIOKafkaClient, tp: TopicPartition, which: int) -> int:
    """The log start (``EARLIEST``) or end (``LATEST``: the high watermark) of ``tp``."""
    node = client.cluster.leader_for_partition(KafkaTP(tp.topic, tp.partition))
    if node is None or node < 0:
        raise kafka_errors.LeaderNotAvailableError(str(tp))
    request = requests.list_offsets(READ_UNCOMMITTED, tp.topic, tp.partition, which)
    result = requests.list_offsets_result(await wire.send(client, node, request), tp.topic, tp.partition)
    if result is None:
        raise kafka_errors.UnknownTopicOrPartitionError(str(tp))
    error_code, offset = result
    error = kafka_errors.for_code(error_code)
    if error is not kafka_errors.NoError:
        raise error(str(tp))
    return offset


async def _fetch(client: AIOKafkaClient, tp: TopicPartition, position: int) -> tuple[bytes, int, int]:
    node = client.cluster.leader_for_partition(KafkaTP(tp.topic, tp.partition))
    if node is None:
        raise kafka_errors.UnknownTopicOrPartitionError(str(tp))
    if node < 0:
        raise kafka_errors.LeaderNotAvailableError(str(tp))
    request = requests.fetch(
        FETCH_MAX_WAIT_MS,
        1,
        FETCH_MAX_BYTES,
        READ_UNCOMMITTED,
        tp.topic,
        tp.partition,
        position,
        FETCH_MAX_BYTES,
    )
    result = requests.fetch_result(await wire.send(client, node, request), tp.topic, tp.partition)
    if result is None:
        raise kafka_errors.UnknownTopicOrPartitionError(str(tp))
    error_code, high_watermark, log_start, records = result
    error = kafka_errors.for_code(error_code)
    if error is not kafka_errors.NoError:
        raise error(str(tp))
    return records, high_watermark, log_start
