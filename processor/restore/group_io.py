"""Consumer group offsets read from the source cluster and committed on the target (admin API).

Committing through ``AlterConsumerGroupOffsets`` needs no group membership; Kafka refuses it while
the group has active members on the target (``UNKNOWN_MEMBER_ID``/``REBALANCE_IN_PROGRESS``), which is
reported as such: stop the group's consumers on the target first.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from processor.errors import ProcessorError, ServiceUnavailableError

TIMEOUT_S = 30.0


def committed_offsets(admin: Any, where: str, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets on ``topic`` (partitions without one are left out)."""
    futures = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group)], request_timeout=TIMEOUT_S
    )
    try:
        listed = futures[group].result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise ServiceUnavailableError(f"reading the offsets of group {group} on {where}: {exc}") from None
    return {
        tp.partition: tp.offset
        for tp in listed.topic_partitions or []
        if tp.topic == topic and tp.offset >= 0 and tp.error is None
    }


def commit_offsets(admin: Any, where: str, group: str, topic: str, offsets: Mapping[int, int]) -> None:
    if not offsets:
        return
    request = ConsumerGroupTopicPartitions(group, [KafkaTP(topic, p, o) for p, o in sorted(offsets.items())])
    futures = admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)
    try:
        done = futures[group].result(timeout=TIMEOUT_S)
    except KafkaException as exc:
        raise ProcessorError(
            f"committing offsets of group {group} on {where} failed: {exc.args[0].str()} "
            "(a group with active consumers cannot be moved: stop them first)"
        ) from None
    failed = [tp for tp in done.topic_partitions or [] if tp.error is not None]
    if failed:
        raise ProcessorError(
            f"group {group}: committing failed for "
            + ", ".join(f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in failed)
        )
