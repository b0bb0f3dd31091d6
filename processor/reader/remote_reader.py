"""Remote reads by offset or by timestamp: exactly what a Kafka consumer would have seen.

For a start position the reader finds the finished segment (metadata lookup), reads its index object
with one ranged GET (verified against the CRC and size the metadata carries), then reads only the
blocks it needs: consecutive blocks in *one* ranged GET, as many as the record and byte budget can
use. Blocks of format version 1 (one entry per record) and 2 (one entry per Kafka record batch, decoded
with aiokafka's C reader) are both read. Every block's header and payload CRCs (and in version 2
each batch's CRC-32C) are checked before a record leaves the reader, and reads
continue across segment boundaries (the next segment starts at the previous end + 1). Wrong bytes are
never returned: a mismatch raises CorruptObjectError naming the segment and the object. Encrypted
segments are opened with their data key (``segment_keys``): a block that does not authenticate is
corrupt, a key that cannot be had raises SegmentKeyError (SegmentShreddedError once shredded).
"""

from __future__ import annotations

import bisect
import contextlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from processor import metrics
from processor.errors import (
    CorruptObjectError,
    FormatError,
    OffsetNotInRemoteError,
)
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.block_cache import BlockCache
from processor.reader.block_records import block_records
from processor.reader.lost_ranges import lost_range_end
from processor.reader.segment_blocks import check_block
from processor.reader.segment_fetch import Ahead, SegmentFetcher
from processor.reader.segment_keys import NO_DECRYPTION, SegmentCipher, SegmentDecryption
from processor.segment.block_header import BLOCK_FORMAT_V1
from processor.segment.blocks import block_payload
from processor.segment.blocks_v1 import decode_records_v1
from processor.segment.blocks_v2 import block_batches
from processor.segment.entries_v2 import batch_last_offset, check_batch_crc, records_as_batches
from processor.segment.index_format import SegmentIndex
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord
from processor.storage.chunk_storage import ChunkStorage

DEFAULT_MAX_RECORDS = 500
DEFAULT_MAX_BYTES = 4 * 1024 * 1024


class SegmentLookup(Protocol):
    def finished_segment_for_offset(
        self, tp: TopicPartition, offset: int
    ) -> RemoteLogSegmentMetadata | None: ...

    def finished_segments(
        self, tp: TopicPartition, from_offset: int
    ) -> Iterator[RemoteLogSegmentMetadata]: ...

    def segment_for_timestamp(
        self, tp: TopicPartition, timestamp: int
    ) -> RemoteLogSegmentMetadata | None: ...


@dataclass
class ArchivedBatches:
    """Kafka record batches exactly as the source partition held them (base offsets, CRCs and all;
    from format 1 blocks, batches built for their records), from the one holding the asked offset
    on; ``next_offset``: the offset after the last one."""

    batches: list[memoryview]
    next_offset: int
    size: int


@contextlib.contextmanager
def _counted(tp: TopicPartition) -> Iterator[None]:
    """Count one remote read of ``tp`` and, when it fails, one error (an offset that is not in
    remote storage is an answer to the request, not an error of the remote log)."""
    metrics.REMOTE_FETCH_REQUESTS.labels(tp.topic).inc()
    try:
        yield
    except OffsetNotInRemoteError:
        raise
    except Exception:
        metrics.REMOTE_FETCH_ERRORS.labels(tp.topic).inc()
        raise


def _opened(block: memoryview, position: int, cipher: SegmentCipher | None, where: str) -> memoryview:
    return block if cipher is None else cipher.open_block(block, position, where=where)


class RemoteReader:
    def __init__(
        self,
        storage: ChunkStorage,
        lookup: SegmentLookup,
        keys: ObjectKeyFactory,
        index_cache_entries: int = 1024,
        decryption: SegmentDecryption = NO_DECRYPTION,
        block_cache: BlockCache | None = None,
        ahead_of_index: bool | None = None,
    ) -> None:
        # the segments' objects: index and blocks, from the block cache or storage (segment_fetch.py)
        self.fetch = SegmentFetcher(
            storage, keys, index_cache_entries, decryption, block_cache, ahead_of_index
        )
        self.storage, self.block_cache, self.keys = storage, block_cache, keys
        self.lookup = lookup
        self.decryption = decryption
        self.stats = self.fetch.stats

    # -- public API -------------------------------------------------------------------------------

    def read_from_offset(
        self,
        tp: TopicPartition,
        offset: int,
        max_records: int = DEFAULT_MAX_RECORDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[KafkaRecord]:
        with metrics.REMOTE_FETCH_SECONDS.labels("offset").time(), _counted(tp):
            segment, offset = self._segment_at(tp, offset)
            if segment is None:
                raise OffsetNotInRemoteError(f"offset {offset} of {tp} is not in remote storage")
            return [
                r
                for records in self._read(tp, segment, offset, None, max_records, max_bytes)
                for r in records
            ]

    def read_from_timestamp(
        self,
        tp: TopicPartition,
        timestamp: int,
        max_records: int = DEFAULT_MAX_RECORDS,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> list[KafkaRecord]:
        """Records from the first one whose timestamp is >= ``timestamp`` (Kafka's offsetsForTimes), on."""
        with metrics.REMOTE_FETCH_SECONDS.labels("timestamp").time(), _counted(tp):
            segment = self.lookup.segment_for_timestamp(tp, timestamp)
            if segment is None:
                raise OffsetNotInRemoteError(
                    f"no record of {tp} at or after timestamp {timestamp} in remote storage"
                )
            # A segment may straddle the remote log start offset (delete-before): never below it.
            log_start = getattr(self.lookup, "log_start_offset", None)
            start = segment.start_offset if log_start is None else max(segment.start_offset, log_start(tp))
            return [
                r
                for records in self._read(tp, segment, start, timestamp, max_records, max_bytes)
                for r in records
            ]

    def read_batches(
        self,
        tp: TopicPartition,
        offset: int,
        max_bytes: int,
        topic_id: str | None = None,
        whole_blocks: bool = False,
    ) -> ArchivedBatches | None:
        """The archived record batches of ``tp`` from the one that holds ``offset`` (a batch may start
        below it: a consumer skips those records, as it does with a broker's answer), undecoded and
        verified (block CRC, each batch's CRC-32C). At least one batch, then whole batches while they
        fit in ``max_bytes``, across segments. An ``offset`` in a range the broker deleted before it was
        archived (``lost_ranges``) is answered from the next served segment, as a compacted topic's
        gap is. None when no finished segment holds ``offset`` (or
        holds it under another ``topic_id``: a re-created topic's archive is another topic's). Blocks
        of format 1 (one entry per record) give their records from ``offset`` on in batches built for
        them (``records_as_batches``), at the records' own offsets.

        ``whole_blocks``: whole blocks while their stored bytes fit in ``max_bytes`` (at least one),
        and every batch in them from ``offset`` on, so a read going on from the answer's end starts
        at a block's first batch (read-ahead: cut at ``max_bytes``, each range fetched the rest of its
        last block again with the next, a quarter more bytes from S3). With blocks compressed by the
        archive, the batches can exceed ``max_bytes`` by what decompression adds."""
        with metrics.REMOTE_FETCH_SECONDS.labels("batches").time(), _counted(tp):
            segment, offset = self._segment_at(tp, offset)
            if segment is None or (topic_id is not None and str(segment.segment_id.topic_id) != topic_id):
                return None
            out = ArchivedBatches([], offset, 0)
            fetched = 0  # stored bytes of the blocks read (whole_blocks)
            current: RemoteLogSegmentMetadata | None = segment
            while current is not None:
                # no guess of the blocks while the index comes (index_and_ahead): a gateway's
                # fetch wants one block or a few, and the guess's wider range (a block each side)
                # cost more here than the index's round trip it saves (measured, SeaweedFS on two
                # shared cores: 35 against 31 ms at p50 for a 1 MiB fetch at an uncached index)
                index, ahead = self.fetch.index(current), None
                number = index.block_for_offset(out.next_offset)
                while number is not None and number < len(index.blocks):
                    if whole_blocks:
                        last = _blocks_within(index, number, max_bytes - fetched, not out.batches)
                        if last is None:
                            return out
                        fetched += sum(index.blocks[n].length for n in range(number, last + 1))
                        self._add_blocks(out, current, index, number, last, 1 << 62, ahead)
                        number = last + 1
                        continue
                    last = self._last_block_needed(
                        index, number, out.next_offset, 1 << 30, max_bytes - out.size
                    )
                    if self._add_blocks(out, current, index, number, last, max_bytes, ahead):
                        return out
                    number = last + 1
                following = next(iter(self.lookup.finished_segments(tp, current.end_offset + 1)), None)
                if following is None or following.start_offset != current.end_offset + 1:
                    return out  # a gap (or the archive's end): the next answer starts there
                if topic_id is not None and str(following.segment_id.topic_id) != topic_id:
                    return out
                current = following
            return out

    def _segment_at(self, tp: TopicPartition, offset: int) -> tuple[RemoteLogSegmentMetadata | None, int]:
        """The finished segment holding ``offset`` and the offset to read from: past a range the
        broker deleted before it was archived, the next served segment and its start."""
        segment = self.lookup.finished_segment_for_offset(tp, offset)
        if segment is None and (after := self.lost_range_end(tp, offset)) is not None:
            return self.lookup.finished_segment_for_offset(tp, after), after
        return segment, offset

    def lost_range_end(self, tp: TopicPartition, offset: int) -> int | None:
        """Where a read at ``offset``, which no served segment holds, goes on when the offset lies in
        a range the archive will never hold (``lost_ranges``): the next served segment's start. None
        otherwise, or when the lookup cannot list the partition's segments in flight."""
        listing = getattr(self.lookup, "list_remote_log_segments", None)
        if listing is None:
            return None
        following = next(iter(self.lookup.finished_segments(tp, offset)), None)
        if following is None:  # past the archive's end (a live read): one seek, nothing more
            return None
        first = next(iter(self.lookup.finished_segments(tp, 0)), following)
        log_start = getattr(self.lookup, "log_start_offset", None)
        archive_first = first.start_offset if log_start is None else max(first.start_offset, log_start(tp))
        listed = []
        for seg in listing(tp, offset):
            if seg.start_offset >= following.start_offset:
                break
            listed.append((seg.start_offset, seg.end_offset))
        return lost_range_end(offset, archive_first, following.start_offset, listed)

    def _add_blocks(
        self,
        out: ArchivedBatches,
        segment: RemoteLogSegmentMetadata,
        index: SegmentIndex,
        first: int,
        last: int,
        max_bytes: int,
        ahead: Ahead | None = None,
    ) -> bool:
        """Add the batches of blocks ``first..last`` to ``out``; True once ``max_bytes`` is reached."""
        cipher = self.decryption.cipher(segment)
        stored_blocks = self.fetch.stored_blocks(segment, index, first, last, ahead)
        for number, (stored, fresh) in zip(range(first, last + 1), stored_blocks, strict=True):
            info = index.blocks[number]
            where = f"{segment.data_object_key} block {number}"
            try:
                block = _opened(stored, info.position, cipher, where)
                check_block(block, info, where)
                # a block from the cache matched the CRC-32 of the whole block as verified when it
                # was cached: its payload CRC and its batches' CRC-32C are not computed again
                header, payload = block_payload(block, where=where, payload_crc=fresh)
                if header.format_version == BLOCK_FORMAT_V1:
                    # records, one entry each (written by early versions): served as the batches a
                    # broker would hold them in, at their own offsets
                    records = decode_records_v1(header, payload, where=where, min_offset=out.next_offset)
                    batches = [memoryview(b) for b in records_as_batches(records)]
                else:
                    batches = block_batches(header, payload, where=where)
                    if fresh:
                        for batch in batches:
                            check_batch_crc(batch, where=where)
            except FormatError as exc:
                raise CorruptObjectError(
                    str(exc), object_key=segment.data_object_key, segment=str(segment.segment_id)
                ) from exc
            self.fetch.verified(
                segment, info.position, stored, fresh, None if cipher else header.payload_crc32
            )
            for batch in batches:
                batch_last = batch_last_offset(batch)
                if batch_last < out.next_offset:
                    continue
                if out.batches and out.size + len(batch) > max_bytes:
                    return True
                out.batches.append(batch)
                out.size += len(batch)
                out.next_offset = batch_last + 1
        return out.size >= max_bytes

    # -- reading records --------------------------------------------------------------------------

    def _read(
        self,
        tp: TopicPartition,
        segment: RemoteLogSegmentMetadata,
        offset: int,
        timestamp: int | None,
        max_records: int,
        max_bytes: int,
    ) -> Iterator[list[KafkaRecord]]:
        """The records from ``offset`` (or the first at or after ``timestamp``) on, a block's at a
        time, within ``max_records`` and ``max_bytes`` (of keys and values; the record that reaches
        it is the last)."""
        returned = returned_bytes = 0
        current: RemoteLogSegmentMetadata | None = segment
        while current is not None and returned < max_records:
            ahead: Ahead | None = None
            if timestamp is None:  # where the read starts is known: its blocks' GET goes with the index's
                per_record = current.segment_size_in_bytes / max(1, current.record_count)
                want = min(int(per_record * (max_records - returned)), max_bytes - returned_bytes)
                index, ahead = self.fetch.index_and_ahead(current, offset, want)
            else:
                index = self.fetch.index(current)
            first = (
                index.block_for_offset(offset) if timestamp is None else index.block_for_timestamp(timestamp)
            )
            if first is None:
                if timestamp is not None:
                    raise CorruptObjectError(
                        "index has no block at the segment's max timestamp",
                        object_key=current.index_object_key,
                        segment=str(current.segment_id),
                    )
                break
            number = first
            while number < len(index.blocks) and returned < max_records and returned_bytes < max_bytes:
                last = self._last_block_needed(
                    index, number, offset, max_records - returned, max_bytes - returned_bytes
                )
                # a block's records at a time (they are in offset order): the start found by
                # bisection, the rest sliced, the byte budget summed in one pass (a Python step per
                # record here cost as much as decoding the records)
                # with no timestamp to find, no more records are decoded than are still wanted
                limit = None if timestamp is not None else max_records - returned
                for records in self._read_blocks(current, index, number, last, offset, limit, ahead):
                    start = bisect.bisect_left(records, offset, key=_offset_of)
                    if timestamp is not None:
                        at = timestamp
                        start = next(
                            (i for i in range(start, len(records)) if records[i].timestamp >= at), -1
                        )
                        if start < 0:
                            continue
                        timestamp = None  # found the start; from here on, every record
                    take = records[start : start + max_records - returned]
                    sizes = list(
                        itertools.accumulate([len(r.key or b"") + len(r.value or b"") for r in take])
                    )
                    cut = bisect.bisect_left(sizes, max_bytes - returned_bytes)
                    if cut < len(take):  # the record that reaches the byte budget is the last
                        yield take[: cut + 1]
                        return
                    yield take
                    returned += len(take)
                    returned_bytes += sizes[-1] if sizes else 0
                    if returned >= max_records:
                        return
                number = last + 1
            offset = current.end_offset + 1
            # Coverage is contiguous, but if the source lost data before it was offloaded, go on
            # with the next segment there is, as a consumer skips to the next available offset.
            current = next(iter(self.lookup.finished_segments(tp, offset)), None)

    @staticmethod
    def _last_block_needed(
        index: SegmentIndex, first: int, offset: int, records_wanted: int, bytes_wanted: int
    ) -> int:
        """How far one ranged GET should reach: enough blocks to possibly hold what is still wanted."""
        can_hold = span = 0
        last = first
        for number in range(first, len(index.blocks)):
            block = index.blocks[number]
            can_hold += block.last_offset - max(block.first_offset, offset) + 1
            span += block.length
            last = number
            if can_hold >= records_wanted or span >= bytes_wanted:
                break
        return last

    def _read_blocks(
        self,
        segment: RemoteLogSegmentMetadata,
        index: SegmentIndex,
        first: int,
        last: int,
        min_offset: int | None = None,
        limit: int | None = None,
        ahead: Ahead | None = None,
    ) -> Iterator[list[KafkaRecord]]:
        """Each block's records from ``min_offset`` on; once ``limit`` records were yielded the
        caller stops (blocks are fetched before the first is decoded), so each block decodes only
        the records still wanted (``block_records``)."""
        cipher = self.decryption.cipher(segment)
        stored_blocks = self.fetch.stored_blocks(segment, index, first, last, ahead)
        left = limit
        for number, (stored, fresh) in zip(range(first, last + 1), stored_blocks, strict=True):
            info = index.blocks[number]
            where = f"{segment.data_object_key} block {number}"
            try:
                block = _opened(stored, info.position, cipher, where)
                check_block(block, info, where)
                # a block from the cache matched the CRC-32 of the whole block verified when it was
                # cached: its payload CRC is not computed again (each batch's CRC-32C still is)
                records = block_records(
                    block,
                    where=where,
                    min_offset=min_offset,
                    limit=left,
                    payload_crc=fresh or cipher is not None,
                )
            except FormatError as exc:
                raise CorruptObjectError(
                    str(exc), object_key=segment.data_object_key, segment=str(segment.segment_id)
                ) from exc
            self.fetch.verified(segment, info.position, stored, fresh)
            if left is not None:
                left -= len(records)
            yield records


def _offset_of(record: KafkaRecord) -> int:
    return record.offset


def _blocks_within(index: SegmentIndex, first: int, budget: int, at_least_one: bool) -> int | None:
    """The last block from ``first`` on whose stored bytes, with those before it, fit in ``budget``
    (``first`` itself if ``at_least_one``); None if not even ``first`` is to be read."""
    span = 0
    last = None
    for number in range(first, len(index.blocks)):
        span += index.blocks[number].length
        if span > budget and (last is not None or not at_least_one):
            break
        last = number
    return last
