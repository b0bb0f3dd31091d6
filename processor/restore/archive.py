"""The archive of one source topic, as the restore reads it: which partitions and offsets it serves,
offsets for timestamps, and records in chunks fetched ahead.

What is served is decided by the follower's cache (the metadata fold), never here: the archive is
opened through a throwaway follower that materializes only the metadata partitions holding the
topic (all of them when the source topic no longer exists on the source cluster, the usual case in
a disaster), then read with the remote reader, whose CRC checks every block.
"""

from __future__ import annotations

import queue
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from aiokafka.record.default_records import DefaultRecordBatch

from processor.errors import FormatError, OffsetNotInRemoteError, ProcessorError
from processor.metadata.model import TopicPartition
from processor.reader.segment_blocks import _verified_blocks, read_segment_index
from processor.restore.plan import ArchivedRange
from processor.segment.batch_entries import batch_records
from processor.segment.block_format import BLOCK_FORMAT_V1, block_batches, block_payload, decode_block
from processor.segment.record_format import KafkaRecord

if TYPE_CHECKING:
    from processor.app import Follower
    from processor.config import Settings
    from processor.reader.remote_reader import RemoteReader

CHUNK_BYTES = 2 * 1024 * 1024  # archived bytes per chunk: one ranged GET of consecutive blocks
READ_AHEAD_CHUNKS = 3


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


def _block_content(block: memoryview, where: str) -> tuple[list[memoryview], list[KafkaRecord]]:
    """A verified block's record batches (format 2, each batch's CRC-32C checked) or records (1)."""
    header, payload = block_payload(block, where=where)
    if header.format_version == BLOCK_FORMAT_V1:
        return [], decode_block(block, where=where)
    batches = block_batches(header, payload, where=where)
    for batch in batches:
        if not DefaultRecordBatch(batch).validate_crc():
            raise FormatError(
                f"{where}: record batch at offset {int.from_bytes(batch[:8], 'big')}: CRC-32C mismatch"
            )
    return batches, []


class ArchiveTopic:
    def __init__(self, settings: Settings, topic: str) -> None:
        from processor.app import build_follower, build_reader, build_storage
        from processor.kafka_clients import check_broker, partition_counts
        from processor.metadata.codec import metadata_partition_for

        self.topic = topic
        admin = check_broker(settings.bootstrap_servers)
        counts = partition_counts(admin, [settings.metadata_topic, topic])
        if settings.metadata_topic not in counts:
            raise ProcessorError(
                f"metadata topic {settings.metadata_topic} does not exist on {settings.bootstrap_servers}: "
                "nothing was archived there"
            )
        meta_parts = counts[settings.metadata_topic]
        if topic in counts:
            wanted = sorted(
                {metadata_partition_for(TopicPartition(topic, p), meta_parts) for p in range(counts[topic])}
            )
        else:  # the source topic is gone: its partitions are wherever the metadata says
            wanted = list(range(meta_parts))
        self._cache_dir = tempfile.TemporaryDirectory(prefix="processor-restore-cache-")
        scoped = settings.model_copy(
            update={"follow_metadata_partitions": tuple(wanted), "follow_topics": (topic,)}
        )
        self.follower: Follower = build_follower(scoped, meta_parts, cache_dir=Path(self._cache_dir.name))
        self.follower.materializer.catch_up()
        self.reader: RemoteReader = build_reader(settings, build_storage(settings), self.follower.rlmm)

    def close(self) -> None:
        self.follower.close()
        self.reader.storage.close()
        self._cache_dir.cleanup()

    def partitions(self) -> dict[int, ArchivedRange]:
        """Every archived partition of the topic with the offsets its finished segments serve."""
        cache = self.follower.cache
        out: dict[int, ArchivedRange] = {}
        for tp in cache.topic_partitions():
            if tp.topic != self.topic:
                continue
            served = cache.offset_range(tp)
            if served is not None:
                out[tp.partition] = ArchivedRange(*served)
        return out

    def topic_id(self, partition: int) -> str | None:
        tp = TopicPartition(self.topic, partition)
        first = next(iter(self.follower.cache.finished_segments(tp, 0)), None)
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

    def chunks(self, partition: int, position: int, stop: int) -> ChunkStream:
        return ChunkStream(self.reader, TopicPartition(self.topic, partition), position, stop)


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

    def __init__(self, reader: RemoteReader, tp: TopicPartition, position: int, stop: int) -> None:
        self.tp = tp
        self._reader = reader
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
        for segment in self._reader.lookup.finished_segments(tp, position):
            if segment.start_offset >= stop or self._closed.is_set():
                break
            index = read_segment_index(storage, keys, segment)
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
                for got_batches, got_records in _verified_blocks(
                    storage, segment.data_object_key, str(segment.segment_id), blocks, number, _block_content
                ):
                    batches += got_batches
                    records += got_records
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
