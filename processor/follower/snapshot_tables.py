"""The RocksDB side of snapshots: a metadata partition's keys written from the cache into a table
file (SST), and a table from the bucket checked and made ready to ingest into a cache.

Writing: one pass over one consistent view of the cache (an iterator: what one applied batch left),
each key sent to the table of the metadata partition its source partition maps to. Keys come out of
the view in order, so each table's share is in order too, as RocksDB's SstFileWriter needs.

Checking a table from the bucket (:func:`open_table`): it is ingested into a scratch database of its
own, never straight into the cache, and looked at there with seeks (no read of every key): it holds
only the fold's key prefixes (``E H L O S X``: no consumed offsets, layout version or origin), and
the source partitions of its ``E H L O X`` keys are those its header lists, each of this metadata
partition. A follower that keeps some topics only then copies their keys out of it (their ``S``
keys found through the ``L`` keys and, for segments whose deletion finished, by reading each
``S`` record's partition); one that keeps every topic ingests the file as it is.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import IngestExternalFileOptions, Options, Rdict, RdictIter, SstFileWriter

from processor.follower.cache_keys import I64, U32, tp_key
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshot_format import SnapshotFormatError, SnapshotHeader
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for

STATE_PREFIXES = b"EHLOSX"
_TP_PREFIXES = frozenset(b"EHLOX")  # keys whose source partition follows the prefix byte


# -- the partition of a stored segment record (S keys hold none) ---------------------------------------


def _varint(raw: bytes, at: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = raw[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), at  # Avro's zigzag
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")


def segment_partition_key(raw: bytes) -> bytes:
    """The ``tp`` key part (cache_keys.tp_key) of a segment record as the cache stores it
    (``[1][0][Avro body]``, the body starting with the segment id's topic, optional topic id and
    partition): read without decoding the record (a snapshot reads millions)."""
    if raw[:2] != b"\x01\x00":
        raise ValueError("not a segment record")
    length, at = _varint(raw, 2)
    topic = raw[at : at + length]
    at += length
    branch, at = _varint(raw, at)
    if branch == 1:
        length, at = _varint(raw, at)
        at += length
    partition, at = _varint(raw, at)
    return topic + b"\x00" + U32.pack(partition)


def segment_partition(raw: bytes) -> TopicPartition:
    tp = segment_partition_key(raw)
    return TopicPartition(tp[:-5].decode(), U32.unpack(tp[-4:])[0])


def _tp_of(tp_raw: bytes) -> TopicPartition:
    return TopicPartition(tp_raw[:-5].decode(), U32.unpack(tp_raw[-4:])[0])


def _tp_part(key: bytes) -> bytes:
    """The ``tp`` part of an ``E H L O X`` key (``E`` keys are prefix + tp alone)."""
    end = key.index(b"\x00", 1) + 5
    return key[1:end]


# -- writing ------------------------------------------------------------------------------------------


@dataclass
class Table:
    """One metadata partition's table being written."""

    path: Path
    writer: SstFileWriter | None = None
    entries: int = 0
    partitions: set[bytes] = field(default_factory=set)  # tp parts


def write_tables(
    cache: MetadataCache, partitions: set[int], metadata_partitions: int, workdir: Path
) -> tuple[dict[int, int], dict[int, Table]]:
    """The consumed offsets of ``partitions`` (those the cache has consumed) and, for each, its keys
    in a table file in ``workdir`` (``Table.writer`` None: no keys), from one view of the cache."""
    it = cache.consistent_iterator()
    offsets: dict[int, int] = {}
    it.seek(b"C")
    while it.valid() and it.key()[:1] == b"C":
        p = U32.unpack(it.key()[1:])[0]
        if p in partitions:
            offsets[p] = I64.unpack(it.value())[0]
        it.next()
    tables = {p: Table(workdir / f"{p:05d}.sst") for p in offsets}
    owners: dict[bytes, int] = {}
    options = cache.sst_options()

    def owner(tp_raw: bytes) -> int:
        p = owners.get(tp_raw)
        if p is None:
            p = owners[tp_raw] = metadata_partition_for(_tp_of(tp_raw), metadata_partitions)
        return p

    it.seek(b"E")
    try:
        while it.valid():
            key = it.key()
            kind = key[0]
            if kind in _TP_PREFIXES:
                tp_raw = _tp_part(key)
            elif kind == 0x53:  # S
                tp_raw = segment_partition_key(it.value())
            else:  # M, V: not the fold's state
                it.next()
                continue
            table = tables.get(owner(tp_raw))
            if table is not None:
                if table.writer is None:
                    table.writer = SstFileWriter(options=options)
                    table.writer.open(str(table.path))
                table.writer[key] = it.value()
                table.entries += 1
                table.partitions.add(tp_raw)
            it.next()
    finally:
        for table in tables.values():
            if table.writer is not None:
                table.writer.finish()
    return offsets, tables


def partitions_of(table: Table) -> tuple[TopicPartition, ...]:
    return tuple(sorted((_tp_of(raw) for raw in table.partitions), key=tp_key))


# -- checking and loading -----------------------------------------------------------------------------


def _scratch_options() -> Options:
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    return options


def _copy_ingest() -> IngestExternalFileOptions:
    options = IngestExternalFileOptions()
    options.set_move_files(False)
    return options


@dataclass
class OpenTable:
    """A checked table in a scratch database (closed and removed by ``close``)."""

    db: Rdict
    path: Path

    def close(self) -> None:
        self.db.close()
        shutil.rmtree(self.path, ignore_errors=True)


def open_table(table: Path, header: SnapshotHeader, scratch: Path) -> OpenTable:
    """Ingest ``table`` (copied, the file stays) into a scratch database and check what it holds
    against ``header``; SnapshotFormatError when it holds anything else."""
    db = Rdict(str(scratch), _scratch_options())
    opened = OpenTable(db, scratch)
    try:
        try:
            db.ingest_external_file([str(table)], _copy_ingest())
        except Exception as exc:  # rocksdict raises plain Exception for a file RocksDB cannot read
            raise SnapshotFormatError(f"snapshot table not readable: {exc}") from None
        it = db.iter()
        try:
            _check(it, header)
        finally:
            del it  # an iterator keeps the database open
    except BaseException:
        opened.close()
        raise
    return opened


def _check(it: RdictIter, header: SnapshotHeader) -> None:
    listed = {tp_key(tp) for tp in header.partitions}
    for tp in header.partitions:
        if metadata_partition_for(tp, header.metadata_partitions) != header.metadata_partition:
            raise SnapshotFormatError(f"snapshot lists {tp}, of another metadata partition")
    it.seek_to_first()
    while it.valid():
        key = it.key()
        kind = key[0]
        if kind not in STATE_PREFIXES:
            raise SnapshotFormatError(f"snapshot table holds a key that is not the fold's state: {key[:1]!r}")
        if kind == 0x53:  # S: segments by id; reachable only through a listed partition's keys
            it.seek(b"T")
            continue
        try:
            tp_raw = _tp_part(key)
        except ValueError:
            raise SnapshotFormatError("snapshot table holds a malformed key") from None
        if tp_raw not in listed:
            raise SnapshotFormatError("snapshot table holds a partition its header does not list")
        # on to the next partition or prefix: past every key of this one (no key part after the
        # partition is 25 bytes of 0xff: offsets are below 2^62, metadata keys are UTF-8)
        it.seek(key[:1] + tp_raw + b"\xff" * 25)


def offsets_table(path: Path, options: Options, partition: int, next_offset: int) -> Path:
    """A one-key table: the partition's consumed offset (ingested with the state, atomically)."""
    writer = SstFileWriter(options=options)
    writer.open(str(path))
    writer[b"C" + U32.pack(partition)] = I64.pack(next_offset)
    writer.finish()
    return path


def filtered_table(
    opened: OpenTable, path: Path, options: Options, topics: frozenset[str]
) -> tuple[Path | None, int]:
    """The keys of ``topics``' state copied out of a checked table into a new one (None: none
    kept), and how many, streamed in key order. A topic's ``E H L O X`` keys are contiguous (the
    topic leads their ``tp`` part): found with one seek a prefix and topic, not by reading every
    key. ``S`` keys (by segment id) are each looked at, but only the topic at the start of the value
    (a length byte and the name: no decoding); a value that does not start plainly is read as
    :func:`segment_partition_key` reads it."""
    heads = sorted(t.encode() + b"\x00" for t in topics)
    plain = {b"\x01\x00" + bytes([2 * len(t)]) + t: t for t in (h[:-1] for h in heads) if len(t) <= 63}
    raw_topics = {h[:-1] for h in heads}
    out = _Streamed(path, options)
    db = opened.db
    for prefix in b"EHLO":
        for head in heads:
            out.extend(_prefixed(db, bytes([prefix]) + head))
    for key, value in _prefixed(db, b"S"):
        length = value[2] if len(value) > 2 else 0x80
        if value[:2] == b"\x01\x00" and length < 0x80 and not length & 1:
            if value[: 3 + (length >> 1)] in plain:
                out.add(key, value)
        elif segment_partition_key(value)[:-5] in raw_topics:  # the tp part: topic, 0x00, u32
            out.add(key, value)
    for head in heads:
        out.extend(_prefixed(db, b"X" + head))
    return out.finish()


class _Streamed:
    """An SST file written key by key in order, opened at its first key (none: no file)."""

    def __init__(self, path: Path, options: Options) -> None:
        self.path, self.options = path, options
        self.writer: SstFileWriter | None = None
        self.entries = 0

    def add(self, key: bytes, value: bytes) -> None:
        if self.writer is None:
            self.writer = SstFileWriter(options=self.options)
            self.writer.open(str(self.path))
        self.writer[key] = value
        self.entries += 1

    def extend(self, items: Iterator[tuple[bytes, bytes]]) -> None:
        for key, value in items:
            self.add(key, value)

    def finish(self) -> tuple[Path | None, int]:
        if self.writer is None:
            return None, 0
        self.writer.finish()
        return self.path, self.entries


def _prefixed(db: Rdict, prefix: bytes) -> Iterator[tuple[bytes, bytes]]:
    it = db.iter()
    it.seek(prefix)
    while it.valid() and it.key().startswith(prefix):
        yield it.key(), it.value()
        it.next()
