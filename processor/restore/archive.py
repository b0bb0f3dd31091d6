"""The archive of one source topic, as the restore reads it: which partitions and offsets it serves,
offsets for timestamps, and records in chunks fetched ahead.

What is served is decided by the metadata catalog (the follower's cache, the metadata fold), never
here; the command opens it for the topic (processor/wiring/read_side.py) and hands it over with
the remote reader, whose checks every block passes.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from processor.errors import OffsetNotInRemoteError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.remote_reader import RemoteReader
from processor.reader.segment_blocks import fetch_index, read_block_range_batches
from processor.restore.plan import ArchivedRange
from processor.segment.entries_v2 import batch_records
from processor.segment.records import KafkaRecord

CHUNK_BYTES = 2 * 1024 * 1024  # archived bytes per chunk: one ranged GET of consecutive blocks
READ_AHEAD_CHUNKS = 3


class ArchiveCatalog(Protocol):
    """What the restore asks of the metadata (the follower's cache answers it)."""

    def topic_partitions(self) -> list[TopicPartition]: ...

    def offset_range(self, tp: TopicPartition) -> tuple[int, int] | None: ...

    def finished_segments(
        self, tp: TopicPartition, from_offset: int = 0
    ) -> Iterator[RemoteLogSegmentMetadata]: ...


@dataclass(frozen=True, slots=True)
class Chunk:
    """Consecutive archived blocks of one partition, as stored: Kafka record batches (format 2
    blocks, not decoded yet) or, from format 1 blocks, decoded records. Only offsets in
    ``[low, high)`` belong to the restore: batches at the edges may hold records outside."""

    batches: list[memoryview]
    records: list[KafkaRecord]
    low: int
    high: int
    position: int  # where the partition's restore continues after this chunk
    size_bytes: int  # archived bytes: the batches' length, or the records' key + value + headers

    def decoded(self) -> list[KafkaRecord]:
        """Every record of the chunk in range, decoded (dry runs and checks; the restore produces
        straight from the batches)."""
        out = [r for r in self.records if self.low <= r.offset < self.high]
        for batch in self.batches:
            out.extend(r for r in batch_records(batch) if self.low <= r.offset < self.high)
        return out


class ArchiveTopic:
    def __init__(self, reader: RemoteReader, catalog: ArchiveCatalog, topic: str) -> None:
        self.reader = reader
        self.catalog = catalog
        self.topic = topic

    def partitions(self) -> dict[int, ArchivedRange]:
        """Every archived partition of the topic with the offsets its finished segments serve."""
        out: dict[int, ArchivedRange] = {}
        for tp in self.catalog.topic_partitions():
            if tp.topic != self.topic:
                continue
            served = self.catalog.offset_range(tp)
            if served is not None:
                out[tp.partition] = ArchivedRange(*served)
        return out

    def topic_id(self, partition: int) -> str | None:
        tp = TopicPartition(self.topic, partition)
        first = next(iter(self.catalog.finished_segments(tp, 0)), None)
        return None if first is None else first.segment_id.topic_id

    def first_offset_at(self, partition: int, timestamp: int) -> int | None:
        """Offset of the first archived record with a timestamp >= ``timestamp`` (offsetsForTimes)."""
        try:
            got = self.reader.read_from_timestamp(
                TopicPartition(self.topic, partition), timestamp, max_records=1
            )
        except OffsetNotInRemoteError:
            return None
        return got[0].offset if got else None

    def decoded(self, partition: int) -> list[KafkaRecord]:
        """Every archived record of a partition, decoded (checks, tests and benchmarks)."""
        served = self.partitions()[partition]
        stream = self.chunks(partition, served.earliest, served.highest + 1)
        records: list[KafkaRecord] = []
        try:
            while (chunk := stream.next_chunk()) is not None:
                records += chunk.decoded()
        finally:
            stream.close()
        return records

    def chunks(self, partition: int, position: int, stop: int) -> ChunkStream:
        return ChunkStream(self.reader, self.catalog, TopicPartition(self.topic, partition), position, stop)


def record_bytes(record: KafkaRecord) -> int:
    size = len(record.key or b"") + len(record.value or b"")
    for name, value in record.headers:
        size += len(name) + len(value or b"")
    return size


class ChunkStream:
    """The records of ``tp`` with offsets in ``[position, stop)``, in chunks, read ahead by a thread.

    The thread walks the partition's finished segments and keeps up to ``READ_AHEAD_CHUNKS`` chunks
    ready, each one ranged GET of consecutive whole blocks (about ``CHUNK_BYTES``), with the remote
    reader's checks: object keys, the index against the metadata's CRC, every block's header and
    payload CRCs and its place in the index. Record batches are left encoded (the producer decodes
    them once, with their CRC-32C checked). An error in the thread is raised by
    :meth:`next_chunk`, never lost.
    """

    def __init__(
        self, reader: RemoteReader, catalog: ArchiveCatalog, tp: TopicPartition, position: int, stop: int
    ) -> None:
        self.tp = tp
        self._reader = reader
        self._catalog = catalog
        self._position = position
        self._stop = stop
        self._queue: queue.Queue[Chunk | BaseException | None] = queue.Queue(READ_AHEAD_CHUNKS)
        self._closed = threading.Event()
        self._ended = False
        self._thread = threading.Thread(target=self._run, name=f"restore-read-{tp}", daemon=True)
        self._thread.start()

    def _put(self, item: Chunk | BaseException | None) -> bool:
        while not self._closed.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _run(self) -> None:
        try:
            self._read()
            self._put(None)
        except BaseException as exc:
            self._put(exc)

    def _read(self) -> None:
        storage, keys, tp, stop = self._reader.storage, self._reader.keys, self.tp, self._stop
        position = self._position
        # Holes in the archive (records the source lost before they were archived) are skipped,
        # as a consumer skips to the next offset: the next finished segment starts after them.
        for segment in self._catalog.finished_segments(tp, position):
            if segment.start_offset >= stop or self._closed.is_set():
                break
            cipher = self._reader.decryption.cipher(segment)
            index = fetch_index(storage, keys, segment, cipher=cipher)
            number = index.block_for_offset(max(position, segment.start_offset))
            while (
                number is not None and number < len(index.blocks) and index.blocks[number].first_offset < stop
            ):
                last, size = number, 0
                while last < len(index.blocks) and index.blocks[last].first_offset < stop:
                    size += index.blocks[last].length
                    last += 1
                    if size >= CHUNK_BYTES:
                        break
                blocks = index.blocks[number:last]
                batches: list[memoryview] = []
                records: list[KafkaRecord] = []
                for content in read_block_range_batches(
                    storage, segment.data_object_key, str(segment.segment_id), blocks, number, cipher
                ):
                    batches += content.batches
                    records += content.records
                end = segment.end_offset if last == len(index.blocks) else blocks[-1].last_offset
                after = min(stop, end + 1)
                size_bytes = sum(len(b) for b in batches) + sum(record_bytes(r) for r in records)
                if not self._put(Chunk(batches, records, position, stop, after, size_bytes)):
                    return
                position, number = after, last
            position = max(position, min(stop, segment.end_offset + 1))
        if position < stop:  # the archive ends before stop (retention ran since the plan)
            self._put(Chunk([], [], position, stop, stop, 0))

    def next_chunk(self) -> Chunk | None:
        """The next chunk, waiting for the thread if needed; None once the range is read."""
        if self._ended:
            return None
        item = self._queue.get()
        if item is None:
            self._ended = True
            return None
        if isinstance(item, BaseException):
            self._ended = True
            raise item
        return item

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=30)
