"""Taking snapshots of the folded metadata and writing them to the bucket: on demand (``processor
snapshot``) and on a schedule in every worker (:class:`SnapshotSchedule`).

Who writes: any process whose follower cache keeps every topic of a metadata partition (a cache that
keeps some topics only would write a partial state). Several workers may write the same partition's
snapshot at about the same time: each is a complete, valid object under a name of its own (see
:mod:`processor.follower.snapshots`), so they never race into a torn one; the schedule is jittered
and skips a partition whose newest snapshot is younger than the interval, so it seldom happens.
"""

from __future__ import annotations

import logging
import random
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from processor import metrics
from processor.errors import ProcessorError
from processor.follower.cache_keys import CACHE_VERSION
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshot_format import SnapshotHeader, record_crc
from processor.follower.snapshot_tables import partitions_of, write_tables
from processor.follower.snapshots import LastRecord, SnapshotStore, TakenSnapshot, TopicPeek
from processor.segment.checksums import crc32c_of

log = logging.getLogger(__name__)

# -- the segment's partition from its stored record (S keys hold no partition) ------------------------


def take_snapshots(
    cache: MetadataCache,
    partitions: list[int],
    metadata_partitions: int,
    origin: str,
    last_records: Callable[[int, int], LastRecord | None],
    workdir: Path,
) -> dict[int, TakenSnapshot]:
    """The cache's state of each metadata partition in ``partitions``, as table files in
    ``workdir`` with their headers, from one consistent view of the cache. ``last_records(partition,
    next_offset)`` names the topic's record at ``next_offset - 1``; a partition the cache never
    consumed, or whose last record the topic does not give, is left out."""
    offsets, tables = write_tables(cache, set(partitions), metadata_partitions, workdir)
    now_ms = int(time.time() * 1000)
    taken: dict[int, TakenSnapshot] = {}
    for p, next_offset in sorted(offsets.items()):
        last = last_records(p, next_offset) if next_offset > 0 else LastRecord(-1, 0, -1)
        if last is None:
            log.info("metadata partition %d: its last record is not readable; no snapshot this time", p)
            continue
        table = tables[p]
        written = table.writer is not None
        payload_len, payload_crc = (0, 0) if not written else _file_crc(table.path)
        header = SnapshotHeader(
            metadata_partition=p,
            metadata_partitions=metadata_partitions,
            next_offset=next_offset,
            origin=origin,
            partitions=partitions_of(table),
            last_offset=last.offset,
            last_record_crc=last.crc,
            last_timestamp_ms=last.timestamp_ms,
            written_ms=now_ms,
            cache_layout=CACHE_VERSION,
            entries=table.entries,
            payload_len=payload_len,
            payload_crc=payload_crc,
        )
        taken[p] = TakenSnapshot(header, table.path if written else None)
    return taken


def _file_crc(path: Path) -> tuple[int, int]:
    crc = 0
    size = 0
    with path.open("rb") as handle:
        while chunk := handle.read(8 << 20):
            crc = crc32c_of(chunk, crc)
            size += len(chunk)
    return size, crc


def last_record_of(peek: TopicPeek) -> Callable[[int, int], LastRecord | None]:
    """``take_snapshots``'s question, asked of the topic: the record at ``next_offset - 1``."""

    def last(partition: int, next_offset: int) -> LastRecord | None:
        found = peek.record_from(partition, next_offset - 1)
        if found is None or found[0] != next_offset - 1:
            return None  # compacted away or not read in time: a later snapshot then
        offset, key, value, timestamp_ms = found
        return LastRecord(offset, record_crc(key, value), timestamp_ms)

    return last


@dataclass(frozen=True)
class WrittenSnapshot:
    partition: int
    key: str
    next_offset: int
    entries: int
    size: int
    seconds: float
    pruned: int


def write_snapshots(
    cache: MetadataCache,
    store: SnapshotStore,
    peek: TopicPeek,
    partitions: list[int],
    metadata_partitions: int,
    keep: int,
) -> list[WrittenSnapshot]:
    """Take a snapshot of each of ``partitions`` from the cache, write it, and delete all but the
    ``keep`` newest of that partition. A partition not written (never consumed, or its last record
    not readable) is left out of the result."""
    out: list[WrittenSnapshot] = []
    with tempfile.TemporaryDirectory(prefix="snapshot-", dir=cache.path.parent) as workdir:
        started = time.monotonic()
        taken = take_snapshots(
            cache, partitions, metadata_partitions, store.origin, last_record_of(peek), Path(workdir)
        )
        took = time.monotonic() - started
        for p, snapshot in sorted(taken.items()):
            began = time.monotonic()
            key = store.put(snapshot)
            metrics.SNAPSHOTS_WRITTEN.inc()
            pruned = store.prune(p, keep)
            seconds = took / max(len(taken), 1) + time.monotonic() - began
            log.info(
                "metadata partition %d: snapshot %s written (%d entries, %d bytes, the topic from offset %d)",
                p,
                key,
                snapshot.header.entries,
                snapshot.size,
                snapshot.header.next_offset,
            )
            out.append(
                WrittenSnapshot(
                    p,
                    key,
                    snapshot.header.next_offset,
                    snapshot.header.entries,
                    snapshot.size,
                    seconds,
                    len(pruned),
                )
            )
    return out


class SnapshotSchedule:
    """A worker's snapshots: every ``interval_s`` (jittered by up to a tenth, so workers spread),
    once its follower has caught up, each followed partition whose newest snapshot is older than
    the interval and that has records since is written. A failure is logged and counted and tried
    again at the next interval; it never stops the worker."""

    def __init__(
        self,
        write: Callable[[list[int]], list[WrittenSnapshot]],
        due: Callable[[], list[int]],
        interval_s: float,
    ) -> None:
        self._write, self._due, self.interval_s = write, due, interval_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.last_error: str | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metadata-snapshots", daemon=True)
        self._thread.start()

    def run_once(self) -> list[WrittenSnapshot]:
        try:
            due = self._due()
            written = self._write(due) if due else []
            self.last_error = None
            return written
        except (ProcessorError, OSError) as exc:
            metrics.SNAPSHOT_FAILURES.inc()
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.warning("metadata snapshots not written: %s (tried again in %.0f s)", exc, self.interval_s)
            return []
        except Exception as exc:  # a bug or RocksDB's plain Exception: the worker goes on, loudly
            metrics.SNAPSHOT_FAILURES.inc()
            self.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("metadata snapshots not written (tried again in %.0f s)", self.interval_s)
            return []

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s * random.uniform(0.9, 1.1)):
            self.run_once()

    def stop(self, timeout_s: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)


def due_partitions(
    cache: MetadataCache, store: SnapshotStore, partitions: list[int], interval_ms: int, now_ms: int
) -> list[int]:
    """The partitions whose newest snapshot is older than ``interval_ms`` (or that have none) and
    whose cache has consumed records past it."""
    consumed = cache.consumed_offsets()
    due: list[int] = []
    for p in partitions:
        if consumed.get(p, 0) <= 0:
            continue
        newest = next(iter(store.listed(p)), None)
        if newest is None:
            due.append(p)
            continue
        name = newest.key.rsplit("/", 1)[-1].split("-")
        try:
            offset, written_ms = int(name[0]), int(name[1])
        except (ValueError, IndexError):
            due.append(p)
            continue
        if consumed[p] > offset and now_ms - written_ms >= interval_ms:
            due.append(p)
    return due
