"""Erasing records from one archived Kafka record batch (message format v2) by key. Pure.

``rewrite_batch(batch, erase)`` returns the batch without the records whose key ``erase`` accepts,
with every other record where it was. It writes what Apache Kafka's log cleaner writes when it
removes records from a batch (``MemoryRecords.filterTo`` / ``buildRetainedRecordsInto``):

- the base offset is kept and each kept record keeps its offset delta, so its offset; the batch's
  ``lastOffsetDelta`` is kept too (the cleaner's ``overrideLastOffset``), so the batch still spans
  its original offsets and a consumer's next fetch offset (``lastOffset + 1``) is what it was.
  Clients step over the missing offsets as they do on a compacted topic.
- attributes (codec, timestamp type, transactional, control, delete horizon), partition leader
  epoch, producer id, producer epoch and base sequence are kept.
- the records section is compressed again with the batch's own codec (``batch_codecs``; snappy in
  the framing it had); ``batchLength``, ``recordCount``, ``maxTimestamp`` and the CRC-32C follow.
  ``maxTimestamp``: the largest timestamp kept for CreateTime, the append time for LogAppendTime.
- a batch none of whose records is erased is returned as it was, byte for byte (the cleaner's
  ``writeOriginalBatch``).
- control batches (transaction markers) are returned untouched: their "key" is the marker type,
  never a record key.
- a batch left with no record is dropped (``batch`` None): the cleaner's ``DELETE_EMPTY``. It keeps
  an empty batch (``RETAIN_EMPTY``) in two cases only, neither of which applies to an archived
  segment: the last batch of a producer that is still active (the broker's producer state needs
  its last sequence and epoch for idempotence and fencing; nothing produces into an archive, and the
  restore stamps its own producer fields on the batches it sends) and the last batch of a cleaning
  round (so the log does not lose its last offset; a segment's end offset is in its index object
  and its metadata record, and readers already step over ranges no batch holds, as left by aborted
  transactions dropped at archive time). ``keep_if_empty=True`` writes the cleaner's empty batch
  instead (``DefaultRecordBatch.writeEmptyHeader``: the header alone, codec none, recordCount 0,
  firstTimestamp -1, the same offsets and producer fields), should a caller want a segment's last
  offset carried by a batch.

Differences from the cleaner, both allowed by the format: the kept records' bytes are copied as
stored, not re-encoded, so ``firstTimestamp`` (the base of every record's timestamp delta) is kept
rather than moved to the first kept record, and the create times inside a LogAppendTime batch
survive (the cleaner rewrites them to the append time; consumers see the append time either way).
Timestamp deltas are signed varlongs and Kafka's own delete-horizon batches have a base that is no
record's timestamp, so every client decodes the same timestamps.

The input is checked before anything is written: exactly one batch (its ``batchLength`` frames the
bytes given), magic 2, CRC-32C, and every record's framing (lengths inside the batch, offset
deltas increasing and within ``lastOffsetDelta``, ``recordCount`` records, nothing after them); a
corrupt batch is refused with ``FormatError``, never re-signed with a fresh CRC. Message formats v0
and v1 are never archived (``entries_v2`` refuses them at fetch time): such bytes are refused with a
``FormatError`` naming the batch's offset and magic.

Record layout inside the (decompressed) records section (Kafka's, varints zigzag-encoded)::

    length varint | attributes i8 | timestampDelta varlong | offsetDelta varint
    keyLength varint | key | valueLength varint | value | headerCount varint | headers
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from processor.errors import FormatError
from processor.segment.batch_codecs import compress_records, decompress_records, is_xerial
from processor.segment.checksums import BATCH_CRC_FROM, batch_crc_ok, crc32c_of
from processor.segment.entries_v2 import (
    ATTR_CODEC_MASK,
    ATTR_CONTROL,
    ATTR_LOG_APPEND_TIME,
    BATCH_HEADER,
    BATCH_HEADER_LEN,
    BATCH_LOG_OVERHEAD,
    batch_keys_unchecked,
)

KeyPredicate = Callable[[bytes | None], bool]  # True: erase the record with this key (None: null key)

_MAGIC_AT = 16
_ATTR_DELETE_HORIZON = 0x40  # firstTimestamp is the delete horizon (KIP-534)
_NO_TIMESTAMP = -1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1


@dataclass(frozen=True, slots=True)
class RecordSpan:
    """One record of a decompressed records section: its bytes are ``section[start:end]``."""

    start: int
    end: int
    timestamp_delta: int
    offset_delta: int
    key: bytes | None


@dataclass(frozen=True, slots=True)
class BatchRewrite:
    """``batch``: what to store in place of the input (the input itself when nothing was erased),
    None when the batch was left empty and dropped. ``records``: data records in the input."""

    batch: bytes | None
    records: int
    removed: int

    @property
    def changed(self) -> bool:
        return self.removed > 0


@dataclass(frozen=True, slots=True)
class _Header:
    base_offset: int
    leader_epoch: int
    attributes: int
    last_offset_delta: int
    first_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


def rewrite_batch(
    batch: bytes | bytearray | memoryview,
    erase: KeyPredicate,
    *,
    where: str = "batch",
    keep_if_empty: bool = False,
) -> BatchRewrite:
    """The batch without the records whose key ``erase`` accepts (see the module docstring)."""
    view = memoryview(batch)
    header = _checked_header(view, where)
    if header.attributes & ATTR_CONTROL:
        return BatchRewrite(bytes(view), 0, 0)
    section = _section(view, header, where)
    spans = _skim(section, header, where)
    kept = [span for span in spans if not erase(span.key)]
    if len(kept) == len(spans):
        return BatchRewrite(bytes(view), len(spans), 0)
    removed = len(spans) - len(kept)
    if not kept:
        return BatchRewrite(_empty_batch(header) if keep_if_empty else None, len(spans), removed)
    body = b"".join([section[span.start : span.end] for span in kept])
    codec = header.attributes & ATTR_CODEC_MASK
    records = compress_records(codec, body, xerial=is_xerial(view[BATCH_HEADER_LEN:]))
    if header.attributes & ATTR_LOG_APPEND_TIME:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = header.first_timestamp + max(span.timestamp_delta for span in kept)
    out = _with_header(header, header.attributes, header.first_timestamp, max_timestamp, len(kept), records)
    return BatchRewrite(out, len(spans), removed)


def erasing(keys: Iterable[bytes]) -> KeyPredicate:
    """The predicate erasing exactly ``keys`` (a null key is never one of them)."""
    if isinstance(keys, bytes | bytearray | memoryview):  # one key would erase its bytes' values
        raise TypeError("erasing() takes a collection of keys, not one key")
    erased = frozenset(keys)
    return lambda key: key in erased


def batch_keys(batch: bytes | bytearray | memoryview, *, where: str = "batch") -> list[bytes | None]:
    """The keys of a batch's data records, in order (None for a null key); a control batch has
    none. What a key filter is built from. The batch's framing, magic and CRC are checked as in
    ``rewrite_batch``; its records are decoded by aiokafka's C reader (``entries_v2``), about five
    times faster than ``record_spans``, which is for rewriting."""
    view = memoryview(batch)
    header = _checked_header(view, where)
    if header.attributes & ATTR_CONTROL:
        return []
    try:
        return batch_keys_unchecked(view)
    except Exception as exc:  # aiokafka raises its own errors (and struct/codec ones) for bad bytes
        raise FormatError(f"{_at(where, header)}: records do not decode: {exc!r}") from exc


def record_spans(batch: bytes | bytearray | memoryview, *, where: str = "batch") -> list[RecordSpan]:
    """Every record of a checked data batch, as spans of ``decompressed_section(batch)``; a control
    batch has none (tests and tools compare kept records byte for byte with these)."""
    view = memoryview(batch)
    header = _checked_header(view, where)
    if header.attributes & ATTR_CONTROL:
        return []
    return _skim(_section(view, header, where), header, where)


def data_section(
    batch: bytes | bytearray | memoryview, *, where: str = "batch"
) -> tuple[int, int, bytes | memoryview] | None:
    """(base offset, record count, records section decompressed) of a checked data batch; None for
    a control batch. An uncompressed section is a view of ``batch``, not a copy. What the key
    filter's compiled walk reads (``key_kernels``)."""
    view = memoryview(batch)
    header = _checked_header(view, where)
    if header.attributes & ATTR_CONTROL:
        return None
    if header.attributes & ATTR_CODEC_MASK == 0:
        return header.base_offset, header.record_count, view[BATCH_HEADER_LEN:]
    return header.base_offset, header.record_count, _section(view, header, where)


def decompressed_section(batch: bytes | bytearray | memoryview, *, where: str = "batch") -> bytes:
    """A checked batch's records section, decompressed."""
    view = memoryview(batch)
    return _section(view, _checked_header(view, where), where)


def _section(view: memoryview, header: _Header, where: str) -> bytes:
    codec = header.attributes & ATTR_CODEC_MASK
    return decompress_records(codec, view[BATCH_HEADER_LEN:], where=_at(where, header))


def _at(where: str, header: _Header) -> str:
    return f"{where}: record batch at offset {header.base_offset}"


def _checked_header(view: memoryview, where: str) -> _Header:
    if len(view) <= _MAGIC_AT:
        raise FormatError(f"{where}: record batch of {len(view)} bytes is truncated")
    base = int.from_bytes(view[:8], "big", signed=True)
    magic = view[_MAGIC_AT]
    if magic != 2:
        raise FormatError(
            f"{where}: record batch at offset {base} has message format magic {magic}: only v2 "
            "batches (magic 2) are archived and rewritten; v0/v1 message sets are refused"
        )
    if len(view) < BATCH_HEADER_LEN:
        raise FormatError(f"{where}: record batch at offset {base} is truncated ({len(view)} bytes)")
    (_base, blen, epoch, _magic, _crc, attrs, delta, first_ts, max_ts, pid, pepoch, seq, count) = (
        BATCH_HEADER.unpack_from(view)
    )
    if blen + BATCH_LOG_OVERHEAD != len(view):
        raise FormatError(
            f"{where}: record batch at offset {base} claims {blen + BATCH_LOG_OVERHEAD} bytes, "
            f"{len(view)} given"
        )
    if not batch_crc_ok(view):
        raise FormatError(f"{where}: record batch at offset {base} fails its CRC-32C")
    if delta < 0 or count < 0:
        raise FormatError(f"{where}: record batch at offset {base} has an impossible header")
    return _Header(base, epoch, attrs, delta, first_ts, max_ts, pid, pepoch, seq, count)


def _skim(section: bytes, header: _Header, where: str) -> list[RecordSpan]:
    """Each record's span, timestamp delta, offset delta and key; the value and headers are
    skipped by the record's length (the batch CRC already vouches for the bytes: this checks
    framing so that nothing outside a record is ever copied as part of it)."""
    spans: list[RecordSpan] = []
    pos, end = 0, len(section)
    last_delta = -1
    try:
        for _ in range(header.record_count):
            length, body = _varint(section, pos, end)
            rec_end = body + length
            if length < 1 or rec_end > end:
                raise ValueError(f"record length {length} at byte {pos} overruns the section")
            ts_delta, p = _varint(section, body + 1, rec_end)  # body + 1: past the attributes byte
            off_delta, p = _varint(section, p, rec_end)
            key_len, p = _varint(section, p, rec_end)
            if key_len > rec_end - p:
                raise ValueError(f"key of {key_len} bytes at byte {p} overruns its record")
            if not last_delta < off_delta <= header.last_offset_delta:
                raise ValueError(
                    f"offset delta {off_delta} after {last_delta} (lastOffsetDelta "
                    f"{header.last_offset_delta})"
                )
            if not _I64_MIN <= header.first_timestamp + ts_delta <= _I64_MAX:
                raise ValueError(f"timestamp delta {ts_delta} leaves the int64 range")
            key = None if key_len < 0 else section[p : p + key_len]
            spans.append(RecordSpan(pos, rec_end, ts_delta, off_delta, key))
            last_delta, pos = off_delta, rec_end
    except ValueError as exc:
        raise FormatError(f"{_at(where, header)}: bad record framing: {exc}") from exc
    if pos != end:
        raise FormatError(f"{_at(where, header)}: {end - pos} bytes after its {header.record_count} records")
    return spans


def _varint(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's varint and varlong, at most 10 bytes) at ``buf[pos:end]``."""
    result = shift = 0
    while True:
        if pos >= end:
            raise ValueError(f"varint at byte {pos} runs past its bounds")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ValueError(f"varint ending at byte {pos} is longer than 10 bytes")


def _with_header(
    header: _Header, attributes: int, first_timestamp: int, max_timestamp: int, count: int, records: bytes
) -> bytes:
    out = bytearray(BATCH_HEADER_LEN + len(records))
    BATCH_HEADER.pack_into(
        out,
        0,
        header.base_offset,
        len(out) - BATCH_LOG_OVERHEAD,
        header.leader_epoch,
        2,
        0,
        attributes,
        header.last_offset_delta,
        first_timestamp,
        max_timestamp,
        header.producer_id,
        header.producer_epoch,
        header.base_sequence,
        count,
    )
    out[BATCH_HEADER_LEN:] = records
    struct.pack_into(">I", out, 17, crc32c_of(memoryview(out)[BATCH_CRC_FROM:]))
    return bytes(out)


def _empty_batch(header: _Header) -> bytes:
    """Kafka's ``writeEmptyHeader``: codec none, no delete horizon, firstTimestamp NO_TIMESTAMP."""
    attributes = header.attributes & ~ATTR_CODEC_MASK & ~_ATTR_DELETE_HORIZON
    return _with_header(header, attributes, _NO_TIMESTAMP, header.max_timestamp, 0, b"")
