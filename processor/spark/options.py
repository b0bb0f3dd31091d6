"""The data sources' options, parsed and validated on the driver. Pure (no pyspark).

``tiered_records`` takes the options of Spark's own Kafka source with Spark's meaning
(``structured-streaming-kafka-integration``; the checks mirror ``KafkaSourceProvider``), plus the
few an archive needs (where the metadata topic and the bucket are, ``tail``). An option nobody
knows is an error that lists the supported ones; ``kafka.*`` settings pass through to the Kafka
clients the source creates (minus the few Spark refuses too). Connection options
(``kafka.bootstrap.servers``, ``metadata.topic``, ``s3.*``) fall back to the worker's
``PROCESSOR_*`` variables (processor/spark_sources/entry.py); the result is a small frozen value that
pickles to the executors. Where a read starts and ends: processor/spark/bounds.py; where it
connects: processor/spark/connection.py.

What the archive holds is what a ``read_committed`` consumer sees (the offloader reads that way):
``kafka.isolation.level=read_uncommitted`` is refused rather than answered with other rows.
"""

from __future__ import annotations

import logging
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.segment.object_keys import validate_topic
from processor.spark.bounds import (
    EARLIEST,
    EARLIEST_BOUND,
    LATEST,
    LATEST_BOUND,
    Bound,
    long_or,
    lowered_options,
    option,
    parse_bool,
    parse_bound,
    parse_json,
    parse_long,
    time_string_ms,
)
from processor.spark.connection import Connection

log = logging.getLogger(__name__)

DEFAULT_PARTITION_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_TRIGGER_DELAY_MS = 15 * 60 * 1000  # Spark's "15m"
DEFAULT_POLL_TIMEOUT_MS = 120_000  # spark.network.timeout's default
Mode = Literal["batch", "stream"]

# Every option tiered_records knows, with what it is (the error for an unknown option lists them;
# pyspark matches them case-insensitively). kafka.* settings are not listed: they pass through.
SUPPORTED_OPTIONS: dict[str, str] = {
    "subscribe": "comma-separated topics",
    "subscribePattern": "Java-style regex of topic names (the whole name must match)",
    "assign": 'JSON {"topic":[0,1]}',
    "startingOffsets": 'earliest, latest (streams) or JSON {"topic":{"0":23,"1":-2}}',
    "endingOffsets": "latest or JSON (batch)",
    "startingTimestamp": "ms, for every partition",
    "startingOffsetsByTimestamp": 'JSON {"topic":{"0":1700000000000}}',
    "startingOffsetsByTimestampStrategy": "error or latest",
    "endingTimestamp": "ms, for every partition (batch)",
    "endingOffsetsByTimestamp": "JSON (batch)",
    "failOnDataLoss": "true or false",
    "includeHeaders": "true or false",
    "maxOffsetsPerTrigger": "records per micro-batch at most (streams)",
    "minOffsetsPerTrigger": "records per micro-batch at least (streams)",
    "maxTriggerDelay": "how long minOffsetsPerTrigger may hold a batch back, e.g. 15m (streams)",
    "minPartitions": "Spark tasks at least",
    "maxRecordsPerPartition": "records per Spark task at most",
    "groupIdPrefix": "prefix of the consumer group ids generated for the Kafka clients",
    "kafkaConsumer.pollTimeoutMs": "ms a live read may wait for the broker",
    "fetchOffset.numRetries": "attempts to fetch a partition's offsets from the broker",
    "fetchOffset.retryIntervalMs": "ms between those attempts",
    "kafka.bootstrap.servers": "the Kafka cluster (default PROCESSOR_BOOTSTRAP_SERVERS)",
    "metadata.topic": "the metadata topic (default PROCESSOR_METADATA_TOPIC)",
    "metadata.cacheDir": "where planning keeps the materialized metadata view",
    "s3.endpoint": "default PROCESSOR_S3_ENDPOINT_URL",
    "s3.bucket": "default PROCESSOR_S3_BUCKET",
    "s3.prefix": "default PROCESSOR_S3_PREFIX",
    "s3.region": "default PROCESSOR_S3_REGION",
    "storage": "the archive's store: s3, gcs or azure (default PROCESSOR_STORAGE)",
    "gcs.bucket": "default PROCESSOR_GCS_BUCKET",
    "gcs.endpoint": "default PROCESSOR_GCS_ENDPOINT_URL (an emulator's)",
    "azure.container": "default PROCESSOR_AZURE_CONTAINER",
    "azure.accountUrl": "default PROCESSOR_AZURE_ACCOUNT_URL",
    "encryption.keyring": "key ring directory for keyring-encrypted segments (default "
    "PROCESSOR_ENCRYPTION_KEYRING; KMS-encrypted ones need only kms:Decrypt)",
    "tail": "live: continue on the live topic past the archive (and fill archive holes from it)",
    "partitionBytes": "bytes of archive one Spark task reads at most",
}
_KNOWN = {name.lower() for name in SUPPORTED_OPTIONS}
# Kafka settings Spark's source refuses, with its reasons.
_REFUSED_KAFKA = {
    "auto.offset.reset": "set startingOffsets to earliest or latest instead: the source decides "
    "where to read, never the consumer",
    "key.deserializer": "keys are bytes; deserialize them with DataFrame operations",
    "value.deserializer": "values are bytes; deserialize them with DataFrame operations",
    "enable.auto.commit": "the source commits nothing to Kafka",
    "interceptor.classes": "interceptors could change what is read",
}


# Option prefixes KafkaSecurity.from_spark_options owns.
_SECURITY = ("kafka.security.", "kafka.sasl.", "kafka.ssl.")


def kafka_client_settings(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The ``kafka.*`` options other than bootstrap and security, as librdkafka settings for the
    sources' Kafka clients.

    The one place where client settings enter. ``kafka.security.protocol``, ``kafka.sasl.*`` and
    ``kafka.ssl.*`` are not passed through: ``KafkaSecurity.from_spark_options`` reads them (checked,
    Spark's JAAS line mapped, Java keystores refused) into ``Connection.kafka``, from which every
    client gets its security. Refused as Spark does: the settings in ``_REFUSED_KAFKA``; refused here:
    ``isolation.level=read_uncommitted`` (the archive holds what a read_committed consumer sees).
    ``kafka.group.id`` is used as the clients' group id (they join no group: the source assigns
    partitions itself).
    """
    out: dict[str, str] = {}
    for key, value in sorted(lowered_options(options).items()):
        if not key.startswith("kafka.") or key == "kafka.bootstrap.servers" or key.startswith(_SECURITY):
            continue
        name = key[len("kafka.") :]
        if name in _REFUSED_KAFKA:
            raise ConfigError(f"Kafka option '{name}' is not supported: {_REFUSED_KAFKA[name]}")
        if name == "isolation.level":
            if value.lower() != "read_committed":
                raise ConfigError(
                    f"option kafka.isolation.level={value}: the archive holds what a read_committed "
                    "consumer sees (aborted transactions are not offloaded); only read_committed is "
                    "supported"
                )
            continue  # the clients read committed anyway (librdkafka's default)
        out[name] = value
    return tuple(out.items())


def check_known_options(options: Mapping[str, str]) -> None:
    """An option nobody knows is an error naming the supported ones (a typo must not change rows)."""
    unknown = sorted(k for k in lowered_options(options) if k not in _KNOWN and not k.startswith("kafka."))
    if unknown:
        listed = ", ".join(sorted(SUPPORTED_OPTIONS, key=str.lower))
        raise ConfigError(
            f"tiered_records does not know the option(s) {', '.join(unknown)}; supported: {listed}, "
            "and kafka.* client settings"
        )


# -- what tiered_records reads --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions: ``subscribe`` (topics), ``subscribePattern`` (regex) or ``assign``."""

    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assign: tuple[TopicPartition, ...] = ()

    def matches_topic(self, topic: str) -> bool:
        if self.pattern is not None:
            return re.fullmatch(self.pattern, topic) is not None
        if self.assign:
            return any(tp.topic == topic for tp in self.assign)
        return topic in self.topics

    def wants(self, tp: TopicPartition) -> bool:
        if self.assign:
            return tp in self.assign
        return self.matches_topic(tp.topic)

    def describe(self) -> str:
        if self.pattern is not None:
            return f"subscribePattern {self.pattern!r}"
        if self.assign:
            return "assign " + ", ".join(str(tp) for tp in self.assign)
        return "subscribe " + ",".join(self.topics)


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """What ``tiered_records`` reads, validated for one mode (batch or stream)."""

    connection: Connection
    subscription: Subscription
    mode: Mode = "batch"
    starting: Bound = EARLIEST_BOUND
    ending: Bound = LATEST_BOUND
    no_match_latest: bool = False  # startingOffsetsByTimestampStrategy=latest
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = DEFAULT_MAX_TRIGGER_DELAY_MS
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    group_id: str = "spark-kafka-relation"
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    tail_live: bool = False
    partition_bytes: int = DEFAULT_PARTITION_BYTES
    metadata_cache_dir: str | None = None
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def wants(self, tp: TopicPartition) -> bool:
        return self.subscription.wants(tp)


def headers_requested(options: Mapping[str, str]) -> bool:
    return parse_bool("includeHeaders", option(options, "includeHeaders"), False)


def _subscription(lowered: Mapping[str, str]) -> Subscription:
    chosen = [k for k in ("assign", "subscribe", "subscribepattern") if k in lowered]
    if len(chosen) != 1:
        what = "One" if not chosen else "Only one"
        raise ConfigError(
            f"{what} of the options assign, subscribe, subscribePattern must be given to tiered_records"
        )
    value = lowered[chosen[0]]
    if chosen[0] == "subscribe":
        topics = tuple(validate_topic(t.strip()) for t in value.split(",") if t.strip())
        if not topics:
            raise ConfigError(
                f"No topics to subscribe to as specified value for option 'subscribe' is '{value}'"
            )
        return Subscription(topics=topics)
    if chosen[0] == "subscribepattern":
        pattern = value.strip()
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ConfigError(f"option subscribePattern: not a valid regex ({exc}): {pattern!r}") from None
        return Subscription(pattern=pattern)
    doc = parse_json("assign", value)
    if not isinstance(doc, dict) or not all(
        isinstance(v, list) and all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in v)
        for v in doc.values()
    ):
        raise ConfigError(f'option assign: expected e.g. {{"topicA":[0,1],"topicB":[2,4]}}, got {value}')
    assign = tuple(sorted({TopicPartition(validate_topic(t), p) for t, ps in doc.items() for p in ps}))
    if not assign:
        raise ConfigError(f"No topicpartitions to assign as specified value for option 'assign' is '{value}'")
    return Subscription(assign=assign)


def _check_batch_bounds(starting: Bound, ending: Bound) -> None:
    for name, bound, refused, word in (
        ("startingOffsets", starting, LATEST, "latest"),
        ("endingOffsets", ending, EARLIEST, "earliest"),
    ):
        if bound.kind == word:
            raise ConfigError(f"option {name}: {name} can't be {word} for batch queries")
        for tp, offset in bound.offsets:
            if offset == refused:
                raise ConfigError(f"option {name}: {name} for {tp} can't be {word} for batch queries")
    for kind, start_map, end_map in (
        ("offsets", starting.offset_map, ending.offset_map),
        ("timestamps", starting.timestamp_map, ending.timestamp_map),
    ):
        if starting.kind != kind or ending.kind != kind:
            continue
        if set(start_map) != set(end_map):
            raise ConfigError(
                f"the starting and ending {kind} name different partitions: "
                f"{sorted(map(str, start_map))} and {sorted(map(str, end_map))}"
            )
        for tp, start in start_map.items():
            end = end_map[tp]
            if start >= 0 and end >= 0 and start > end:
                raise ConfigError(f"the starting {kind[:-1]} {start} of {tp} is above the ending one {end}")


def parse_record_options(
    options: Mapping[str, str], connect: Callable[[], Connection], mode: Mode = "batch"
) -> RecordOptions:
    """Parse and check ``options`` for a batch or a stream read; raises ConfigError naming what is
    wrong. ``connect`` gives the connection once the options are checked (the Spark entry point's
    :func:`processor.spark_sources.entry.record_options` reads the settings it falls back to)."""
    check_known_options(options)
    lowered = lowered_options(options)
    subscription = _subscription(lowered)
    warnings: list[str] = []
    starting = parse_bound(
        options,
        timestamp_key="startingTimestamp",
        by_timestamp_key="startingOffsetsByTimestamp",
        offsets_key="startingOffsets",
        default=EARLIEST_BOUND if mode == "batch" else LATEST_BOUND,
    )
    ending = parse_bound(
        options,
        timestamp_key="endingTimestamp",
        by_timestamp_key="endingOffsetsByTimestamp",
        offsets_key="endingOffsets",
        default=LATEST_BOUND,
    )
    strategy = lowered.get("startingoffsetsbytimestampstrategy", "error").strip().lower()
    if strategy not in {"error", "latest"}:
        raise ConfigError(
            f"option startingOffsetsByTimestampStrategy: expected error or latest, got {strategy!r}"
        )
    max_rows = parse_long("maxOffsetsPerTrigger", lowered.get("maxoffsetspertrigger"), 1)
    min_rows = parse_long("minOffsetsPerTrigger", lowered.get("minoffsetspertrigger"), 1)
    if max_rows is not None and min_rows is not None and min_rows > max_rows:
        raise ConfigError(
            f"The value of minOffsetPerTrigger({min_rows}) is higher than the "
            f"maxOffsetsPerTrigger({max_rows})."
        )
    delay_raw = lowered.get("maxtriggerdelay")
    delay_ms = (
        DEFAULT_MAX_TRIGGER_DELAY_MS if delay_raw is None else time_string_ms("maxTriggerDelay", delay_raw)
    )
    if mode == "stream":
        for key, name in (
            ("endingoffsets", "endingOffsets"),
            ("endingoffsetsbytimestamp", "endingOffsetsByTimestamp"),
            ("endingtimestamp", "endingTimestamp"),
        ):
            if key in lowered:
                raise ConfigError(f"option {name}: an ending bound is not valid in streaming queries")
    else:
        _check_batch_bounds(starting, ending)
        for key, name in (
            ("maxoffsetspertrigger", "maxOffsetsPerTrigger"),
            ("minoffsetspertrigger", "minOffsetsPerTrigger"),
            ("maxtriggerdelay", "maxTriggerDelay"),
        ):
            if key in lowered:
                warnings.append(f"{name} option ignored in batch queries")
    if "kafka.group.id" in lowered:
        group_id = lowered["kafka.group.id"]
        if "groupidprefix" in lowered:
            warnings.append("Option groupIdPrefix will be ignored as option kafka.group.id has been set.")
    else:
        default_prefix = "spark-kafka-relation" if mode == "batch" else "spark-kafka-source"
        group_id = f"{lowered.get('groupidprefix', default_prefix)}-{uuid.uuid4()}"
    tail = lowered.get("tail", "").strip().lower()
    if tail not in {"", "live"}:
        raise ConfigError(f"option tail: the only value is 'live', got {tail!r}")
    for text in warnings:
        log.warning("tiered_records: %s", text)
    return RecordOptions(
        connection=connect(),
        subscription=subscription,
        mode=mode,
        starting=starting,
        ending=ending,
        no_match_latest=strategy == "latest",
        fail_on_data_loss=parse_bool("failOnDataLoss", lowered.get("failondataloss"), True),
        include_headers=parse_bool("includeHeaders", lowered.get("includeheaders"), False),
        max_offsets_per_trigger=max_rows,
        min_offsets_per_trigger=min_rows,
        max_trigger_delay_ms=delay_ms,
        min_partitions=parse_long("minPartitions", lowered.get("minpartitions"), 1),
        max_records_per_partition=parse_long(
            "maxRecordsPerPartition", lowered.get("maxrecordsperpartition"), 1
        ),
        group_id=group_id,
        poll_timeout_ms=long_or(lowered, "kafkaConsumer.pollTimeoutMs", 1, DEFAULT_POLL_TIMEOUT_MS),
        fetch_offset_retries=long_or(lowered, "fetchOffset.numRetries", 1, 3),
        fetch_offset_retry_interval_ms=long_or(lowered, "fetchOffset.retryIntervalMs", 0, 10),
        tail_live=tail == "live",
        partition_bytes=long_or(lowered, "partitionBytes", 1, DEFAULT_PARTITION_BYTES),
        metadata_cache_dir=lowered.get("metadata.cachedir"),
        warnings=tuple(warnings),
    )
