"""The follower's metadata cache: the metadata topic materialized into RocksDB (rocksdict).

The only package that imports rocksdict (processor/follower/). Three modules, one job each:

- :mod:`processor.follower.cache_keys`: the key layout (documented there) and value encodings;
- :mod:`processor.follower.cache_writes`: the fenced write path (``apply_batch``);
- :mod:`processor.follower.cache_queries`: the query API (lookups by offset, time, partition).

:class:`MetadataCache` opens the database (bloom filters, layout version check) and joins them.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable
from pathlib import Path

from rocksdict import (
    BlockBasedOptions,
    DBCompressionType,
    IngestExternalFileOptions,
    Options,
    Rdict,
    RdictIter,
)

from processor.errors import ProcessorError
from processor.follower.cache_keys import CACHE_VERSION, ORIGIN_KEY, VERSION_KEY
from processor.follower.cache_queries import CacheQueries
from processor.follower.cache_writes import ApplyResult, CacheWriter, RawMessage

log = logging.getLogger(__name__)


class MetadataCache(CacheQueries):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        options = Options(raw_mode=True)
        options.create_if_missing(True)
        # Every new segment's first record looks up a key that is not there yet: whole-key bloom
        # filters (memtable and files) answer most of those misses without a skip-list or block seek.
        options.set_memtable_prefix_bloom_ratio(0.1)
        options.set_memtable_whole_key_filtering(True)
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        options.set_block_based_table_factory(table)
        self._headers = {}
        self._bookkeeping = {}
        self._served_end_bounds = {}
        self._options = options
        self._db = self._open(options)
        version = self._db.get(VERSION_KEY)
        if version is not None and struct.unpack(">H", version)[0] != CACHE_VERSION:
            # derived data of an older layout: start again from the topic's beginning
            log.warning(
                "metadata cache at %s has layout %d, not %d: rebuilding it from the metadata topic",
                self.path,
                struct.unpack(">H", version)[0],
                CACHE_VERSION,
            )
            self._reset()
        elif version is None:
            self._db[VERSION_KEY] = struct.pack(">H", CACHE_VERSION)
        self._writer = CacheWriter(self._db, self)

    def _reset(self) -> None:
        """Empty the cache (derived data: the materializer reads the topic again from its start)."""
        self._db.close()
        Rdict.destroy(str(self.path), self._options)
        self._db = self._open(self._options)
        self._headers.clear()
        self._bookkeeping.clear()
        self._served_end_bounds.clear()
        self._db[VERSION_KEY] = struct.pack(">H", CACHE_VERSION)
        self._writer = CacheWriter(self._db, self)

    def ensure_origin(self, origin: str) -> bool:
        """Keep the cache only if it was built from the metadata topic ``origin`` (its name and topic
        id): a cache of another topic (a changed or misspelt PROCESSOR_METADATA_TOPIC) or of an earlier
        incarnation of it (deleted and re-created) would make this process act on records the topic
        does not hold. Such a cache, or one that does not say, is emptied and rebuilt from the topic.
        Returns True when it was."""
        stored = self._db.get(ORIGIN_KEY)
        if stored is not None and stored.decode() == origin:
            return False
        if stored is not None or self.consumed_offsets():
            log.warning(
                "metadata cache at %s was built from %s, not %s: rebuilding it from the metadata topic",
                self.path,
                stored.decode() if stored is not None else "an unrecorded metadata topic",
                origin,
            )
            self._reset()
            self._db[ORIGIN_KEY] = origin.encode()
            return True
        self._db[ORIGIN_KEY] = origin.encode()
        return False

    def _open(self, options: Options) -> Rdict:
        try:
            return Rdict(str(self.path), options)
        except Exception as exc:  # rocksdict raises plain Exception, e.g. when another process holds the lock
            raise ProcessorError(f"cannot open the metadata cache at {self.path}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    # -- snapshots (processor/follower/snapshots.py) ---------------------------------------------

    def consistent_iterator(self) -> RdictIter:
        """An iterator over the whole cache as one applied batch left it (see ``remote_state``)."""
        return self._db.iter()

    @staticmethod
    def sst_options() -> Options:
        """The options a table file for :meth:`ingest` is written with: raw keys and whole-key bloom
        filters, as the cache's own files (a loaded cache holds one file per metadata partition,
        each over the whole key space: without the filters a lookup by segment id read every
        file's index, 0.9 ms at p50 for 10 M segments), and zstd blocks (a snapshot's table is
        stored and read as it is written)."""
        options = Options(raw_mode=True)
        options.set_compression_type(DBCompressionType.zstd())
        table = BlockBasedOptions()
        table.set_bloom_filter(10, False)
        options.set_block_based_table_factory(table)
        return options

    def ingest(self, paths: list[Path]) -> None:
        """Bulk-load sorted table files (a snapshot's keys and its consumed offset) in one atomic
        step: no memtable, no write-ahead log, no put per key (the files are moved in). What the
        cache remembered of any partition is forgotten, so every later read sees the loaded state."""
        options = IngestExternalFileOptions()
        options.set_move_files(True)
        try:
            self._db.ingest_external_file([str(p) for p in paths], options)
        except Exception as exc:  # rocksdict raises plain Exception
            raise ProcessorError(f"loading {paths} into the metadata cache at {self.path}: {exc}") from None
        self._headers.clear()
        self._bookkeeping.clear()
        self._served_end_bounds.clear()

    def apply_batch(
        self, messages: Iterable[RawMessage], topics: frozenset[str] | None = None
    ) -> ApplyResult:
        """Apply consumed messages in one atomic write, together with their consumed offsets (see
        :meth:`CacheWriter.apply_batch`)."""
        return self._writer.apply_batch(messages, topics)
