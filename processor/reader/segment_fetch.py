"""A segment's objects as the remote reader reads them: its index (one ranged GET, verified against
its metadata, kept in a small LRU), and runs of its blocks, from the local block cache where it has
them and the rest with one ranged GET per run of consecutive blocks; a block read from storage goes
into the cache once its reader verified it. Counts the requests and bytes it asks storage for."""

from __future__ import annotations

import collections
import threading
from dataclasses import dataclass

from processor import metrics
from processor.errors import ObjectNotFoundError, SegmentObjectMissingError
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.block_cache import BlockCache, combined_crc
from processor.reader.segment_blocks import fetch_index
from processor.reader.segment_keys import NO_DECRYPTION, SegmentDecryption
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage


@dataclass
class ReadStats:
    requests: int = 0
    bytes_requested: int = 0


class SegmentFetcher:
    """Index and blocks of segments, from the block cache or storage; see the module docstring."""

    def __init__(
        self,
        storage: ChunkStorage,
        keys: ObjectKeyFactory,
        index_cache_entries: int = 1024,
        decryption: SegmentDecryption = NO_DECRYPTION,
        block_cache: BlockCache | None = None,
    ) -> None:
        self.storage = storage
        self.keys = keys
        self.decryption = decryption
        # blocks read before, from local disk (None: every block from storage)
        self.block_cache = block_cache
        self.stats = ReadStats()
        self._indexes: collections.OrderedDict[object, SegmentIndex] = collections.OrderedDict()
        self._index_cache_entries = index_cache_entries
        self._lock = threading.Lock()

    def stored_blocks(
        self, segment: RemoteLogSegmentMetadata, index: SegmentIndex, first: int, last: int
    ) -> list[tuple[memoryview, bool]]:
        """The stored bytes of blocks ``first..last``, each with whether it came from storage: from
        the block cache where it has them, the rest with one ranged GET per run of consecutive
        blocks. Not verified here: the caller caches a block from storage once it verified it."""
        key = segment.data_object_key
        numbers = range(first, last + 1)
        cache = self.block_cache
        found: dict[int, memoryview] = {}
        fresh: set[int] = set()
        if cache is not None:
            for n in numbers:
                info = index.blocks[n]
                cached = cache.get(key, info.position, info.length)
                if cached is not None:
                    found[n] = memoryview(cached)
        run: list[int] = []
        for n in [*numbers, last + 1]:
            if n <= last and n not in found:
                run.append(n)
                continue
            if run:
                start = index.blocks[run[0]].position
                end = index.blocks[run[-1]].position + index.blocks[run[-1]].length
                data = memoryview(self.get(segment, key, start, end - start))
                for m in run:
                    info = index.blocks[m]
                    found[m] = data[info.position - start : info.position - start + info.length]
                    fresh.add(m)
                run = []
        return [(found[n], n in fresh) for n in numbers]

    def verified(
        self,
        segment: RemoteLogSegmentMetadata,
        position: int,
        stored: memoryview,
        fresh: bool,
        payload_crc: int | None = None,
    ) -> None:
        """A block read from storage and verified goes into the block cache (never one that failed:
        bytes damaged on their way would otherwise stay). ``payload_crc``: the verified CRC-32 of
        its stored payload (an unencrypted block), so the cache's CRC of the whole block is had
        without reading it again."""
        if fresh and self.block_cache is not None:
            crc = None
            if payload_crc is not None:
                crc = combined_crc(stored[:BLOCK_HEADER_LEN], payload_crc, len(stored) - BLOCK_HEADER_LEN)
            self.block_cache.put(segment.data_object_key, position, stored, crc)

    def get(self, segment: RemoteLogSegmentMetadata, key: str, start: int, length: int) -> bytes:
        try:
            data = self.storage.read(key, start, length)
        except ObjectNotFoundError as exc:
            raise SegmentObjectMissingError(
                "object is missing", object_key=key, segment=str(segment.segment_id)
            ) from exc
        with self._lock:
            self.stats.requests += 1
            self.stats.bytes_requested += length
        metrics.REMOTE_FETCH_BYTES.labels(segment.segment_id.topic).inc(len(data))
        return data

    def index(self, segment: RemoteLogSegmentMetadata) -> SegmentIndex:
        sid = segment.segment_id.id
        with self._lock:
            cached = self._indexes.get(sid)
            if cached is not None:
                self._indexes.move_to_end(sid)
                return cached
        index = fetch_index(
            self.storage,
            self.keys,
            segment,
            lambda key, start, length: self.get(segment, key, start, length),
            self.decryption.cipher(segment),
        )
        with self._lock:
            self._indexes[sid] = index
            while len(self._indexes) > self._index_cache_entries:
                self._indexes.popitem(last=False)
        return index
