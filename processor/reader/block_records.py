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

import dataclasses
from collections.abc import Callable

from processor.segment.block_header import BLOCK_FORMAT_V1
from processor.segment.blocks import block_payload
from processor.segment.blocks_v1 import decode_records_v1
from processor.segment.blocks_v2 import block_batches
from processor.segment.entries_v2 import batch_last_offset, batch_records
from processor.segment.records import Header, KafkaRecord, TimestampType

_CREATE_TIME = TimestampType.CREATE_TIME
_LOG_APPEND_TIME = TimestampType.LOG_APPEND_TIME
_FIELDS = ("offset", "timestamp", "timestamp_type", "key", "value", "headers")
RecordMaker = Callable[[int, int, TimestampType, bytes | None, bytes | None, tuple[Header, ...]], KafkaRecord]


def _record_maker() -> RecordMaker:
    """``KafkaRecord``'s constructor, or the same record built at a third of the cost: the frozen
    dataclass's ``__init__`` goes through ``object.__setattr__`` for each field (~1.4 us a record
    here, most of a remote read's CPU), where its slots' own descriptors set them directly. Used only
    while the class is what this was written for (these six fields in this order, slots, nothing
    run after ``__init__``); otherwise the constructor itself."""
    names = tuple(f.name for f in dataclasses.fields(KafkaRecord))
    if names != _FIELDS or hasattr(KafkaRecord, "__post_init__") or "__slots__" not in vars(KafkaRecord):
        return KafkaRecord
    setters = [vars(KafkaRecord)[name].__set__ for name in _FIELDS]
    set_offset, set_ts, set_ts_type, set_key, set_value, set_headers = setters
    new = object.__new__

    def make(
        offset: int,
        timestamp: int,
        timestamp_type: TimestampType,
        key: bytes | None,
        value: bytes | None,
        headers: tuple[Header, ...],
    ) -> KafkaRecord:
        record: KafkaRecord = new(KafkaRecord)
        set_offset(record, offset)
        set_ts(record, timestamp)
        set_ts_type(record, timestamp_type)
        set_key(record, key)
        set_value(record, value)
        set_headers(record, headers)
        return record

    return make


make_record = _record_maker()


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
    a control batch holds none), each built through its slots (:data:`make_record`)."""
    return batch_records(batch, where=where, min_offset=min_offset, limit=limit, make=make_record)
