"""The Kafka requests the restore sends, and what it reads from their answers. Pure.

Encoded and decoded by ``kio`` (:mod:`processor.kafka.wire`), the codec the gateway uses: dataclasses
generated from Kafka's own message schemas, so no layout is written here, only which fields the
restore sets and reads. aiokafka's client carries them (connections, TLS and SASL, ApiVersions,
metadata).

The versions (:data:`RESTORE_VERSIONS`) are the ones the restore has always sent, the highest its
earlier codec (aiokafka's request classes and a hand-written InitProducerId v3) had, each as low as
the fields the restore needs allow: a transactional Produce needs v3, a read_uncommitted Fetch v4
(kio's lowest), ListOffsets from v1 (kio's lowest; v0 is Kafka 0.10.0's), FindCoordinator for a
transaction v1. InitProducerId is v3 where the broker has it (Kafka 2.5+; KIP-360: the first to take
a producer id and epoch, the first flexible one, KIP-482), else v0 (a new epoch only; Tansu answers
v0 with error -1). ``tests/unit/test_restore_wire.py`` holds each version's bytes.

The answers' error codes stay numbers here (``int``): :mod:`processor.restore.txn_wire` tells them apart.
"""

from __future__ import annotations

import datetime
from types import ModuleType
from typing import Any

from processor.kafka.api_keys import (
    API_ADD_PARTITIONS_TO_TXN,
    API_END_TXN,
    API_FETCH,
    API_FIND_COORDINATOR,
    API_INIT_PRODUCER_ID,
    API_LIST_OFFSETS,
    API_PRODUCE,
)
from processor.kafka.wire import KioRequest

RESTORE_VERSIONS: dict[int, tuple[int, ...]] = {
    API_FIND_COORDINATOR: (1,),
    API_INIT_PRODUCER_ID: (0, 3),
    API_ADD_PARTITIONS_TO_TXN: (0,),
    API_END_TXN: (0,),
    API_PRODUCE: tuple(range(3, 8)),
    API_FETCH: tuple(range(4, 12)),
    API_LIST_OFFSETS: tuple(range(1, 4)),
}

COORDINATOR_TRANSACTION = 1  # FindCoordinator's key type of a transaction coordinator
NO_REPLICA = -1  # a client's fetch or offset lookup, not a follower's


def _ms(value: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=value)


def _request(api_key: int, build: Any) -> KioRequest:
    return KioRequest(api_key, RESTORE_VERSIONS[api_key], build)


# -- the transaction coordinator ---------------------------------------------------------------------


def find_coordinator(transactional_id: str) -> KioRequest:
    def build(m: ModuleType, _version: int) -> Any:
        return m.FindCoordinatorRequest(key=transactional_id, key_type=COORDINATOR_TRANSACTION)

    return _request(API_FIND_COORDINATOR, build)


def init_producer_id(
    transactional_id: str, timeout_ms: int, producer_id: int = -1, epoch: int = -1
) -> KioRequest:
    """-1, -1: a new producer (the coordinator bumps the id's epoch and aborts its open transaction);
    else an epoch bump of the current one (v3 only)."""

    def build(m: ModuleType, version: int) -> Any:
        if version < 3:
            return m.InitProducerIdRequest(
                transactional_id=transactional_id, transaction_timeout=_ms(timeout_ms)
            )
        return m.InitProducerIdRequest(
            transactional_id=transactional_id,
            transaction_timeout=_ms(timeout_ms),
            producer_id=producer_id,
            producer_epoch=epoch,
        )

    return _request(API_INIT_PRODUCER_ID, build)


def add_partitions_to_txn(
    transactional_id: str, producer_id: int, epoch: int, topic: str, partition: int
) -> KioRequest:
    def build(m: ModuleType, _version: int) -> Any:
        return m.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=transactional_id,
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=(m.AddPartitionsToTxnTopic(name=topic, partitions=(partition,)),),
        )

    return _request(API_ADD_PARTITIONS_TO_TXN, build)


def end_txn(transactional_id: str, producer_id: int, epoch: int, commit: bool) -> KioRequest:
    def build(m: ModuleType, _version: int) -> Any:
        return m.EndTxnRequest(
            transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch, committed=commit
        )

    return _request(API_END_TXN, build)


def coordinator_error(answer: Any) -> int:
    """The first non-zero error code of a coordinator's answer (AddPartitionsToTxn answers per
    partition), else 0."""
    code = int(getattr(answer, "error_code", 0))
    if code:
        return code
    for topic in getattr(answer, "results_by_topic_v3_and_below", ()):
        for result in topic.results_by_partition:
            if result.partition_error_code:
                return int(result.partition_error_code)
    return 0


# -- the partition leaders ---------------------------------------------------------------------------


def produce(
    transactional_id: str, acks: int, timeout_ms: int, topic: str, partition: int, batch: bytes | bytearray
) -> KioRequest:
    """One record batch for one partition (Kafka takes one batch per partition in a request)."""

    def build(m: ModuleType, _version: int) -> Any:
        data = m.PartitionProduceData(index=partition, records=batch)
        return m.ProduceRequest(
            transactional_id=transactional_id,
            acks=acks,
            timeout=_ms(timeout_ms),
            topic_data=(m.TopicProduceData(name=topic, partition_data=(data,)),),
        )

    return _request(API_PRODUCE, build)


def produce_result(answer: Any, topic: str, partition: int) -> tuple[int, int] | None:
    """(error code, base offset) of the partition in a Produce answer; None if it is not named."""
    for topic_answer in answer.responses:
        if topic_answer.name != topic:
            continue
        for part in topic_answer.partition_responses:
            if part.index == partition:
                return int(part.error_code), int(part.base_offset)
    return None


def fetch(
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    isolation_level: int,
    topic: str,
    partition: int,
    offset: int,
    partition_max_bytes: int,
) -> KioRequest:
    """A fetch of one partition, outside any fetch session, its leader epoch not known."""

    def build(m: ModuleType, version: int) -> Any:
        wanted = m.FetchPartition(
            partition=partition, fetch_offset=offset, partition_max_bytes=partition_max_bytes
        )
        sessions = {"forgotten_topics_data": ()} if version >= 7 else {}  # v7+: fetch sessions (none)
        return m.FetchRequest(
            replica_id=NO_REPLICA,
            max_wait=_ms(max_wait_ms),
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation_level,
            topics=(m.FetchTopic(topic=topic, partitions=(wanted,)),),
            **sessions,
        )

    return _request(API_FETCH, build)


def fetch_result(answer: Any, topic: str, partition: int) -> tuple[int, int, int, bytes] | None:
    """(error code, high watermark, log start offset, record batches) of the partition in a Fetch
    answer (the log start is 0 before v5, which does not carry it); None if it is not named."""
    for topic_answer in answer.responses:
        if topic_answer.topic != topic:
            continue
        for part in topic_answer.partitions:
            if part.partition_index == partition:
                log_start = int(getattr(part, "log_start_offset", 0))
                return int(part.error_code), int(part.high_watermark), log_start, bytes(part.records or b"")
    return None


def list_offsets(isolation_level: int, topic: str, partition: int, timestamp: int) -> KioRequest:
    """The offset of ``timestamp`` in one partition (-2: the log start, -1: the end)."""

    def build(m: ModuleType, version: int) -> Any:
        wanted = m.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
        topics = (m.ListOffsetsTopic(name=topic, partitions=(wanted,)),)
        if version < 2:  # no isolation level before v2 (read_uncommitted)
            return m.ListOffsetsRequest(replica_id=NO_REPLICA, topics=topics)
        return m.ListOffsetsRequest(replica_id=NO_REPLICA, isolation_level=isolation_level, topics=topics)

    return _request(API_LIST_OFFSETS, build)


def list_offsets_result(answer: Any, topic: str, partition: int) -> tuple[int, int] | None:
    """(error code, offset) of the partition in a ListOffsets answer; None if it is not named."""
    for topic_answer in answer.topics:
        if topic_answer.name != topic:
            continue
        for part in topic_answer.partitions:
            if part.partition_index == partition:
                return int(part.error_code), int(part.offset)
    return None
