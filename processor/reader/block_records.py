"""A verified block's records within a read's bounds: from ``min_offset`` on, at most ``limit`` of them.

A remote read of n records at a random offset touches two blocks on average: the one holding the
offset (the records before it are not wanted) and the next (only its first records are). Decoding
each block whole (``processor.segment.blocks.decode_block``) built every record of both, about twice
the records returned, and building a ``KafkaRecord`` is most of a read's CPU (~1.4 us each against
~0.2 us for aiokafka's C reader to step over a record). Here a version 2 block's batches that end
below ``min_offset`` are not decoded, the records below it in the batch that holds it are stepped
over without being built, and decoding stops once ``limit`` records are had.

Nothing is returned unverified: the block's header and payload CRC are checked first (``payload_crc``
False only for bytes a block cache verified as a whole), and every batch a record is taken from has
its CRC-32C checked before aiokafka reads it. Batches past the limit are covered by the payload CRC.
Version 1 blocks (one entry per record, early versions) are decoded as before and cut.
"""

from __future__ import annotations

import itertools

from aiokafka.record.default_records import DefaultRecordBatch

from processor.errors import FormatError
from processor.segment.block_header import BLOCK_FORMAT_V1
from processor.segment.blocks import block_payload
from processor.segment.blocks_v1 import decode_records_v1
from processor.segment.blocks_v2 import block_batches
from processor.segment.checksums import batch_crc_ok
from processor.segment.entries_v2 import batch_last_offset
from processor.segment.records import KafkaRecord, TimestampType

_CREATE_TIME = TimestampType.CREATE_TIME
_LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME


def block_records(
    block: memoryview,
    *,
    where: str,
    min_offset: int | None = None,
    limit: int | None = None,
    payload_crc: bool = True,
) -> list[KafkaRecord]:
    """The records of a whole block (header + payload, format 1 or 2, not encrypted) with offsets
    from ``min_offset`` on, the first ``limit`` of them (None: no bound). Raises FormatError."""
    if limit is not None and limit < 0:
        raise ValueError(f"limit {limit}: must be at least 0")
    header, payload = block_payload(block, where=where, payload_crc=payload_crc)
    if header.format_version == BLOCK_FORMAT_V1:
        records = decode_records_v1(header, payload, where=where, min_offset=min_offset)
        return records if limit is None else records[:limit]
    out: list[KafkaRecord] = []
    # framing, count and first/last offsets checked against the header for every batch, wanted or not
    for batch in block_batches(header, payload, where=where):
        wanted = None if limit is None else limit - len(out)
        if wanted == 0:
            break
        if min_offset is not None and batch_last_offset(batch) < min_offset:
            continue
        out.extend(batch_records_within(batch, where=where, min_offset=min_offset, limit=wanted))
    return out


def batch_records_within(
    batch: memoryview | bytes, *, where: str, min_offset: int | None = None, limit: int | None = None
) -> list[KafkaRecord]:
    """One batch's records from ``min_offset`` on, at most ``limit`` (CRC-32C verified, any codec;
    a control batch holds none). The records below ``min_offset`` are stepped over by aiokafka's C
    reader without a ``KafkaRecord`` built for them, and reading stops at ``limit``."""
    raw = bytes(batch)
    try:
        if not batch_crc_ok(raw):
            raise FormatError(f"{where}: record batch CRC-32C mismatch")
        decoded = DefaultRecordBatch(raw)
        if decoded.is_control_batch:
            return []
        ts_type = _LOG_APPEND_TIME if decoded.timestamp_type else _CREATE_TIME
        records = iter(decoded)
        if min_offset is not None and decoded.base_offset < min_offset:
            low = min_offset
            records = itertools.dropwhile(lambda r: r.offset < low, records)
        if limit is not None:
            records = itertools.islice(records, limit)
        return [
            KafkaRecord(r.offset, r.timestamp, ts_type, r.key, r.value, tuple(r.headers)) for r in records
        ]
    except FormatError:
        raise
    except Exception as exc:  # aiokafka raises its own errors (and struct/zstd ones) for bad bytes
        raise FormatError(f"{where}: record batch does not decode: {exc!r}") from exc
