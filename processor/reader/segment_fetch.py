"""A segment's objects as the remote reader reads them: its index (one ranged GET, verified against
its metadata, kept in a small LRU), and runs of its blocks, from the local block cache where it has
them and the rest with one ranged GET per run of consecutive blocks; a block read from storage goes
into the cache once its reader verified it. Counts the requests and bytes it asks storage for.

A read whose segment's index is not in the LRU would wait for two round trips, the index GET and then
the blocks' GET. ``index_and_ahead`` makes them at once: the blocks' byte range is guessed from the
metadata alone (``guess_range``: the offset's share of the segment's offsets, of its bytes, widened
by a block each side; the index object's size says how many blocks there are), and the guess's
bytes serve every block run it covers once the index has said where the blocks are. Bytes from a
guess are checked as any others (block header against the index entry, CRCs); a run the guess
missed is read with its own GET, as before. The guess costs the bytes fetched beyond the blocks
needed (about a block), only on an index miss, and only record reads make it (a gateway's fetch of
one block would fetch two or three: see ``RemoteReader.read_batches``).
"""

from __future__ import annotations

import collections
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
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
from processor.storage.filesystem import FilesystemChunkStorage

log = logging.getLogger(__name__)

# What a guessed range may be at most: a wider one (a large read, a segment of few huge blocks) is
# not fetched ahead; the read makes its two round trips.
MAX_AHEAD_BYTES = 8 << 20
# Index bytes per block and fixed (index_format.py: a block index of 20 bytes and a remote index
# entry of 54 per block; head 40, ledger metadata 52 plus the topic's name, trailer 4): how many
# blocks a segment has, from its index object's size in the metadata, to know how wide a block is.
INDEX_BYTES_PER_BLOCK = 74
INDEX_FIXED_BYTES = 96


@dataclass
class ReadStats:
    requests: int = 0
    bytes_requested: int = 0
    ahead_used: int = 0  # guessed ranges that held the blocks a read needed
    ahead_missed: int = 0  # guessed ranges that did not (the blocks were read again)
    ahead_failed: int = 0  # guesses whose GET failed (logged; the read made its own GETs)


@dataclass(frozen=True)
class Ahead:
    """Bytes of a data object read before its index said which are needed: ``data`` from ``start``."""

    start: int
    data: memoryview

    def covering(self, start: int, end: int) -> memoryview | None:
        if self.start <= start and end <= self.start + len(self.data):
            return self.data[start - self.start : end - self.start]
        return None


def guess_range(segment: RemoteLogSegmentMetadata, offset: int, want_bytes: int) -> tuple[int, int] | None:
    """(start, length) of the data object's bytes likely to hold the blocks of a read from ``offset``
    of about ``want_bytes``: where the offset falls if records were of even size, from a block before
    to a block after the wanted bytes. None when that is more than ``MAX_AHEAD_BYTES`` or the
    offset is not the segment's."""
    size = segment.segment_size_in_bytes
    span = segment.end_offset - segment.start_offset + 1
    if not segment.start_offset <= offset <= segment.end_offset or size <= 0:
        return None
    topic_bytes = len(segment.segment_id.topic.encode())
    blocks = max(1, (segment.index_size_in_bytes - INDEX_FIXED_BYTES - topic_bytes) // INDEX_BYTES_PER_BLOCK)
    block = size / blocks
    at = size * (offset - segment.start_offset) / span
    # the block holding the offset starts at most a block before it, the last block wanted ends at
    # most a block after the bytes wanted (with records of even size; a tenth more for uneven ones)
    start = max(0, int(at - 1.1 * block))
    end = min(size, int(at + max(want_bytes, 0) + 1.1 * block) + 1)
    if end - start > MAX_AHEAD_BYTES:
        return None
    return start, end - start


def _log_failed(future: Future[bytes]) -> None:
    """A guess's GET left behind (its read failed first): its own failure is logged, never lost."""
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.warning("remote read: a GET made ahead of its index failed: %s", exc)


class SegmentFetcher:
    """Index and blocks of segments, from the block cache or storage; see the module docstring."""

    def __init__(
        self,
        storage: ChunkStorage,
        keys: ObjectKeyFactory,
        index_cache_entries: int = 1024,
        decryption: SegmentDecryption = NO_DECRYPTION,
        block_cache: BlockCache | None = None,
        ahead_of_index: bool | None = None,
    ) -> None:
        self.storage = storage
        # guess a read's blocks while its index comes (index_and_ahead); None: wherever a GET is a
        # round trip to save (not on local files, where it would only read more bytes)
        self.ahead_of_index = (
            not isinstance(storage, FilesystemChunkStorage) if ahead_of_index is None else ahead_of_index
        )
        self.keys = keys
        self.decryption = decryption
        # blocks read before, from local disk (None: every block from storage)
        self.block_cache = block_cache
        self.stats = ReadStats()
        self._indexes: collections.OrderedDict[object, SegmentIndex] = collections.OrderedDict()
        self._index_cache_entries = index_cache_entries
        self._lock = threading.Lock()
        self._ahead_pool: ThreadPoolExecutor | None = None  # started by the first guess

    def index_and_ahead(
        self, segment: RemoteLogSegmentMetadata, offset: int, want_bytes: int
    ) -> tuple[SegmentIndex, Ahead | None]:
        """``index(segment)``; when it is not cached, with the bytes ``guess_range`` names for a read
        of ``want_bytes`` from ``offset`` fetched at the same time (see the module docstring)."""
        with self._lock:
            cached = self._indexes.get(segment.segment_id.id)
        window = None
        if cached is None and self.ahead_of_index:
            window = guess_range(segment, offset, want_bytes)
        if window is None:
            return self.index(segment), None
        with self._lock:
            if self._ahead_pool is None:
                self._ahead_pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="read-ahead-of-index")
            pool = self._ahead_pool
        key = segment.data_object_key
        future = pool.submit(self.get, segment, key, window[0], window[1])
        try:
            index = self.index(segment)
        except BaseException:
            future.cancel()
            future.add_done_callback(_log_failed)
            raise
        try:
            data = future.result()
        except Exception as exc:  # the read goes on with GETs of its own, which raise if this was no fluke
            with self._lock:
                self.stats.ahead_failed += 1
            log.warning("remote read: the GET of %s made ahead of its index failed: %s", key, exc)
            return index, None
        return index, Ahead(window[0], memoryview(data))

    def stored_blocks(
        self,
        segment: RemoteLogSegmentMetadata,
        index: SegmentIndex,
        first: int,
        last: int,
        ahead: Ahead | None = None,
    ) -> list[tuple[memoryview, bool]]:
        """The stored bytes of blocks ``first..last``, each with whether it came from storage: from
        the block cache where it has them, the rest with one ranged GET per run of consecutive
        blocks (none for a run ``ahead`` holds). Not verified here: the caller caches a block from
        storage once it verified it."""
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
                held = None if ahead is None else ahead.covering(start, end)
                if ahead is not None:
                    with self._lock:
                        if held is None:
                            self.stats.ahead_missed += 1
                        else:
                            self.stats.ahead_used += 1
                data = held if held is not None else memoryview(self.get(segment, key, start, end - start))
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
