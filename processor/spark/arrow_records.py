"""Records as Arrow batches in the schema of Spark's Kafka source.

``read_slice_as_arrow`` is the one place where archived blocks become Spark rows: the project's
block reader (``processor.reader.segment_blocks``: ranged GETs, the block's index entry and every
CRC checked there) hands each block of ``i..j`` of one segment to the bulk decoder
(``processor.segment.bulk_records``: compiled code, no Python step per record), whose flat arrays
are already laid out as Arrow's binary and primitive columns: each Arrow array wraps them without a
copy (``arrays_to_batch``). A block of ``BLOCK_BATCH_BYTES`` or more is one Arrow batch; smaller
ones are gathered into batches of ``BATCH_ROWS`` rows (or ``BATCH_BYTES`` of payload). The offset
range is applied while decoding; a pushed timestamp range is applied to the Arrow batch.
``rows_to_batch``/``records_to_batch``/``columns_to_batch`` are the per-row paths of the live tail
and of tests.

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
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from processor.reader.segment_blocks import _verified_blocks as verified_blocks
from processor.reader.segment_keys import SegmentCipher
from processor.segment.block_columns import RecordColumns
from processor.segment.block_header import BlockInfo
from processor.segment.records import Header, KafkaRecord
from processor.storage.chunk_storage import ChunkStorage

if TYPE_CHECKING:
    from processor.segment.bulk_records import BinaryColumn, BlockArrays

SCHEMA_DDL_NO_HEADERS = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "timestampType int"
)
SCHEMA_DDL = SCHEMA_DDL_NO_HEADERS + ", headers array<struct<key:string,value:binary>>"
TIMESTAMP_US = pa.timestamp("us", tz="UTC")
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


def _arrow_bytes(size: int) -> np.ndarray:
    """The decoder's byte buffers from Arrow's memory pool (its pages reused from block to block)."""
    return np.frombuffer(pa.allocate_buffer(size), np.uint8)


def _binary_array(col: BinaryColumn, string: bool = False) -> pa.Array:
    """A decoded binary column as an Arrow array over the same memory (a bitmap built only when
    some row is null)."""
    n = len(col.validity)
    valid = int(np.count_nonzero(col.validity))
    bitmap = None if valid == n else pa.py_buffer(np.packbits(col.validity.view(np.bool_), bitorder="little"))
    return pa.Array.from_buffers(
        pa.string() if string else pa.binary(),
        n,
        [bitmap, pa.py_buffer(col.offsets), pa.py_buffer(col.data)],
        null_count=n - valid,
    )


def arrays_to_batch(
    topic: str, partition: int, arrays: BlockArrays, include_headers: bool = True
) -> pa.RecordBatch:
    """One block's decoded arrays as an Arrow batch: every column over the decoder's buffers."""
    n = len(arrays)
    columns = [
        _binary_array(arrays.keys),
        _binary_array(arrays.values),
        pa.repeat(pa.scalar(topic, pa.string()), n),
        pa.repeat(pa.scalar(partition, pa.int32()), n),
        pa.array(arrays.offsets, pa.int64()),
        # from the buffer: pa.array(..., timestamp with a time zone) converts row by row (0.3 us a row)
        pa.Array.from_buffers(TIMESTAMP_US, n, [None, pa.py_buffer(arrays.timestamps * 1000)]),
        pa.array(arrays.timestamp_types.astype(np.int32) - 1, pa.int32()),  # archive 1/2 -> 0/1
    ]
    if not include_headers:
        return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA_NO_HEADERS)
    items = pa.StructArray.from_arrays(
        [_binary_array(arrays.header_keys, string=True), _binary_array(arrays.header_values)],
        fields=list(HEADER_TYPE),
    )
    offsets = np.zeros(n + 1, dtype=np.int32)
    np.cumsum(arrays.header_counts, out=offsets[1:])
    mask = pa.array(arrays.header_counts == 0) if n else None
    headers = pa.ListArray.from_arrays(
        pa.array(offsets, pa.int32()), items, mask=mask, type=pa.list_(HEADER_TYPE)
    )
    return pa.RecordBatch.from_arrays([*columns, headers], schema=ARROW_SCHEMA)


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

    Blocks are decoded in bulk (CRCs checked there; headers only if asked for). A block large
    enough is one Arrow batch of its own; smaller ones are gathered until a batch holds
    ``BATCH_ROWS`` rows or ``BATCH_BYTES`` of payload."""
    # numba comes with the bulk decoder (~1 s to load and compile, once a process): loaded where
    # blocks are read (Spark's executors), not by every process that imports this module
    from processor.segment.bulk_records import decode_block_arrays

    timed = min_timestamp is not None or max_timestamp is not None

    def decode(block: memoryview, where: str) -> BlockArrays:
        return decode_block_arrays(
            block,
            where=where,
            min_offset=from_offset,
            max_offset=until_offset - 1,
            with_headers=include_headers,
            alloc=_arrow_bytes,
        )

    def done(batch: pa.RecordBatch) -> pa.RecordBatch:
        return _time_filtered(batch, min_timestamp, max_timestamp) if timed else batch

    pending: list[pa.RecordBatch] = []
    pending_rows = pending_bytes = 0
    # the reader's fetch-and-verify loop, with this decoder (its public readers decode to lists)
    for arrays in verified_blocks(
        storage,
        data_object_key,
        segment_name,
        list(blocks),
        first_block,
        decode,
        CHUNK_BYTES,
        cipher,
    ):
        BLOCKS_READ.add(1)
        if not len(arrays):
            continue
        batch = arrays_to_batch(topic, partition, arrays, include_headers)
        big = len(arrays) >= BLOCK_BATCH_ROWS or arrays.payload_bytes >= BLOCK_BATCH_BYTES
        if big and not pending:
            yield done(batch)
            continue
        pending.append(batch)
        pending_rows += len(arrays)
        pending_bytes += arrays.payload_bytes
        if pending_rows >= BATCH_ROWS or pending_bytes >= BATCH_BYTES:
            yield done(pa.concat_batches(pending))
            pending, pending_rows, pending_bytes = [], 0, 0
    if pending:
        yield done(pa.concat_batches(pending))
