"""Data source ``remote_log_metadata``: the metadata topic's records, one column per field.

Every message becomes a row, decoded with the project's codec; a value that does not decode is a row
with ``decode_error`` set (never a crash), a tombstone a row with ``record_type = 'tombstone'``, a
``PartitionClaim`` a row with ``record_type = 'claim'`` (its epoch is its ``meta_offset``; ``state``
is its kind, ``segment_id`` its claim id, ``writer_epoch`` the epoch a RELEASE ends). ``raw_key``
and ``value`` are the message's bytes as they are on the topic (the audit folds them with the
project's fold, which checks both). ``meta_partition`` / ``meta_offset`` are the message's place
on the metadata topic, and the stream's offsets are those: ``{metadata_topic: {partition:
next_offset}}``. Batch reads default to earliest .. latest, streams start at latest unless
``startingOffsets`` says otherwise (as Spark's Kafka source).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition

from processor.errors import ConfigError, FormatError, ServiceUnavailableError
from processor.kafka.client_types import KafkaException
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import decode_value
from processor.metadata.fold_rules import parse_key
from processor.metadata.model import (
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
)
from processor.spark.bounds import (
    EARLIEST,
    EARLIEST_BOUND,
    LATEST,
    LATEST_BOUND,
    Bound,
    lowered_options,
    offsets_bound,
)
from processor.spark.connection import Connection
from processor.spark.live_tail import consume_range, watermarks
from processor.spark.stream_offsets import StreamOffsets

SCHEMA_DDL = (
    "meta_partition int, meta_offset long, meta_timestamp timestamp, key string, record_type string, "
    "segment_id string, topic string, topic_id string, partition int, start_offset long, end_offset long, "
    "max_timestamp_ms long, event_timestamp_ms long, state string, writer_id string, writer_epoch long, "
    "segment_size_in_bytes long, record_count long, segment_format_version int, data_object_key string, "
    "index_object_key string, index_crc32 long, index_size_in_bytes long, "
    "leader_epochs array<struct<epoch:int,start_offset:long>>, custom_metadata binary, "
    "txn_index_empty boolean, decode_error string, value binary, raw_key binary"
)
COLUMNS = [
    c.strip().split(" ")[0]
    for c in SCHEMA_DDL.replace("array<struct<epoch:int,start_offset:long>>", "x").split(",")
]


def _key_parts(key: bytes | None) -> tuple[str | None, int | None, str | None]:
    """Topic, partition and the key's last part (a segment or claim id, ``log-start-offset``) from a
    message key as the fold reads keys (for tombstones and rows that do not decode)."""
    parsed = parse_key(key)
    if parsed is None:
        return None, None, None
    tp, rest = parsed
    return tp.topic, tp.partition, rest.rsplit("/", 1)[-1] or None


def record_row(
    meta_partition: int, meta_offset: int, meta_ts_ms: int | None, key: bytes | None, value: bytes | None
) -> tuple[Any, ...]:
    """One message as a row in COLUMNS order."""
    import datetime as dt

    row: dict[str, Any] = dict.fromkeys(COLUMNS)
    row["meta_partition"], row["meta_offset"] = meta_partition, meta_offset
    row["meta_timestamp"] = (
        dt.datetime.fromtimestamp(meta_ts_ms / 1000, tz=dt.UTC) if meta_ts_ms and meta_ts_ms > 0 else None
    )
    row["key"] = key.decode("utf-8", "replace") if key is not None else None
    row["raw_key"], row["value"] = key, value
    record: MetadataRecord | None = None
    if value is None:
        row["record_type"] = "tombstone"
    else:
        try:
            record = decode_value(value)
        except FormatError as exc:
            row["decode_error"] = str(exc)
    if record is None:
        row["topic"], row["partition"], row["segment_id"] = _key_parts(key)
        return tuple(row[c] for c in COLUMNS)
    if isinstance(record, RemotePartitionDeleteMetadata):
        row.update(
            record_type="partition_delete",
            topic=record.topic_partition.topic,
            partition=record.topic_partition.partition,
            topic_id=record.topic_id,
            state=record.state.value,
            event_timestamp_ms=record.event_timestamp_ms,
            writer_id=record.writer_id,
            writer_epoch=record.writer_epoch,
        )
        return tuple(row[c] for c in COLUMNS)
    if isinstance(record, RemoteLogStartOffset):
        row.update(
            record_type="log_start_offset",
            topic=record.topic_partition.topic,
            partition=record.topic_partition.partition,
            topic_id=record.topic_id,
            start_offset=record.start_offset,
            event_timestamp_ms=record.event_timestamp_ms,
            writer_id=record.writer_id,
            writer_epoch=record.writer_epoch,
        )
        return tuple(row[c] for c in COLUMNS)
    if isinstance(record, PartitionClaim):
        # The claim's own epoch is its meta_offset; writer_epoch is the epoch a RELEASE ends.
        row.update(
            record_type="claim",
            topic=record.topic_partition.topic,
            partition=record.topic_partition.partition,
            topic_id=record.topic_id,
            event_timestamp_ms=record.event_timestamp_ms,
            writer_id=record.writer_id,
            state=record.kind.value,
            segment_id=str(record.claim_id),
            writer_epoch=record.released_epoch if record.released_epoch >= 0 else None,
        )
        return tuple(row[c] for c in COLUMNS)
    sid = record.segment_id
    row.update(
        segment_id=str(sid.id),
        topic=sid.topic,
        topic_id=sid.topic_id,
        partition=sid.partition,
        event_timestamp_ms=record.event_timestamp_ms,
        state=record.state.value,
        writer_id=record.writer_id,
        writer_epoch=record.writer_epoch,
        custom_metadata=record.custom_metadata,
    )
    if isinstance(record, RemoteLogSegmentMetadataUpdate):
        row["record_type"] = "segment_update"
    elif isinstance(record, RemoteLogSegmentMetadata):
        row.update(
            record_type="segment",
            start_offset=record.start_offset,
            end_offset=record.end_offset,
            max_timestamp_ms=record.max_timestamp_ms,
            segment_size_in_bytes=record.segment_size_in_bytes,
            record_count=record.record_count,
            segment_format_version=record.segment_format_version,
            data_object_key=record.data_object_key,
            index_object_key=record.index_object_key,
            index_crc32=record.index_crc32,
            index_size_in_bytes=record.index_size_in_bytes,
            leader_epochs=[{"epoch": e, "start_offset": o} for e, o in record.segment_leader_epochs],
            txn_index_empty=record.txn_index_empty,
        )
    return tuple(row[c] for c in COLUMNS)


SUPPORTED_OPTIONS = ("kafka.bootstrap.servers", "metadata.topic", "startingOffsets", "endingOffsets")


@dataclass(frozen=True, slots=True)
class MetadataOptions:
    connection: Connection
    starting: Bound | None
    ending: Bound


@dataclass(frozen=True, slots=True)
class MetaSlice:
    partition: int
    from_offset: int
    until_offset: int


def metadata_options(options: Mapping[str, str], connect: Callable[[], Connection]) -> MetadataOptions:
    """Parse and check ``options``; ``connect`` builds the connection (after the options are known
    good: processor/spark_sources/entry.py reads the settings it falls back to)."""
    known = {o.lower() for o in SUPPORTED_OPTIONS}
    unknown = sorted(k for k in lowered_options(options) if k not in known and not k.startswith("kafka."))
    if unknown:
        raise ConfigError(
            f"remote_log_metadata does not know the option(s) {', '.join(unknown)}; supported: "
            f"{', '.join(SUPPORTED_OPTIONS)}, and kafka.* client settings"
        )

    lowered = lowered_options(options)
    starting = lowered.get("startingoffsets")
    ending = lowered.get("endingoffsets")
    return MetadataOptions(
        connection=connect(),
        starting=offsets_bound("startingOffsets", starting) if starting is not None else None,
        ending=offsets_bound("endingOffsets", ending) if ending is not None else LATEST_BOUND,
    )


def _bounds(conn: Connection) -> dict[TopicPartition, tuple[int, int]]:
    from processor.spark.live_tail import broker_partitions
    from processor.spark.options import Subscription

    needs = "remote_log_metadata needs Read and Describe on the metadata topic (option metadata.topic)"
    return watermarks(conn, broker_partitions(conn, Subscription(topics=(conn.metadata_topic,)), needs=needs))


def _resolve(spec: Bound, bounds: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
    given = spec.offset_map
    out: dict[TopicPartition, int] = {}
    for tp, (low, high) in bounds.items():
        wanted = EARLIEST if spec.kind == "earliest" else LATEST
        if spec.kind == "offsets":
            wanted = given.get(tp, LATEST)
        out[tp] = low if wanted == EARLIEST else high if wanted == LATEST else wanted
    return out


def read_slice(conn: Connection, part: MetaSlice) -> Iterator[tuple[Any, ...]]:
    try:
        for msg in consume_range(
            conn, conn.metadata_topic, part.partition, part.from_offset, part.until_offset
        ):
            _type, ts = msg.timestamp()
            yield record_row(part.partition, int(msg.offset()), int(ts), msg.key(), msg.value())
    except KafkaException as exc:
        raise ServiceUnavailableError(f"reading {conn.metadata_topic}: {exc.args[0]}") from None


def _slices(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> list[MetaSlice]:
    return [
        MetaSlice(tp.partition, start.get(tp, 0), e) for tp, e in sorted(end.items()) if e > start.get(tp, 0)
    ]


class MetadataReader(DataSourceReader):
    def __init__(self, options: MetadataOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        bounds = _bounds(self.options.connection)
        start = _resolve(self.options.starting or EARLIEST_BOUND, bounds)
        end = _resolve(self.options.ending, bounds)
        return [InputPartition(s) for s in _slices(start, end)] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if partition.value is not None:
            yield from read_slice(self.options.connection, partition.value)


class MetadataStreamReader(DataSourceStreamReader):
    def __init__(self, options: MetadataOptions) -> None:
        self.options = options
        self._initial: dict[str, Any] | None = None

    def initialOffset(self) -> dict[str, Any]:
        if self._initial is None:
            offsets = _resolve(self.options.starting or LATEST_BOUND, _bounds(self.options.connection))
            self._initial = StreamOffsets(offsets).to_json()
        return self._initial

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        begin = StreamOffsets.from_json(start).offsets
        latest = {
            tp: max(high, begin.get(tp, 0)) for tp, (_low, high) in _bounds(self.options.connection).items()
        }
        return start if latest == begin else StreamOffsets(latest).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin, until = StreamOffsets.from_json(start).offsets, StreamOffsets.from_json(end).offsets
        return [InputPartition(s) for s in _slices(begin, until)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield from read_slice(self.options.connection, partition.value)
