"""Data source ``remote_log_metadata``: the metadata topic's records, one column per field.

Every message becomes a row, decoded with the project's codec; a value that does not decode is a row
with ``decode_error`` set (never a crash), a tombstone a row with ``record_type = 'tombstone'``.
``meta_partition`` / ``meta_offset`` are the message's place on the metadata topic, and the stream's
offsets are those: ``{metadata_topic: {partition: next_offset}}``. Batch reads default to earliest ..
latest, streams start at latest unless ``startingOffsets`` says otherwise (as Spark's Kafka source).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import KafkaException
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition

from processor.errors import FormatError, ServiceUnavailableError
from processor.metadata.codec import decode_value
from processor.metadata.model import (
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogStartOffset,
    RemotePartitionDeleteMetadata,
    TopicPartition,
)
from processor.spark.live_tail import consume_range, live_ends
from processor.spark.options import (
    EARLIEST,
    LATEST,
    Connection,
    OffsetSpec,
    _get,
    connection_from,
    parse_offset_spec,
)
from processor.spark.tiered_records import decode_offsets, encode_offsets

SCHEMA_DDL = (
    "meta_partition int, meta_offset long, meta_timestamp timestamp, key string, record_type string, "
    "segment_id string, topic string, topic_id string, partition int, start_offset long, end_offset long, "
    "max_timestamp_ms long, event_timestamp_ms long, state string, writer_id string, writer_epoch int, "
    "segment_size_in_bytes long, record_count long, segment_format_version int, data_object_key string, "
    "index_object_key string, index_crc32 long, index_size_in_bytes long, "
    "leader_epochs array<struct<epoch:int,start_offset:long>>, custom_metadata binary, "
    "txn_index_empty boolean, decode_error string"
)
COLUMNS = [
    c.strip().split(" ")[0]
    for c in SCHEMA_DDL.replace("array<struct<epoch:int,start_offset:long>>", "x").split(",")
]


def _key_parts(key: bytes | None) -> tuple[str | None, int | None, str | None]:
    """Best-effort topic, partition and segment id from a message key (for rows that do not decode)."""
    try:
        parts = (key or b"").decode("utf-8").split("/")
        if len(parts) in (2, 3):
            return parts[0], int(parts[1]), parts[2] if len(parts) == 3 else None
    except (UnicodeDecodeError, ValueError):
        pass
    return None, None, None


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
        row.update(
            record_type="claim",
            topic=record.topic_partition.topic,
            partition=record.topic_partition.partition,
            topic_id=record.topic_id,
            event_timestamp_ms=record.event_timestamp_ms,
            writer_id=record.writer_id,
            state=record.kind.value,
            segment_id=str(record.claim_id),
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


@dataclass(frozen=True, slots=True)
class MetadataOptions:
    connection: Connection
    starting: OffsetSpec | None
    ending: OffsetSpec


@dataclass(frozen=True, slots=True)
class MetaSlice:
    partition: int
    from_offset: int
    until_offset: int


def metadata_options(options: Mapping[str, str]) -> MetadataOptions:
    return MetadataOptions(
        connection=connection_from(options),
        starting=parse_offset_spec("startingOffsets", _get(options, "startingOffsets")),
        ending=parse_offset_spec("endingOffsets", _get(options, "endingOffsets")) or "latest",
    )


def _bounds(conn: Connection) -> dict[TopicPartition, tuple[int, int]]:
    return live_ends(conn.kafka, [conn.metadata_topic])


def _resolve(spec: OffsetSpec, bounds: Mapping[TopicPartition, tuple[int, int]]) -> dict[TopicPartition, int]:
    out: dict[TopicPartition, int] = {}
    for tp, (low, high) in bounds.items():
        wanted = EARLIEST if spec == "earliest" else LATEST
        if isinstance(spec, dict):
            wanted = spec.get(tp.topic, {}).get(tp.partition, LATEST)
        out[tp] = low if wanted == EARLIEST else high if wanted == LATEST else wanted
    return out


def read_slice(conn: Connection, part: MetaSlice) -> Iterator[tuple[Any, ...]]:
    try:
        for msg in consume_range(
            conn.kafka, conn.metadata_topic, part.partition, part.from_offset, part.until_offset
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
        start = _resolve(self.options.starting or "earliest", bounds)
        end = _resolve(self.options.ending, bounds)
        return [InputPartition(s) for s in _slices(start, end)] or [InputPartition(None)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if partition.value is not None:
            yield from read_slice(self.options.connection, partition.value)


class MetadataStreamReader(DataSourceStreamReader):
    def __init__(self, options: MetadataOptions) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, Any]:
        return encode_offsets(_resolve(self.options.starting or "latest", _bounds(self.options.connection)))

    def latestOffset(self, start: dict[str, Any] | None = None, limit: Any = None) -> dict[str, Any]:
        begin = decode_offsets(start)
        latest = {
            tp: max(high, begin.get(tp, 0)) for tp, (_low, high) in _bounds(self.options.connection).items()
        }
        return encode_offsets(latest)

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return [InputPartition(s) for s in _slices(decode_offsets(start), decode_offsets(end))]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        yield from read_slice(self.options.connection, partition.value)


class RemoteLogMetadataDataSource(DataSource):
    """``spark.read.format("remote_log_metadata")`` / ``spark.readStream.format(...)``."""

    @classmethod
    def name(cls) -> str:
        return "remote_log_metadata"

    def schema(self) -> str:
        return SCHEMA_DDL

    def reader(self, schema: Any) -> DataSourceReader:
        return MetadataReader(metadata_options(self.options))

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        return MetadataStreamReader(metadata_options(self.options))
