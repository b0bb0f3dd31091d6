"""Records as Arrow batches in the schema of Spark's Kafka source.

``read_slice_as_arrow`` is the one place where archived blocks become Spark rows: it asks the
project's block reader (``processor.reader.segment_blocks.read_block_range_columns``, every CRC
checked there) for the rows of blocks ``i..j`` of one segment as columns
(``processor.segment.block_columns``: no Python object per record) and builds each Arrow column
from its list in one call. A block of ``BLOCK_BATCH_BYTES`` or more is one Arrow batch; smaller
ones are gathered into batches of ``BATCH_ROWS`` rows (or ``BATCH_BYTES`` of payload). The offset
range is applied while decoding (only batches that straddle a bound are filtered row by row); a
pushed timestamp range is applied to the Arrow batch.
``rows_to_batch``/``records_to_batch`` are the per-row path of the live tail and of tests.

The schema is Spark's: 7 columns, and ``headers`` as an 8th only with ``includeHeaders=true``
(building it costs as much as the rest of the row on Spark's Python data source path). As in
Spark's Kafka source, a record without headers has ``headers = null``, never an empty array.

Kafka numbers timestamp types -1 none, 0 CreateTime, 1 LogAppendTime (what Spark's Kafka source
shows); the archive stores the consumer's 0/1/2, hence ``- 1``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from processor.reader.segment_blocks import read_block_range_columns
from processor.reader.segment_keys import SegmentCipher
from processor.segment.block_columns import RecordColumns
from processor.segment.block_header import BlockInfo
from processor.segment.records import Header, KafkaRecord
from processor.storage.chunk_storage import ChunkStorage

SCHEMA_DDL_NO_HEADERS = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int"
)
SCHEMA_DDL = SCHEMA_DDL_NO_HEADERS + ", headers array<struct<key:string,value:binary>>"
HEADER_TYPE = pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
ARROW_SCHEMA_NO_HEADERS = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
ARROW_SCHEMA = ARROW_SCHEMA_NO_HEADERS.append(pa.field("headers", pa.list_(HEADER_TYPE)))


def schema_ddl(include_headers: bool) -> str:
    return SCHEMA_DDL if include_headers else SCHEMA_DDL_NO_HEADERS


def arrow_schema(include_headers: bool) -> pa.Schema:
    return ARROW_SCHEMA if include_headers else ARROW_SCHEMA_NO_HEADERS


BATCH_ROWS = 8192
BATCH_BYTES = 32 * 1024 * 1024  # payload bytes per Arrow batch (binary arrays must stay < 2 GiB)
# A block this big becomes an Arrow batch of its own (no copying into a gathered batch first).
# A slice is fetched in ranged GETs of about this size, the next already on its way while one
# decodes (one GET of a whole 64 MiB slice left the task idle until all of it had arrived).
CHUNK_BYTES = 8 * 1024 * 1024
BLOCK_BATCH_ROWS = 2048
BLOCK_BATCH_BYTES = 512 * 1024


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


def _headers_column(counts: Sequence[int], names: Sequence[str], values: Sequence[bytes | None]) -> pa.Array:
    """``headers``: a list per row over flat key/value arrays; null for rows without headers."""
    items = pa.StructArray.from_arrays(
        [pa.array(names, pa.string()), pa.array(values, pa.binary())], fields=list(HEADER_TYPE)
    )
    counts_np = np.asarray(counts, dtype=np.int32)
    offsets = np.zeros(len(counts_np) + 1, dtype=np.int32)
    np.cumsum(counts_np, out=offsets[1:])
    mask = pa.array(counts_np == 0) if len(counts_np) else None
    return pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), items, mask=mask, type=pa.list_(HEADER_TYPE)
    )


def _headers_array(all_headers: Sequence[Sequence[Header]]) -> pa.Array:
    names: list[str] = []
    values: list[bytes | None] = []
    for headers in all_headers:
        for name, hvalue in headers:
            names.append(name)
            values.append(hvalue)
    return _headers_column([len(h) for h in all_headers], names, values)


def to_record_batch(
    topic: str,
    partition: int,
    offsets: Sequence[int],
    timestamps_ms: Sequence[int],
    timestamp_types: Sequence[int],
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    headers: Sequence[Sequence[Header]] | None,
) -> pa.RecordBatch:
    """One Arrow batch; ``headers`` None leaves the column out."""
    n = len(offsets)
    ts = pc.multiply(pa.array(timestamps_ms, pa.int64()), 1000).cast(pa.timestamp("us", tz="UTC"))
    columns = [
        pa.array(keys, pa.binary()),
        pa.array(values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(offsets, pa.int64()),
        ts,
        pa.array(timestamp_types, pa.int32()),
    ]
    if headers is None:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_NO_HEADERS)
    return pa.RecordBatch.from_arrays([*columns, _headers_array(headers)], schema=ARROW_SCHEMA)


def records_to_batch(
    topic: str, partition: int, records: Sequence[KafkaRecord], include_headers: bool = True
) -> pa.RecordBatch:
    return to_record_batch(
        topic,
        partition,
        [r.offset for r in records],
        [r.timestamp for r in records],
        [int(r.timestamp_type) - 1 for r in records],
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records] if include_headers else None,
    )


def rows_to_batch(
    topic: str, partition: int, rows: Sequence[Row], include_headers: bool = True
) -> pa.RecordBatch:
    return to_record_batch(
        topic,
        partition,
        [r.offset for r in rows],
        [r.timestamp for r in rows],
        [r.timestamp_type for r in rows],
        [r.key for r in rows],
        [r.value for r in rows],
        [r.headers for r in rows] if include_headers else None,
    )


def columns_to_batch(
    topic: str, partition: int, cols: RecordColumns, include_headers: bool = True
) -> pa.RecordBatch:
    """Decoded columns as one Arrow batch: every column built from its list in one call; headers
    (when included) as a list array over flat key/value arrays (no per-row Python objects)."""
    n = len(cols)
    timestamps = np.asarray(cols.timestamps, dtype=np.int64) * 1000
    types = np.asarray(cols.timestamp_types, dtype=np.int32) - 1  # archive 1/2 -> Spark's 0/1
    columns = [
        pa.array(cols.keys, pa.binary()),
        pa.array(cols.values, pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(cols.offsets, pa.int64()),
        pa.array(timestamps, pa.timestamp("us", tz="UTC")),
        pa.array(types, pa.int32()),
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_NO_HEADERS)
    headers = _headers_column(cols.header_counts, cols.header_keys, cols.header_values)
    return pa.RecordBatch.from_arrays([*columns, headers], schema=ARROW_SCHEMA)


def _time_filtered(
    batch: pa.RecordBatch, min_timestamp: int | None, max_timestamp: int | None
) -> pa.RecordBatch:
    ts = batch.column(5).cast(pa.int64())  # microseconds
    mask = None
    if min_timestamp is not None:
        mask = pc.greater_equal(ts, min_timestamp * 1000)
    if max_timestamp is not None:
        upper = pc.less_equal(ts, max_timestamp * 1000)
        mask = upper if mask is None else pc.and_(mask, upper)
    return batch if mask is None else batch.filter(mask)


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
    include_headers: bool = True,
    cipher: SegmentCipher | None = None,
) -> Iterator[pa.RecordBatch]:
    """Blocks ``first_block..`` of one segment as Arrow batches, only offsets in
    ``[from_offset, until_offset)`` and timestamps in ``[min_timestamp, max_timestamp]``.

    Blocks are decoded into columns (CRCs checked there; headers only if asked for). A block large
    enough is one Arrow batch of its own; smaller ones are gathered until a batch holds
    ``BATCH_ROWS`` rows or ``BATCH_BYTES`` of payload."""
    timed = min_timestamp is not None or max_timestamp is not None
    pending = RecordColumns(with_headers=include_headers)
    for cols in read_block_range_columns(
        storage,
        data_object_key,
        segment_name,
        list(blocks),
        first_block,
        min_offset=from_offset,
        max_offset=until_offset - 1,
        with_headers=include_headers,
        chunk_bytes=CHUNK_BYTES,
        cipher=cipher,
    ):
        BLOCKS_READ.add(1)
        big = len(cols) >= BLOCK_BATCH_ROWS or cols.payload_bytes >= BLOCK_BATCH_BYTES
        if big and not len(pending):
            batch = columns_to_batch(topic, partition, cols, include_headers)
            yield _time_filtered(batch, min_timestamp, max_timestamp) if timed else batch
            continue
        pending.extend(cols)
        if len(pending) >= BATCH_ROWS or pending.payload_bytes >= BATCH_BYTES:
            batch = columns_to_batch(topic, partition, pending, include_headers)
            yield _time_filtered(batch, min_timestamp, max_timestamp) if timed else batch
            pending = RecordColumns(with_headers=include_headers)
    if len(pending):
        batch = columns_to_batch(topic, partition, pending, include_headers)
        yield _time_filtered(batch, min_timestamp, max_timestamp) if timed else batch
