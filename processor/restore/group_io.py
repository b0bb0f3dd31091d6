"""Consumer group offsets read from the source cluster and committed on the target (admin API).

Committing through ``AlterConsumerGroupOffsets`` needs no group membership; Kafka refuses it while
the group has active members on the target (``UNKNOWN_MEMBER_ID``/``REBALANCE_IN_PROGRESS``), which is
reported as such: stop the group's consumers on the target first. A coordinator that is loading or
moving (``COORDINATOR_LOAD_IN_PROGRESS``, ``NOT_COORDINATOR``, ``COORDINATOR_NOT_AVAILABLE``: a broker
just started, as a new target often is) is asked again, up to ``ATTEMPTS`` times with a jittered,
doubling backoff, then reported like any other refusal.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Mapping
from typing import Any

from processor.errors import ProcessorError, ServiceUnavailableError
from processor.kafka.client_types import ConsumerGroupTopicPartitions, KafkaError, KafkaException, KafkaTP

log = logging.getLogger(__name__)

TIMEOUT_S = 30.0
ATTEMPTS = 8
BACKOFF_S = 0.2  # doubling per attempt, at most BACKOFF_MAX_S, with +-20 % jitter
BACKOFF_MAX_S = 5.0
# Written here (no retry library): the admin API hands back per-partition errors, not exceptions, and
# only these say that asking again can succeed.
_RETRIABLE = frozenset(
    {
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


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
    for attempt in range(1, ATTEMPTS + 1):
        futures = admin.alter_consumer_group_offsets([request], request_timeout=TIMEOUT_S)
        try:
            done = futures[group].result(timeout=TIMEOUT_S)
        except KafkaException as exc:
            error = exc.args[0]
            if error.code() in _RETRIABLE and attempt < ATTEMPTS:
                _wait(attempt, group, where, error.str())
                continue
            raise ProcessorError(
                f"committing offsets of group {group} on {where} failed: {error.str()} "
                "(a group with active consumers cannot be moved: stop them first)"
            ) from None
        failed = [tp for tp in done.topic_partitions or [] if tp.error is not None]
        if failed and all(tp.error.code() in _RETRIABLE for tp in failed) and attempt < ATTEMPTS:
            _wait(attempt, group, where, failed[0].error.str())
            continue
        break
    if failed:
        raise ProcessorError(
            f"group {group}: committing failed for "
            + ", ".join(f"{tp.topic}-{tp.partition}: {tp.error.str()}" for tp in failed)
        )


def _wait(attempt: int, group: str, where: str, reason: str) -> None:
    delay = min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (attempt - 1)) * random.uniform(0.8, 1.2)
    log.info(
        "group %s on %s: %s; committing again in %.1f s (attempt %d)", group, where, reason, delay, attempt
    )
    time.sleep(delay)
