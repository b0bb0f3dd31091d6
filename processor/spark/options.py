"""The data sources' options, parsed and validated on the driver. Pure (no pyspark).

Names and meanings follow Spark's own Kafka source where the meaning is the same (``subscribe``,
``assign``, ``startingOffsets``, ``endingOffsets``, ``startingTimestamp``, ``endingTimestamp``,
``maxOffsetsPerTrigger``, ``failOnDataLoss``, ``includeHeaders``). Connection options
(``kafka.bootstrap.servers``, ``metadata.topic``, ``s3.endpoint``, ``s3.bucket``, ``s3.prefix``,
``s3.region``) fall back to the worker's ``PROCESSOR_*`` variables. The result is a small frozen
value that pickles to the executors, so they never read the environment for where to connect.
S3 credentials are never options: the standard AWS chain provides them on every node.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from processor.errors import ConfigError
from processor.kafka_security import KafkaConnection, KafkaSecurity
from processor.segment.object_keys import validate_prefix, validate_topic
from processor.storage.s3 import S3ChunkStorage, S3Options

EARLIEST = -2  # Spark's JSON offsets: -2 earliest, -1 latest
LATEST = -1
DEFAULT_PARTITION_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Connection:
    kafka: KafkaConnection  # bootstrap servers and security (kafka.security.protocol, kafka.sasl.*, ...)
    metadata_topic: str
    s3_endpoint: str | None
    s3_bucket: str
    s3_prefix: str
    s3_region: str | None

    @property
    def bootstrap_servers(self) -> str:
        return self.kafka.bootstrap_servers

    def storage(self) -> S3ChunkStorage:
        """A new storage client (the caller closes it)."""
        return S3ChunkStorage(
            S3Options(
                bucket=self.s3_bucket, endpoint_url=self.s3_endpoint, region=self.s3_region, max_concurrency=4
            )
        )

    def shared_storage(self) -> S3ChunkStorage:
        """One storage client per process and connection, reused by every task a Python worker runs:
        creating a boto3 client costs ~0.1-0.3 s (it loads the service model), more than reading a
        small slice. boto3 clients are thread-safe; it lives as long as the process."""
        return _shared_storage(self)


@functools.cache
def _shared_storage(conn: Connection) -> S3ChunkStorage:
    return conn.storage()


def _get(options: Mapping[str, str], name: str) -> str | None:
    # pyspark hands options in a case-insensitive dict; plain dicts are matched case-insensitively too.
    lowered = {k.lower(): v for k, v in options.items()}
    value = lowered.get(name.lower())
    return None if value is None or value == "" else str(value)


def connection_from(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> Connection:
    """Connection options, each falling back to the worker's PROCESSOR_* variable, then its default."""
    from processor.config import load_settings

    settings = load_settings(os.environ if environ is None else environ)
    bucket = _get(options, "s3.bucket") or settings.s3_bucket
    # Spark's Kafka-source security options (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*), or
    # else the process's PROCESSOR_* security settings.
    security = KafkaSecurity.from_spark_options(options, settings.kafka_security)
    return Connection(
        kafka=KafkaConnection(
            _get(options, "kafka.bootstrap.servers") or settings.bootstrap_servers, security
        ),
        metadata_topic=validate_topic(_get(options, "metadata.topic") or settings.metadata_topic),
        s3_endpoint=_get(options, "s3.endpoint") or settings.s3_endpoint_url,
        s3_bucket=bucket,
        s3_prefix=validate_prefix(_get(options, "s3.prefix") or settings.s3_prefix),
        s3_region=_get(options, "s3.region") or settings.s3_region,
    )


OffsetSpec = str | dict[str, dict[int, int]]  # "earliest", "latest", or {topic: {partition: offset}}


@dataclass(frozen=True, slots=True)
class RecordOptions:
    """What ``tiered_records`` reads."""

    connection: Connection
    topics: tuple[str, ...] = ()  # from subscribe
    assign: dict[str, tuple[int, ...]] = field(default_factory=dict)  # from assign
    starting: OffsetSpec | None = None  # None: the default (batch earliest, stream latest)
    ending: OffsetSpec = "latest"
    starting_timestamp: int | None = None
    ending_timestamp: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    tail_live: bool = False
    partition_bytes: int = DEFAULT_PARTITION_BYTES

    def wants(self, topic: str, partition: int) -> bool:
        if self.assign:
            return partition in self.assign.get(topic, ())
        return topic in self.topics

    @property
    def wanted_topics(self) -> tuple[str, ...]:
        return tuple(sorted(self.assign)) if self.assign else self.topics


def _json(name: str, raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"option {name}: not valid JSON ({exc.msg}): {raw!r}") from None


def _int(name: str, raw: str | None, minimum: int = 0) -> int | None:
    if raw is None:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"option {name}: expected an integer, got {raw!r}") from None
    if value < minimum:
        raise ConfigError(f"option {name}: must be at least {minimum}, got {value}")
    return value


def _bool(name: str, raw: str | None, default: bool) -> bool:
    if raw is None:
        return default
    if raw.lower() in {"true", "false"}:
        return raw.lower() == "true"
    raise ConfigError(f"option {name}: expected true or false, got {raw!r}")


def parse_offset_spec(name: str, raw: str | None) -> OffsetSpec | None:
    if raw is None:
        return None
    if raw.strip().lower() in {"earliest", "latest"}:
        return raw.strip().lower()
    doc = _json(name, raw)
    if not isinstance(doc, dict):
        raise ConfigError(f'option {name}: expected earliest, latest or JSON like {{"topic":{{"0":23}}}}')
    out: dict[str, dict[int, int]] = {}
    for topic, parts in doc.items():
        validate_topic(topic)
        if not isinstance(parts, dict):
            raise ConfigError(f"option {name}: topic {topic!r} needs a JSON object of partition: offset")
        try:
            out[topic] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            raise ConfigError(
                f"option {name}: partitions and offsets of {topic!r} must be integers"
            ) from None
        if any(o < EARLIEST for o in out[topic].values()):
            raise ConfigError(f"option {name}: offsets are >= 0, or -2 (earliest) / -1 (latest)")
    return out


def record_options(options: Mapping[str, str], environ: Mapping[str, str] | None = None) -> RecordOptions:
    subscribe = _get(options, "subscribe")
    assign_raw = _get(options, "assign")
    if (subscribe is None) == (assign_raw is None):
        raise ConfigError("tiered_records needs exactly one of the options subscribe or assign")
    topics: tuple[str, ...] = ()
    assign: dict[str, tuple[int, ...]] = {}
    if subscribe is not None:
        topics = tuple(validate_topic(t.strip()) for t in subscribe.split(",") if t.strip())
        if not topics:
            raise ConfigError("option subscribe: no topic named")
    else:
        doc = _json("assign", assign_raw or "")
        if not isinstance(doc, dict) or not all(isinstance(v, list) for v in doc.values()):
            raise ConfigError('option assign: expected JSON like {"topic":[0,1]}')
        assign = {validate_topic(t): tuple(sorted(int(p) for p in ps)) for t, ps in doc.items()}
    if _get(options, "subscribePattern") is not None:
        raise ConfigError("option subscribePattern is not supported; name the topics in subscribe")
    tail = (_get(options, "tail") or "").lower()
    if tail not in {"", "live"}:
        raise ConfigError(f"option tail: the only value is 'live', got {tail!r}")
    ending = parse_offset_spec("endingOffsets", _get(options, "endingOffsets")) or "latest"
    if ending == "earliest":
        raise ConfigError("option endingOffsets: earliest is not allowed (as in Spark's Kafka source)")
    return RecordOptions(
        connection=connection_from(options, environ),
        topics=topics,
        assign=assign,
        starting=parse_offset_spec("startingOffsets", _get(options, "startingOffsets")),
        ending=ending,
        starting_timestamp=_int("startingTimestamp", _get(options, "startingTimestamp")),
        ending_timestamp=_int("endingTimestamp", _get(options, "endingTimestamp")),
        max_offsets_per_trigger=_int("maxOffsetsPerTrigger", _get(options, "maxOffsetsPerTrigger"), 1),
        fail_on_data_loss=_bool("failOnDataLoss", _get(options, "failOnDataLoss"), True),
        tail_live=tail == "live",
        partition_bytes=_int("partitionBytes", _get(options, "partitionBytes"), 1) or DEFAULT_PARTITION_BYTES,
    )
