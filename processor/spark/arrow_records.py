"""Records as Arrow batches in the schema of Spark's Kafka source.

``read_slice_as_arrow`` is the one place where archived blocks become Spark rows: it asks the
project's block reader (``processor.reader.segment_blocks``, CRCs checked there) for the records of
blocks ``i..j`` of one segment and converts them column by column. A change of the block format
(e.g. whole Kafka record batches) only has to touch this function.

Kafka numbers timestamp types -1 none, 0 CreateTime, 1 LogAppendTime (what Spark's Kafka source
shows); the archive stores the consumer's 0/1/2, hence ``- 1``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from processor.reader.segment_blocks import read_block_range
from processor.segment.block_format import BlockInfo
from processor.segment.record_format import Header, KafkaRecord
from processor.storage.chunk_storage import ChunkStorage

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int, headers array<struct<key:string,value:binary>>"
)
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
        pa.field("headers", pa.list_(HEADER_TYPE)),
    ]
)
BATCH_ROWS = 8192


class BlockCounter:
    """Blocks decoded in this process (tests assert that pushed filters read fewer)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.blocks = 0

    def add(self, n: int) -> None:
        with self._lock:
            self.blocks += n


BLOCKS_READ = BlockCounter()


@dataclass(frozen=True, slots=True)
class Row:
    """One record with its Kafka timestamp type already in Spark's numbering."""

    offset: int
    timestamp: int  # ms
    timestamp_type: int
    key: bytes | None
    value: bytes | None
    headers: Sequence[Header]


def _headers_array(all_headers: Sequence[Sequence[Header]]) -> pa.Array:
    offsets = [0]
    names: list[str] = []
    values: list[bytes | None] = []
    for headers in all_headers:
        for name, hvalue in headers:
            names.append(name)
            values.append(hvalue)
        offsets.append(len(names))
    items = pa.StructArray.from_arrays(
        [pa.array(names, pa.string()), pa.array(values, pa.binary())], fields=list(HEADER_TYPE)
    )
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), items, type=pa.list_(HEADER_TYPE))


def to_record_batch(
    topic: str,
    partition: int,
    offsets: Sequence[int],
    timestamps_ms: Sequence[int],
    timestamp_types: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]],
) -> pa.RecordBatch:
    n = len(offsets)
    ts = pc.multiply(pa.array(timestamps_ms, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays(
        [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array([partition] * n, pa.int32()),
            pa.array(offsets, pa.int64()),
            ts,
            pa.array(timestamp_types, pa.int32()),
            _headers_array(headers),
        ],
        schema=ARROW_SCHEMA,
    )


def records_to_batch(topic: str, partition: int, records: Sequence[KafkaRecord]) -> pa.RecordBatch:
    return to_record_batch(
        topic,
        partition,
        [r.offset for r in records],
        [r.timestamp for r in records],
        [int(r.timestamp_type) - 1 for r in records],
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
    )


def rows_to_batch(topic: str, partition: int, rows: Sequence[Row]) -> pa.RecordBatch:
    return to_record_batch(
        topic,
        partition,
        [r.offset for r in rows],
        [r.timestamp for r in rows],
        [r.timestamp_type for r in rows],
        [r.key for r in rows],
        [r.value for r in rows],
        [r.headers for r in rows],
    )


def _rebatch(topic: str, partition: int, chunks: Iterable[list[KafkaRecord]]) -> Iterator[pa.RecordBatch]:
    pending: list[KafkaRecord] = []
    for chunk in chunks:
        pending.extend(chunk)
        if len(pending) >= BATCH_ROWS:
            yield records_to_batch(topic, partition, pending)
            pending = []
    if pending:
        yield records_to_batch(topic, partition, pending)


def read_slice_as_arrow(
    storage: ChunkStorage,
    *,
    topic: str,
    partition: int,
    data_object_key: str,
    segment_name: str,
    blocks: Sequence[BlockInfo],
    first_block: int,
    from_offset: int,
    until_offset: int,
    min_timestamp: int | None = None,
    max_timestamp: int | None = None,
) -> Iterator[pa.RecordBatch]:
    """Blocks ``first_block..`` of one segment as Arrow batches, only offsets in
    ``[from_offset, until_offset)`` and timestamps in ``[min_timestamp, max_timestamp]``."""

    def wanted() -> Iterator[list[KafkaRecord]]:
        for records in read_block_range(storage, data_object_key, segment_name, list(blocks), first_block):
            BLOCKS_READ.add(1)
            if records and (
                records[0].offset >= from_offset
                and records[-1].offset < until_offset
                and min_timestamp is None
                and max_timestamp is None
            ):
                yield records
                continue
            yield [
                r
                for r in records
                if from_offset <= r.offset < until_offset
                and (min_timestamp is None or r.timestamp >= min_timestamp)
                and (max_timestamp is None or r.timestamp <= max_timestamp)
            ]

    yield from _rebatch(topic, partition, wanted())
