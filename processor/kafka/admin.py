"""Topic administration and the broker check, on an admin client :mod:`processor.kafka.clients` built.

The broker check every command starts with (:func:`check_broker`: unreachable, refused, or a
credential refused, with librdkafka's reason), the partition counts, topic ids (KIP-516) and high
watermarks the roles ask for, the topics the processor creates (:func:`ensure_topic`: the
replication and ``min.insync.replicas`` it picks, and what a cluster's refusal of a setting means);
the permissions a role lacks are asked in :mod:`processor.kafka.permission_check`.
"""

from __future__ import annotations

import collections
import logging
import random
import time
import uuid

from confluent_kafka import KafkaError, KafkaException, TopicCollection
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    ConfigResource,
    NewTopic,
    OffsetSpec,
)

from processor.errors import ConfigError, ServiceUnavailableError, TopicIdUnknownError
from processor.kafka.clients import KafkaTarget, connection, new_admin
from processor.kafka.partition import TopicPartition
from processor.kafka.rdkafka_log import RDKAFKA_FOLD, reasons_logger, refusing_brokers

log = logging.getLogger(__name__)
# DescribeTopics errors that mean "this topic does not exist" (every other error is unknown)
NO_SUCH_TOPIC = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError.UNKNOWN_TOPIC_ID, KafkaError._UNKNOWN_TOPIC}
)

# librdkafka error codes that say why a broker refused us, most telling first.
_REFUSALS = (
    "_AUTHENTICATION",
    "_SSL",
    "SASL_AUTHENTICATION_FAILED",
    "FAIL",
    "_TRANSPORT",
    "_ALL_BROKERS_DOWN",
)
_FINAL_REFUSALS = ("_AUTHENTICATION", "_SSL", "SASL_AUTHENTICATION_FAILED")

# How long a command waits for a broker to answer before it reports the cluster unreachable: a
# broker that is starting (or restarting) gets this long; a refused credential ends the wait at once.
BROKER_CHECK_TIMEOUT_S = 10.0
# How long every bootstrap address may refuse the TCP connection (nothing listens there: a wrong port
# or host, a broker that is down) before a command says so: a broker just starting gets this long.
BROKER_REFUSED_S = 1.0
_CHECK_POLL_S = 0.25


def check_broker(
    target: KafkaTarget, timeout_s: float | None = None, refused_s: float | None = None
) -> AdminClient:
    """Fail fast with a clear error when no broker answers (within ``timeout_s``, default
    BROKER_CHECK_TIMEOUT_S), every bootstrap address refuses the connection (for ``refused_s``,
    default BROKER_REFUSED_S, or ``timeout_s`` when that was given: a caller waiting for a broker to
    restart), or the broker refuses our credentials (at once).

    The error names the broker and how we authenticate (protocol, mechanism, user, client
    certificate), with librdkafka's reason (a rejected password, an untrusted certificate), and
    never a secret's value.
    """
    conn = connection(target)
    seen: collections.deque[tuple[str, str]] = collections.deque(maxlen=20)
    admin = new_admin(
        conn,
        "processor-check",
        error_cb=lambda err: seen.append((err.name(), err.str())),
        # librdkafka's FAIL lines (info level) say why a connection dropped, e.g. a broker that
        # wants a client certificate closing the TLS session: kept as reasons, not printed.
        logger=reasons_logger(seen),
        log_level=6,
    )
    started = time.monotonic()
    deadline = started + (BROKER_CHECK_TIMEOUT_S if timeout_s is None else timeout_s)
    if refused_s is None:
        refused_s = BROKER_REFUSED_S if timeout_s is None else timeout_s
    addresses = len([a for a in conn.bootstrap_servers.split(",") if a.strip()])
    while True:
        try:
            admin.list_topics(timeout=min(_CHECK_POLL_S, max(0.05, deadline - time.monotonic())))
            break
        except KafkaException as exc:
            admin.poll(0)  # serves error_cb: the reason (authentication, TLS) arrives there
            # A refused credential or certificate is final: no point waiting out the timeout.
            final = any(name in _FINAL_REFUSALS for name, _ in seen)
            refused = len(refusing_brokers(seen)) >= addresses
            if refused and time.monotonic() - started >= refused_s:
                RDKAFKA_FOLD.flush()
                raise ServiceUnavailableError(
                    f"Kafka broker at {conn.bootstrap_servers} is unreachable: every connection was "
                    f"refused for {refused_s:.1f} s (nothing listens there, or the broker is down; "
                    "PROCESSOR_BOOTSTRAP_SERVERS)"
                ) from None
            if not final and time.monotonic() < deadline:
                continue
            reasons = sorted(
                seen, key=lambda e: _REFUSALS.index(e[0]) if e[0] in _REFUSALS else len(_REFUSALS)
            )
            reason = reasons[0][1] if reasons else str(exc.args[0])
            RDKAFKA_FOLD.flush()  # the count of the folded FAIL lines, before the error that ends it
            raise ServiceUnavailableError(
                f"Kafka broker at {conn.bootstrap_servers} is unreachable or refused the connection "
                f"({conn.security.describe()}; PROCESSOR_BOOTSTRAP_SERVERS and the security settings): "
                f"{conn.security.redact(reason)}"
            ) from None
    return admin


def broker_group_session_bounds(admin: AdminClient, timeout_s: float = 10.0) -> tuple[int, int] | None:
    """A broker's ``group.min.session.timeout.ms`` and ``group.max.session.timeout.ms``, or None where
    they cannot be read (a principal without DescribeConfigs on the cluster, a broker that does not
    list them): then nothing is known, and nothing is checked."""
    try:
        brokers = admin.list_topics(timeout=timeout_s).brokers
        if not brokers:
            return None
        resource = ConfigResource(ConfigResource.Type.BROKER, str(min(brokers)))
        described = admin.describe_configs([resource])[resource].result(timeout=timeout_s)
    except KafkaException as exc:
        log.info("the broker's group session bounds could not be read (%s): not checked", exc)
        return None
    low, high = described.get("group.min.session.timeout.ms"), described.get("group.max.session.timeout.ms")
    if low is None or high is None or low.value is None or high.value is None:
        return None
    return int(low.value), int(high.value)


def partition_counts(admin: AdminClient, topics: list[str], timeout_s: float = 10.0) -> dict[str, int]:
    md = admin.list_topics(timeout=timeout_s)
    out: dict[str, int] = {}
    for name in topics:
        t = md.topics.get(name)
        if t is not None and t.error is None:
            out[name] = len(t.partitions)
    return out


# Replication of the topics the processor creates when no factor is configured: min(3, brokers), the
# managed services' requirement (Confluent Cloud accepts only 3) and 1 on a single-broker dev cluster.
MAX_DEFAULT_REPLICATION = 3
# CreateTopics errors that are the cluster refusing a setting (a policy, a factor it does not allow,
# a config it rejects): never retried, turned into a ConfigError naming the setting and the variable.
_REFUSALS_AT_CREATION = frozenset(
    {
        KafkaError.POLICY_VIOLATION,
        KafkaError.INVALID_REPLICATION_FACTOR,
        KafkaError.INVALID_CONFIG,
        KafkaError.INVALID_PARTITIONS,
        KafkaError.INVALID_REPLICA_ASSIGNMENT,
    }
)


def replication_for(brokers: int, explicit: int | None) -> int:
    """The replication factor of a topic the processor creates: ``explicit`` when configured, else
    min(3, ``brokers``) (at least 1)."""
    if explicit is not None:
        return explicit
    return max(1, min(MAX_DEFAULT_REPLICATION, brokers))


def min_insync_for(replication: int) -> int | None:
    """``min.insync.replicas`` for a topic created with ``replication``: factor-1 from a factor of 3
    (2 for 3: a write survives one broker down, and one more restart does not stop writes), else
    None (the broker's default). Never above factor-1, which would stop every write while a single
    replica is down."""
    return replication - 1 if replication >= MAX_DEFAULT_REPLICATION else None


def creation_config(config: dict[str, str], replication: int) -> dict[str, str]:
    """``config`` plus ``min.insync.replicas`` (:func:`min_insync_for`), as sent at creation only;
    a value given in ``config`` is kept, lowered to factor-1 if above it."""
    out = dict(config)
    wanted = min_insync_for(replication)
    given = out.get("min.insync.replicas")
    if given is None:
        if wanted is not None:
            out["min.insync.replicas"] = str(wanted)
    elif replication >= 2 and given.isdigit() and int(given) > replication - 1:
        out["min.insync.replicas"] = str(replication - 1)
    return out


def broker_count(admin: AdminClient, timeout_s: float = 10.0) -> int:
    """How many brokers the cluster has: DescribeCluster, or the metadata's broker list on a broker
    that does not answer it."""
    try:
        described = admin.describe_cluster(request_timeout=timeout_s).result(timeout=timeout_s)
        nodes = len(described.nodes or [])
    except (KafkaException, TimeoutError) as exc:
        log.debug("DescribeCluster failed (%s); counting the brokers in the metadata", exc)
        nodes = 0
    if nodes:
        return nodes
    return len(admin.list_topics(timeout=timeout_s).brokers)


def cluster_replication(target: KafkaTarget, explicit: int | None, timeout_s: float = 10.0) -> int:
    """:func:`replication_for` on the cluster at ``target`` (asked only when ``explicit`` is None).
    Raises ServiceUnavailableError when the cluster cannot be asked."""
    if explicit is not None:
        return explicit
    try:
        brokers = broker_count(new_admin(target, "processor-admin"), timeout_s)
    except KafkaException as exc:
        raise ServiceUnavailableError(
            f"cannot count the brokers of {connection(target).describe()} (for the replication factor "
            f"of the topics the processor creates; or set PROCESSOR_METADATA_REPLICATION_FACTOR): "
            f"{exc.args[0]}"
        ) from None
    return replication_for(brokers, None)


def _refused_setting(
    code: int, reason: str, partitions: int, replication: int, config: dict[str, str]
) -> list[tuple[str, str]]:
    """The settings of a refused CreateTopics the broker's answer points at (all when unclear)."""
    if code == KafkaError.INVALID_REPLICATION_FACTOR:
        return [("replication.factor", str(replication))]
    if code == KafkaError.INVALID_PARTITIONS:
        return [("partitions", str(partitions))]
    said = reason.lower()
    named = [(key, value) for key, value in config.items() if key.lower() in said]
    if named:
        return named
    if "replica" in said:  # "replication factor", "replication.factor", "replicas"
        return [("replication.factor", str(replication))]
    if "partition" in said:
        return [("partitions", str(partitions))]
    return [("replication.factor", str(replication)), ("partitions", str(partitions)), *config.items()]


def creation_refused_message(
    err: KafkaError,
    what: str,
    name: str,
    partitions: int,
    replication: int,
    config: dict[str, str],
    variables: dict[str, str],
) -> str:
    """The error of a topic creation the cluster refused: the topic, the refused setting and its
    value, the broker's reason, and the variable that sets it (``variables``: setting -> variable)."""
    reason = err.str()
    refused = _refused_setting(err.code(), reason, partitions, replication, config)
    shown = ", ".join(f"{key}={value}" for key, value in refused)
    to_set = sorted({variables[key] for key, _ in refused if key in variables})
    if to_set:
        advice = f"set {' / '.join(to_set)} to a value the cluster's policy allows"
        if any(key in ("replication.factor", "min.insync.replicas") for key, _ in refused):
            advice += " (Confluent Cloud accepts only replication factor 3)"
    else:
        advice = "the processor needs this setting: ask the cluster's administrator to allow it"
    return (
        f"the cluster refused to create {what} {name} with {shown} ({err.name()}: {reason}); "
        f"{advice}, or create the topic beforehand"
    )


def ensure_topic(
    admin: AdminClient,
    name: str,
    partitions: int,
    replication: int | None,
    config: dict[str, str],
    timeout_s: float = 15.0,
    *,
    what: str = "topic",
    variables: dict[str, str] | None = None,
) -> bool:
    """Create ``name`` if missing; returns True if it was created. Warns when an existing config differs.

    ``replication`` None is :func:`replication_for` the cluster's broker count; -1 the broker's
    default. A known factor of 3 or more also sets ``min.insync.replicas`` (:func:`creation_config`),
    at creation only. A creation the cluster refuses (a policy, an invalid factor or config) raises
    ConfigError naming the setting and, from ``variables`` (setting -> variable), what to set."""
    if name in partition_counts(admin, [name], timeout_s):
        try:
            described = admin.describe_configs([ConfigResource("topic", name)])
            current = next(iter(described.values())).result(timeout=timeout_s)
            for key, wanted in config.items():
                have = current.get(key)
                if have is not None and have.value != wanted:
                    log.warning(
                        "topic %s has %s=%s; this processor expects %s", name, key, have.value, wanted
                    )
        except KafkaException as exc:
            log.warning("could not read the configuration of topic %s: %s", name, exc)
        return False
    factor = replication_for(broker_count(admin, timeout_s), None) if replication is None else replication
    sent = creation_config(config, factor) if factor > 0 else dict(config)
    log.info(
        "creating %s %s: %d partitions, replication factor %s%s",
        what,
        name,
        partitions,
        factor if factor > 0 else "(the broker's default)",
        " (from the cluster's brokers)" if replication is None else "",
    )
    futures = admin.create_topics([NewTopic(name, partitions, factor, config=sent)])
    try:
        futures[name].result(timeout=timeout_s)
    except KafkaException as exc:
        err = exc.args[0]
        if not isinstance(err, KafkaError) or err.code() != KafkaError.TOPIC_ALREADY_EXISTS:
            if isinstance(err, KafkaError) and err.code() in _REFUSALS_AT_CREATION:
                raise ConfigError(
                    creation_refused_message(err, what, name, partitions, factor, sent, variables or {})
                ) from None
            raise
    return True


def topic_ids(
    admin: AdminClient,
    topics: list[str],
    timeout_s: float = 10.0,
    *,
    attempts: int = 3,
    backoff_s: float = 0.5,
    absent: set[str] | None = None,
) -> dict[str, str]:
    """The broker's topic id of each existing topic in ``topics``, as an RFC 4122 string.

    A topic deleted and re-created under the same name gets a new id (KIP-516), which is how a new
    partition history is told from the old one. Topics the broker says do not exist
    (UNKNOWN_TOPIC_OR_PART, UNKNOWN_TOPIC_ID) are left out, and added to ``absent`` when given; a
    broker that reports no ids (all-zero) leaves the topic out too, but not in ``absent``.

    Any other failure (a timeout, the connection, authorization ...) is never taken for "no such
    topic": the topics it hit are asked again, ``attempts`` times in all with a jittered exponential
    backoff from ``backoff_s``, and then :class:`TopicIdUnknownError` names them (with the ids
    read meanwhile for the others).
    """
    if not topics:
        return {}
    out: dict[str, str] = {}
    pending = sorted(set(topics))
    failed: dict[str, str] = {}
    # Hand-written: no retry library is among the dependencies, and a bounded jittered loop over the
    # topics still failing is a few lines (the same shape as processor/metadata/read_to_end.py).
    delay = backoff_s
    for attempt in range(1, max(1, attempts) + 1):
        failed = {}
        try:
            futures = admin.describe_topics(TopicCollection(pending), request_timeout=timeout_s)
        except KafkaException as exc:
            futures = {}
            failed = {name: str(exc.args[0]) for name in pending}
        for name, future in futures.items():
            try:
                described = future.result(timeout=timeout_s)
            except KafkaException as exc:
                err = exc.args[0]
                if isinstance(err, KafkaError) and err.code() in NO_SUCH_TOPIC:
                    log.debug("topic %s does not exist: %s", name, err)
                    if absent is not None:
                        absent.add(name)
                else:
                    failed[name] = str(err)
                continue
            except TimeoutError:  # the future itself (concurrent.futures) did not complete in time
                failed[name] = f"no answer within {timeout_s:g} s"
                continue
            raw = getattr(described, "topic_id", None)
            if raw is None:
                continue
            msb, lsb = raw.get_most_significant_bits(), raw.get_least_significant_bits()
            value = ((msb & (2**64 - 1)) << 64) | (lsb & (2**64 - 1))
            if value:
                out[name] = str(uuid.UUID(int=value))
        if not failed:
            return out
        pending = sorted(failed)
        log.warning(
            "describing topics %s failed (attempt %d of %d): %s",
            pending,
            attempt,
            attempts,
            "; ".join(sorted(set(failed.values()))),
        )
        if attempt < attempts:
            time.sleep(delay * random.uniform(0.8, 1.2))
            delay *= 2
    raise TopicIdUnknownError(
        pending, f"{'; '.join(sorted(set(failed.values())))} (after {max(1, attempts)} attempts)", out
    )


def latest_offsets(
    admin: AdminClient, tps: list[TopicPartition], timeout_s: float
) -> dict[TopicPartition, int]:
    """The high watermark of each partition in ``tps`` (ListOffsets "latest", one request per
    partition leader). A partition whose leader answers with an error is left out (and logged at
    debug); when none answers, the first errors are raised as a KafkaException-carrying RuntimeError."""
    latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
    futures = admin.list_offsets(
        {KafkaTP(tp.topic, tp.partition): latest for tp in tps}, request_timeout=timeout_s
    )
    answers: dict[TopicPartition, int] = {}
    errors: list[str] = []
    for ktp, future in futures.items():
        tp = TopicPartition(ktp.topic, ktp.partition)
        try:
            answers[tp] = int(future.result(timeout=timeout_s).offset)
        except KafkaException as exc:  # this partition's leader moving, the topic deleted ...
            errors.append(f"{tp}: {exc}")
    if errors and not answers:
        raise RuntimeError("; ".join(errors[:5]))
    if errors:
        log.debug("high watermarks missing for %d partitions: %s", len(errors), "; ".join(errors[:5]))
    return answers


def topic_config(admin: AdminClient, topic: str, timeout_s: float = 10.0) -> dict[str, str | None]:
    """The configuration the broker describes for ``topic`` (DescribeConfigs), key -> value.

    Apache Kafka lists every key, its defaults included; Tansu lists only the keys set on the topic,
    so a key left out is the broker's default. Raises KafkaException."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    futures = admin.describe_configs([resource], request_timeout=timeout_s)
    entries = futures[resource].result(timeout=timeout_s)
    return {name: entry.value for name, entry in entries.items()}


def set_topic_config(admin: AdminClient, topic: str, key: str, value: str, timeout_s: float = 10.0) -> None:
    """Set one configuration key of ``topic`` (IncrementalAlterConfigs, SET): every other key stays as
    it is, where the non-incremental AlterConfigs would reset the keys it is not given. Raises
    KafkaException (not authorised, refused by the broker's policy, an unsupported request)."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AlterConfigOpType,
        ConfigEntry,
    )

    entry = ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    futures = admin.incremental_alter_configs([resource], request_timeout=timeout_s)
    futures[resource].result(timeout=timeout_s)
