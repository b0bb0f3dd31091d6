"""Snapshots of the folded metadata in the bucket: taken from a follower cache, chosen and checked,
and bulk-loaded into a new cache, which then folds only the topic's tail.

Where they live: ``{prefix}/snapshots=metadata/{metadata topic}-{its topic id}/{partition:05d}/
{next_offset:020d}-{written_ms:013d}-{nonce}.snap`` (a folder name no topic can have; the format is
:mod:`processor.follower.snapshot_format`). Each object is written once, by a conditional create,
under a name of its own: two processes that snapshot the same partition at once write two valid
snapshots, never one torn one. The newest is tried first.

A snapshot is loaded only when every check holds (:func:`load_snapshots`), else the next older one
is tried, then the topic from its start; each refusal is logged with its reason and counted in
``processor_metadata_snapshots_refused_total{reason}``:

- its format (magic, version, CRCs, lengths) and what its table holds (only the fold's state, only
  partitions of this metadata partition: :mod:`processor.follower.snapshot_tables`): ``corrupt``;
- it was taken from this metadata topic (name and topic id), under this partition count and the
  cache layout this code reads: ``foreign``;
- the topic still holds what it was taken after: ``low watermark <= next_offset <= high
  watermark`` (``truncated``: the topic lost records the snapshot reflects; ``gone``: records after
  it were deleted, so its tail cannot be read), and the record at ``last_offset`` is the one it was
  taken after (same CRC of key and value; ``diverged``: a topic that lost its tail and was written
  again). A record that is no longer there was compacted away, which the topic's
  ``min.compaction.lag.ms`` allows only once the record is that old; a younger one missing is
  ``diverged`` too.

The loaded state is the fold's own (the cache keys as the fold wrote them), so every fencing rule
holds as it held for the process that took the snapshot. What a snapshot cannot prove is who wrote
it: anyone who may write the bucket's prefix can plant one, as they can delete the archive itself.
"""

from __future__ import annotations

import logging
import mmap
import shutil
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from processor import metrics
from processor.errors import ProcessorError, StorageError
from processor.follower.cache_keys import CACHE_VERSION
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshot_format import (
    TRAILER_LEN,
    ByteSource,
    SnapshotFormatError,
    SnapshotHeader,
    check_trailer,
    decode_header,
    encode_header,
    encode_trailer,
    record_crc,
)
from processor.follower.snapshot_tables import filtered_table, offsets_table, open_table
from processor.segment.checksums import crc32c_of
from processor.segment.object_keys import SNAPSHOT_FOLDER
from processor.storage.chunk_storage import ChunkInfo, ChunkStorage

log = logging.getLogger(__name__)

READ_BYTES = 8 << 20  # one ranged GET of a snapshot being loaded


def snapshot_folder(prefix: str, origin: str, partition: int) -> str:
    """The folder of one metadata partition's snapshots (``origin``: ``name/topic id``)."""
    name, _, topic_id = origin.partition("/")
    folder = f"{SNAPSHOT_FOLDER}/{name}-{topic_id}/{partition:05d}/"
    return f"{prefix}/{folder}" if prefix else folder


def snapshot_key(prefix: str, origin: str, partition: int, next_offset: int, written_ms: int) -> str:
    nonce = uuid.uuid4().hex[:12]
    return f"{snapshot_folder(prefix, origin, partition)}{next_offset:020d}-{written_ms:013d}-{nonce}.snap"


def _sort_key(info: ChunkInfo) -> tuple[int, int, str]:
    name = info.key.rsplit("/", 1)[-1]
    try:
        offset, written = name.split("-")[:2]
        return int(offset), int(written), name
    except ValueError:
        return -1, -1, name


# -- what a snapshot is taken after, and a taken one ------------------------------------------------


@dataclass(frozen=True)
class LastRecord:
    """The record a snapshot was taken after, as the topic holds it (see the module's checks)."""

    offset: int
    crc: int
    timestamp_ms: int


@dataclass
class TakenSnapshot:
    header: SnapshotHeader  # payload_len and payload_crc of the table
    table: Path | None  # the table file (None: no keys), in a temporary folder of the caller's

    @property
    def size(self) -> int:
        return len(encode_header(self.header)) + self.header.payload_len + TRAILER_LEN


# -- the bucket ---------------------------------------------------------------------------------------


class _RangedSource(ByteSource):
    """A snapshot object read front to back in ranged GETs of ``READ_BYTES`` (bounded memory)."""

    def __init__(self, storage: ChunkStorage, key: str, size: int) -> None:
        self.storage, self.key, self.size = storage, key, size
        self._buffer = b""
        self._at = 0  # object offset of the buffer's end

    def read(self, n: int) -> bytes:
        while len(self._buffer) < n and self._at < self.size:
            length = min(READ_BYTES, self.size - self._at, max(n - len(self._buffer), 1 << 16))
            self._buffer += self.storage.read(self.key, self._at, length)
            self._at += length
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        return out


class SnapshotStore:
    """One metadata topic's snapshots in the bucket."""

    def __init__(self, storage: ChunkStorage, prefix: str, origin: str) -> None:
        self.storage, self.prefix, self.origin = storage, prefix, origin

    def listed(self, partition: int) -> list[ChunkInfo]:
        """The partition's snapshots, newest (highest next offset) first."""
        found = [
            info
            for info in self.storage.list(snapshot_folder(self.prefix, self.origin, partition))
            if info.key.endswith(".snap")
        ]
        return sorted(found, key=_sort_key, reverse=True)

    def put(self, taken: TakenSnapshot) -> str:
        """Write a taken snapshot (header, table, trailer) as one object; returns its key."""
        header = taken.header
        key = snapshot_key(
            self.prefix, self.origin, header.metadata_partition, header.next_offset, header.written_ms
        )
        head = encode_header(header)
        if taken.table is None:
            self.storage.create(key, [head, encode_trailer(head)])
            return key
        with (
            taken.table.open("rb") as handle,
            mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as mapped,
        ):
            view = memoryview(mapped)
            try:
                self.storage.create(key, [head, view, encode_trailer(head)])
            finally:
                view.release()
        return key

    def fetch(self, info: ChunkInfo, table: Path) -> SnapshotHeader:
        """Read a snapshot into ``table`` (its table file) in ranged GETs, checking its header, its
        table's length and CRC and its trailer; SnapshotFormatError when any fails."""
        source = _RangedSource(self.storage, info.key, info.size)
        header, raw = decode_header(source)
        if info.size != len(raw) + header.payload_len + TRAILER_LEN:
            raise SnapshotFormatError(
                f"snapshot of {info.size} bytes, not the {len(raw) + header.payload_len + TRAILER_LEN} "
                "its header says"
            )
        crc = 0
        left = header.payload_len
        with table.open("wb") as out:
            while left:
                chunk = source.read(min(left, READ_BYTES))
                if not chunk:
                    raise SnapshotFormatError("snapshot truncated in its payload")
                crc = crc32c_of(chunk, crc)
                out.write(chunk)
                left -= len(chunk)
        if header.payload_len and crc != header.payload_crc:
            raise SnapshotFormatError("snapshot payload CRC mismatch")
        check_trailer(source, raw)
        return header

    def prune(self, partition: int, keep: int) -> list[str]:
        """Delete all but the ``keep`` newest snapshots of ``partition``; returns the deleted keys."""
        old = self.listed(partition)[max(keep, 1) :]
        for info in old:
            self.storage.delete(info.key)
        return [info.key for info in old]


# -- loading ------------------------------------------------------------------------------------------


class TopicPeek(Protocol):
    """What the loader asks the metadata topic (the follower's consumer answers)."""

    def watermarks(self, partition: int) -> tuple[int, int]:
        """(low, high) watermarks of a metadata partition."""
        ...

    def record_from(self, partition: int, offset: int) -> tuple[int, bytes | None, bytes | None, int] | None:
        """The first record at or after ``offset``: (its offset, key, value, timestamp in ms); None
        when none was read in time."""
        ...


@dataclass(frozen=True)
class LoadOutcome:
    partition: int
    key: str | None  # the snapshot loaded, None: none (the topic from its start)
    next_offset: int | None
    entries: int
    refused: tuple[tuple[str, str, str], ...]  # (snapshot key, reason, detail) of each skipped
    seconds: float


class SnapshotRefused(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason, self.detail = reason, detail


def check_against_topic(
    header: SnapshotHeader, peek: TopicPeek, min_compaction_lag_ms: int, now_ms: int
) -> None:
    """Raise :class:`SnapshotRefused` unless the topic holds what ``header`` was taken after."""
    low, high = peek.watermarks(header.metadata_partition)
    if header.next_offset > high:
        raise SnapshotRefused(
            "truncated", f"taken at offset {header.next_offset}, the topic ends at {high} (it lost records)"
        )
    if header.next_offset < low:
        raise SnapshotRefused(
            "gone", f"taken at offset {header.next_offset}, the topic starts at {low} (its tail was deleted)"
        )
    if header.last_offset < 0:
        return  # taken of an empty partition: nothing to compare
    found = peek.record_from(header.metadata_partition, header.last_offset)
    if found is None:  # the topic reaches past it (checked above): not read in time
        raise SnapshotRefused("unreadable", f"the record at offset {header.last_offset} was not read in time")
    if found[0] == header.last_offset:
        if record_crc(found[1], found[2]) != header.last_record_crc:
            raise SnapshotRefused(
                "diverged", f"the record at offset {header.last_offset} is not the one it was taken after"
            )
        return
    age_ms = now_ms - header.last_timestamp_ms
    if age_ms < min_compaction_lag_ms:
        raise SnapshotRefused(
            "diverged",
            f"the record at offset {header.last_offset} is gone though younger ({age_ms} ms) than the "
            f"topic's min.compaction.lag.ms ({min_compaction_lag_ms})",
        )


def load_snapshots(
    cache: MetadataCache,
    store: SnapshotStore,
    peek: TopicPeek,
    partitions: list[int],
    metadata_partitions: int,
    topics: frozenset[str] | None,
    min_compaction_lag_ms: int,
) -> dict[int, LoadOutcome]:
    """Load the newest valid snapshot of each of ``partitions`` (metadata partitions the cache has
    never consumed) into the cache; each partition's state and its consumed offset go in with one
    ingestion, so a crash leaves a partition either loaded or not. A partition without a valid
    snapshot is left for the topic from its start. Never raises for a snapshot: a bucket that
    cannot be listed or read is logged and the topic is read instead (slower, the same result)."""
    outcomes: dict[int, LoadOutcome] = {}
    for p in partitions:
        started = time.monotonic()
        refused: list[tuple[str, str, str]] = []
        loaded: tuple[str, int, int] | None = None
        try:
            listed = store.listed(p)
        except StorageError as exc:
            log.warning("metadata partition %d: snapshots not listed (%s); reading the topic", p, exc)
            metrics.SNAPSHOTS_REFUSED.labels("unreadable").inc()
            listed = []
        for info in listed:
            try:
                loaded = _load_one(
                    cache, store, peek, info, p, metadata_partitions, topics, min_compaction_lag_ms
                )
                break
            except SnapshotRefused as exc:
                refused.append((info.key, exc.reason, exc.detail))
            except SnapshotFormatError as exc:
                refused.append((info.key, "corrupt", str(exc)))
            except (StorageError, ProcessorError, OSError) as exc:
                refused.append((info.key, "unreadable", str(exc)))
            reason, detail = refused[-1][1:]
            metrics.SNAPSHOTS_REFUSED.labels(reason).inc()
            log.warning("metadata snapshot %s not loaded (%s): %s", info.key, reason, detail)
        seconds = time.monotonic() - started
        if loaded is not None:
            key, next_offset, entries = loaded
            metrics.SNAPSHOTS_LOADED.inc()
            log.info(
                "metadata partition %d: loaded snapshot %s (%d entries, the topic from offset %d) in %.2f s",
                p,
                key,
                entries,
                next_offset,
                seconds,
            )
            outcomes[p] = LoadOutcome(p, key, next_offset, entries, tuple(refused), seconds)
        else:
            outcomes[p] = LoadOutcome(p, None, None, 0, tuple(refused), seconds)
    return outcomes


def _load_one(
    cache: MetadataCache,
    store: SnapshotStore,
    peek: TopicPeek,
    info: ChunkInfo,
    partition: int,
    metadata_partitions: int,
    topics: frozenset[str] | None,
    min_compaction_lag_ms: int,
) -> tuple[str, int, int]:
    work = Path(tempfile.mkdtemp(prefix="snapshot-load-", dir=cache.path.parent))
    try:
        header = store.fetch(info, work / "table.sst")
        if header.origin != store.origin:
            raise SnapshotRefused("foreign", f"taken of {header.origin}, not {store.origin}")
        if header.metadata_partition != partition or header.metadata_partitions != metadata_partitions:
            raise SnapshotRefused(
                "foreign",
                f"taken of metadata partition {header.metadata_partition} of {header.metadata_partitions}, "
                f"not {partition} of {metadata_partitions}",
            )
        if header.cache_layout != CACHE_VERSION:
            raise SnapshotRefused("foreign", f"cache layout {header.cache_layout}, not {CACHE_VERSION}")
        check_against_topic(header, peek, min_compaction_lag_ms, int(time.time() * 1000))
        options = cache.sst_options()
        files = [offsets_table(work / "offsets.sst", options, partition, header.next_offset)]
        entries = 0
        if header.payload_len:
            opened = open_table(work / "table.sst", header, work / "scratch")
            try:
                if topics is None:
                    files.append(work / "table.sst")
                    entries = header.entries
                else:
                    kept, entries = filtered_table(opened, work / "kept.sst", options, topics)
                    if kept is not None:
                        files.append(kept)
            finally:
                opened.close()
        cache.ingest(files)
        return info.key, header.next_offset, entries
    finally:
        shutil.rmtree(work, ignore_errors=True)
