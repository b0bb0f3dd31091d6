"""The permissions a role lacks on a cluster, as the broker answers them (:func:`missing_permissions`):
the authorized operations of Metadata and DescribeGroups, and a CreateTopics that only validates, so
nothing is created and no ACL needs to be read (DescribeAcls is not needed). ``processor config
--check --connect`` names each missing one with what it is for."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclOperation,
    AdminClient,
    NewTopic,
)

from processor.kafka.admin import NO_SUCH_TOPIC

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Permission:
    """What a role needs on one Kafka resource: ``operations`` are ACL operation names (``READ``,
    ``DESCRIBE_CONFIGS`` ...); a topic the role creates when it is missing (``created_if_missing``)
    needs ``CREATE`` only then."""

    resource: str  # "topic" or "group"
    name: str
    operations: tuple[str, ...]
    what_for: str
    created_if_missing: bool = False


@dataclass(frozen=True, slots=True)
class MissingPermission:
    need: Permission
    operations: tuple[str, ...]  # of ``need.operations`` (and CREATE), in its order

    def describe(self) -> str:
        """ "Write, AlterConfigs on topic T (what it is for)"."""
        ops = ", ".join(operation_name(op) for op in self.operations)
        return f"{ops} on {self.need.resource} {self.need.name} ({self.need.what_for})"


def operation_name(op: str) -> str:
    """An ACL operation as Kafka's docs and kafka-acls write it: ``DESCRIBE_CONFIGS`` -> DescribeConfigs."""
    return "".join(part.capitalize() for part in op.split("_"))


# Operations Kafka grants along with others (an ACL for the first implies the second): a principal
# refused Describe has none of the operations that imply it.
_IMPLIES_DESCRIBE = frozenset({"READ", "WRITE", "DELETE", "ALTER", "DESCRIBE"})
# Answers that mean "ask again" (a group coordinator loading or moving)
_COORDINATOR_RETRIABLE = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
    }
)


def _names(ops: Iterable[AclOperation] | None) -> frozenset[str] | None:
    return None if ops is None else frozenset(op.name for op in ops)


def _code(exc: KafkaException) -> int | None:
    err = exc.args[0] if exc.args else None
    return err.code() if isinstance(err, KafkaError) else None


def missing_permissions(
    admin: AdminClient, needs: list[Permission], timeout_s: float = 10.0
) -> tuple[list[MissingPermission], list[str]]:
    """What of ``needs`` the principal ``admin`` connects as lacks, as the broker answers it:
    (missing permissions, notes on what could not be checked). Nothing is created.

    A topic's and a group's operations are the authorized operations the broker returns in
    Metadata (``include_topic_authorized_operations``) and DescribeGroups; a topic refused Describe
    lacks every operation that implies it; Create on a missing topic the role creates is asked with
    a CreateTopics that only validates. A broker that returns no authorized operations (Describe
    missing from an answer it gave) is noted, never taken for a refusal."""
    notes: list[str] = []
    topics = list(dict.fromkeys(n.name for n in needs if n.resource == "topic"))
    answers: dict[str, frozenset[str] | int | None] = {}
    if topics:
        futures = admin.describe_topics(
            TopicCollection(topics),
            include_authorized_operations=True,
            request_timeout=timeout_s,
        )
        for name, future in futures.items():
            try:
                answers[name] = _names(future.result(timeout=timeout_s).authorized_operations)
            except KafkaException as exc:
                answers[name] = _code(exc)
            except TimeoutError:
                answers[name] = None
    lacks: dict[int, list[str]] = {}  # index in needs -> the operations it lacks
    to_create: list[int] = []
    for i, need in enumerate(needs):
        if need.resource != "topic":
            continue
        answer = answers.get(need.name)
        if isinstance(answer, frozenset) and "DESCRIBE" in answer:
            lacks[i] = [op for op in need.operations if op != "CREATE" and op not in answer]
        elif answer == KafkaError.TOPIC_AUTHORIZATION_FAILED:  # missing or not, it cannot be described
            lacks[i] = [op for op in need.operations if op in _IMPLIES_DESCRIBE]
            if need.created_if_missing:
                to_create.append(i)
        elif answer in NO_SUCH_TOPIC:
            if need.created_if_missing:
                to_create.append(i)
                later = ", ".join(operation_name(o) for o in need.operations if o != "CREATE")
                notes.append(
                    f"topic {need.name} does not exist yet (the worker creates it): Create is checked, "
                    f"{later} once it exists"
                )
        else:
            notes.append(f"topic {need.name}: the broker did not say what this principal may do: not checked")
    for i in _create_refused(admin, [needs[i].name for i in to_create], timeout_s):
        lacks.setdefault(to_create[i], []).insert(0, "CREATE")
    for i, need in enumerate(needs):
        if need.resource == "group":
            lacks[i] = _group_lacks(admin, need, timeout_s, notes)
    missing = [MissingPermission(needs[i], tuple(ops)) for i, ops in sorted(lacks.items()) if ops]
    return missing, notes


def _create_refused(admin: AdminClient, topics: list[str], timeout_s: float) -> list[int]:
    """Which of ``topics`` (their indexes) the broker refuses to let this principal create, asked
    with a CreateTopics that only validates: nothing is created."""
    if not topics:
        return []
    futures = admin.create_topics(
        [NewTopic(name, 1, -1) for name in topics], validate_only=True, request_timeout=timeout_s
    )
    refused = []
    for i, name in enumerate(topics):
        try:
            futures[name].result(timeout=timeout_s)
        except KafkaException as exc:
            if _code(exc) in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                refused.append(i)
            else:  # it exists already (but cannot be described), a policy ...: not a permission
                log.debug("validating the creation of %s: %s", name, exc)
        except TimeoutError:
            log.debug("validating the creation of %s: no answer within %g s", name, timeout_s)
    return refused


def _group_lacks(admin: AdminClient, need: Permission, timeout_s: float, notes: list[str]) -> list[str]:
    deadline = time.monotonic() + timeout_s
    while True:
        future = admin.describe_consumer_groups(
            [need.name], include_authorized_operations=True, request_timeout=timeout_s
        )[need.name]
        try:
            ops = _names(future.result(timeout=timeout_s).authorized_operations)
        except KafkaException as exc:
            code = _code(exc)
            if code == KafkaError.GROUP_AUTHORIZATION_FAILED:  # no Describe: nothing that implies it
                return [op for op in need.operations if op in _IMPLIES_DESCRIBE]
            if code in _COORDINATOR_RETRIABLE and time.monotonic() < deadline:
                time.sleep(0.5)
                continue
            notes.append(f"group {need.name}: not checked ({exc.args[0]})")
            return []
        except TimeoutError:
            notes.append(f"group {need.name}: no answer within {timeout_s:g} s: not checked")
            return []
        if ops is None or "DESCRIBE" not in ops:
            notes.append(f"group {need.name}: the broker did not say what this principal may do: not checked")
            return []
        return [op for op in need.operations if op not in ops]
