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

from rocksdict import BlockBasedOptions, Options, Rdict

from processor.errors import ProcessorError
from processor.follower.cache_keys import CACHE_VERSION, VERSION_KEY
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
            self._db.close()
            Rdict.destroy(str(self.path), options)
            self._db = self._open(options)
            version = None
        if version is None:
            self._db[VERSION_KEY] = struct.pack(">H", CACHE_VERSION)
        self._writer = CacheWriter(self._db, self)

    def _open(self, options: Options) -> Rdict:
        try:
            return Rdict(str(self.path), options)
        except Exception as exc:  # rocksdict raises plain Exception, e.g. when another process holds the lock
            raise ProcessorError(f"cannot open the metadata cache at {self.path}: {exc}") from None

    def close(self) -> None:
        self._db.close()

    def apply_batch(
        self, messages: Iterable[RawMessage], topics: frozenset[str] | None = None
    ) -> ApplyResult:
        """Apply consumed messages in one atomic write, together with their consumed offsets (see
        :meth:`CacheWriter.apply_batch`)."""
        return self._writer.apply_batch(messages, topics)
