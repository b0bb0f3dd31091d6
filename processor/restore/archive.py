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

from processor.errors import OffsetNotInRemoteError, ProcessorError
from processor.metadata.model import TopicPartition
from processor.restore.plan import ArchivedRange
from processor.segment.record_format import KafkaRecord

if TYPE_CHECKING:
    from processor.app import Follower
    from processor.config import Settings
    from processor.reader.remote_reader import RemoteReader

CHUNK_RECORDS = 2000
CHUNK_BYTES = 4 * 1024 * 1024
READ_AHEAD_CHUNKS = 3


@dataclass(frozen=True, slots=True)
class Chunk:
    records: list[KafkaRecord]
    position: int  # where the partition's restore continues after this chunk
    record_bytes: int  # key + value + header bytes of ``records``


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

    The thread keeps up to ``READ_AHEAD_CHUNKS`` chunks ready (each one ranged GET of consecutive
    blocks, CRC-checked and decoded by the remote reader) while the caller produces the previous
    ones. An error in the thread is raised by :meth:`next_chunk`, never lost.
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
        position = self._position
        try:
            while position < self._stop and not self._closed.is_set():
                try:
                    records = self._reader.read_from_offset(
                        self.tp, position, max_records=CHUNK_RECORDS, max_bytes=CHUNK_BYTES
                    )
                except OffsetNotInRemoteError:
                    # A hole in the archive (the source lost records before they were archived):
                    # go on at the next archived segment, as a consumer skips to the next offset.
                    after = next(iter(self._reader.lookup.finished_segments(self.tp, position)), None)
                    if after is not None and position < after.start_offset < self._stop:
                        position = after.start_offset
                        continue
                    records = []
                kept = [r for r in records if r.offset < self._stop]
                position = kept[-1].offset + 1 if kept and len(kept) == len(records) else self._stop
                chunk = Chunk(kept, position, sum(record_bytes(r) for r in kept))
                if not self._put(chunk):
                    return
            self._put(None)
        except BaseException as exc:
            self._put(exc)

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
