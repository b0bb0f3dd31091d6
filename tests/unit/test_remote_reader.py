"""Remote reads over real objects on filesystem storage: byte-exact, minimal ranges, corruption caught."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path

import pytest

from processor.errors import CorruptObjectError, OffsetNotInRemoteError, SegmentObjectMissingError
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.codec import encode_value, record_key
from processor.metadata.model import MetadataRecord, SegmentState
from processor.reader.block_cache import BlockCache
from processor.reader.remote_reader import RemoteReader
from processor.segment.entries_v2 import batch_records, parse_batch_header
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord, TimestampType
from processor.segment.segment_assembler import SegmentAssembler
from processor.storage.filesystem import FilesystemChunkStorage
from tests.batch_samples import make_batch
from tests.support.segment_v1_writer import SegmentBuilder

TP = TopicPartition("events", 1)


class CacheSink:
    def __init__(self, cache: MetadataCache) -> None:
        self.cache, self.n = cache, 0

    def publish(self, record: MetadataRecord) -> int:
        self.cache.apply_batch([RawMessage(0, self.n, record_key(record), encode_value(record))])
        self.n += 1
        return self.n - 1


def record(offset: int) -> KafkaRecord:
    key = None if offset % 5 == 0 else (b"" if offset % 5 == 1 else b"k%d" % offset)
    value = None if offset % 7 == 0 else b"v" * (offset % 300)
    headers = (("h", b"1"), ("h", None)) if offset % 3 == 0 else ()
    ts = 1_000_000 + offset * 10 - (15 if offset % 4 == 0 else 0)  # not monotonic
    return KafkaRecord(offset, ts, TimestampType.CREATE_TIME, key, value, headers)


@pytest.fixture
def world(tmp_path: Path):
    storage = FilesystemChunkStorage(tmp_path / "s3")
    cache = MetadataCache(tmp_path / "cache")
    keys = ObjectKeyFactory("p")
    copier = SegmentCopier(storage, CacheSink(cache), keys, "w")
    # three segments with an offset gap inside the second one (compaction), 2 KiB blocks
    offsets = [*range(0, 400), *range(400, 800, 2), *range(800, 1200)]
    expected = [record(o) for o in offsets]
    bounds = [(0, 0, 399), (400, 400, 799), (800, 800, 1199)]
    for start, lo, hi in bounds:
        b = SegmentBuilder(TP.partition, start, 2048)
        for r in expected:
            if lo <= r.offset <= hi:
                b.append(r.offset, int(r.timestamp_type), r.timestamp, r.key, r.value, r.headers)
        copier.copy(TP, b.seal(), 0)
    reader = RemoteReader(storage, RemoteLogMetadataManager(cache), keys)
    yield reader, expected, storage, cache
    cache.close()


def test_reads_from_the_middle_and_across_segment_boundaries(world) -> None:
    reader, expected, _storage, _cache = world
    got = reader.read_from_offset(TP, 350, max_records=200)
    start = next(i for i, r in enumerate(expected) if r.offset >= 350)
    assert got == expected[start : start + 200]
    # an offset in a gap starts at the next record
    assert reader.read_from_offset(TP, 401, max_records=1)[0].offset == 402
    # everything, in one go, byte-exact
    assert reader.read_from_offset(TP, 0, max_records=10_000, max_bytes=1 << 30) == expected


def test_reads_by_timestamp_start_at_the_first_record_at_or_after_it(world) -> None:
    reader, expected, _s, _c = world
    for ts in [0, 1_000_000, 1_004_005, 1_007_990, 1_011_985]:
        want = next(i for i, r in enumerate(expected) if r.timestamp >= ts)
        assert reader.read_from_timestamp(TP, ts, max_records=5) == expected[want : want + 5]
    with pytest.raises(OffsetNotInRemoteError):
        reader.read_from_timestamp(TP, 10**12)


def test_offsets_outside_remote_storage_are_reported(world) -> None:
    reader, *_ = world
    with pytest.raises(OffsetNotInRemoteError):
        reader.read_from_offset(TP, 1200)
    with pytest.raises(OffsetNotInRemoteError):
        reader.read_from_offset(TopicPartition("other", 0), 0)


def test_only_the_index_and_needed_blocks_are_requested(world) -> None:
    reader, _expected, storage, cache = world
    seg = cache.finished_segment_for_offset(TP, 900)
    got = reader.read_from_offset(TP, 900, max_records=3)
    assert [r.offset for r in got] == [900, 901, 902]
    assert reader.stats.requests == 2  # one index GET, one block GET
    block_bytes = reader.stats.bytes_requested - seg.index_size_in_bytes
    assert block_bytes <= 2048 + 400  # one block, not the 100+ KiB data object
    assert storage.stat(seg.data_object_key).size > 20 * block_bytes
    reader.read_from_offset(TP, 905, max_records=1)
    assert reader.stats.requests == 3  # the index is cached


def test_a_corrupted_data_object_yields_an_error_not_records(world) -> None:
    reader, _e, storage, cache = world
    seg = cache.finished_segment_for_offset(TP, 500)
    path = storage.root / seg.data_object_key
    raw = bytearray(path.read_bytes())
    raw[len(raw) // 2] ^= 0x40
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptObjectError) as err:
        reader.read_from_offset(TP, 400, max_records=10_000, max_bytes=1 << 30)
    assert seg.data_object_key in str(err.value) and str(seg.segment_id) in str(err.value)


def test_a_missing_or_swapped_index_is_reported(world) -> None:
    reader, _e, storage, cache = world
    a = cache.finished_segment_for_offset(TP, 10)
    b = cache.finished_segment_for_offset(TP, 1000)
    (storage.root / a.index_object_key).write_bytes((storage.root / b.index_object_key).read_bytes())
    with pytest.raises(CorruptObjectError, match="index"):
        reader.read_from_offset(TP, 10)
    storage.delete(b.index_object_key)
    with pytest.raises(SegmentObjectMissingError) as err:
        reader.read_from_offset(TP, 1000)
    assert b.index_object_key in str(err.value)
    assert a.state is SegmentState.COPY_SEGMENT_FINISHED


def test_remote_fetch_requests_bytes_and_errors_per_topic(world) -> None:
    from prometheus_client import REGISTRY

    reader, _e, storage, cache = world

    def sample(name: str) -> float:
        return REGISTRY.get_sample_value(name, {"topic": TP.topic}) or 0.0

    before = {
        n: sample(n)
        for n in (
            "processor_remote_fetch_requests_total",
            "processor_remote_fetch_bytes_total",
            "processor_remote_fetch_errors_total",
        )
    }
    reader.read_from_offset(TP, 900, max_records=3)
    assert (
        sample("processor_remote_fetch_requests_total") == before["processor_remote_fetch_requests_total"] + 1
    )
    assert (
        sample("processor_remote_fetch_bytes_total") - before["processor_remote_fetch_bytes_total"]
        == reader.stats.bytes_requested
    )
    with pytest.raises(OffsetNotInRemoteError):  # an answer, not an error of the remote log
        reader.read_from_offset(TP, 5000)
    assert sample("processor_remote_fetch_errors_total") == before["processor_remote_fetch_errors_total"]
    seg = cache.finished_segment_for_offset(TP, 500)
    (storage.root / seg.data_object_key).unlink()
    with pytest.raises(SegmentObjectMissingError):
        reader.read_from_offset(TP, 500, max_records=10)
    assert (
        sample("processor_remote_fetch_requests_total") == before["processor_remote_fetch_requests_total"] + 3
    )
    assert sample("processor_remote_fetch_errors_total") == before["processor_remote_fetch_errors_total"] + 1


def _batch_archive(tmp_path: Path) -> tuple[FilesystemChunkStorage, MetadataCache, list[bytes]]:
    """Two format 2 segments of 30 record batches each (240 records), in 1 KiB blocks."""
    storage = FilesystemChunkStorage(tmp_path / "s3")
    cache = MetadataCache(tmp_path / "cache")
    copier = SegmentCopier(storage, CacheSink(cache), ObjectKeyFactory("p"), "w")
    batches = [
        make_batch(i * 4, [(1_700_000_000_000 + i, b"k", b"v" * (200 + 37 * i), ())] * 4) for i in range(60)
    ]
    for first in (0, 30):
        asm = SegmentAssembler(TP.partition, first * 4, 1024)
        for raw in batches[first : first + 30]:
            asm.append(parse_batch_header(raw), raw)
        copier.copy(TP, asm.seal(), 0)
    return storage, cache, batches


def test_whole_block_reads_go_on_where_the_last_ended_and_fetch_each_block_once(tmp_path: Path) -> None:
    """Read-ahead's reads (whole_blocks): consecutive reads from each answer's end return every batch
    once, in order, and fetch every stored byte of the data object once (cut at the byte limit, the
    next read fetched the rest of the last block again); a fetch-sized read keeps its limit."""
    storage, cache, batches = _batch_archive(tmp_path)
    reader = RemoteReader(storage, RemoteLogMetadataManager(cache), ObjectKeyFactory("p"))
    try:
        got: list[bytes] = []
        offset = 0
        while (answer := reader.read_batches(TP, offset, 3000, whole_blocks=True)) is not None:
            assert answer.batches and answer.size == sum(len(b) for b in answer.batches)
            got += [bytes(b) for b in answer.batches]
            offset = answer.next_offset
        assert got == batches
        data = [s.data_object_key for s in cache.finished_segments(TP, 0)]
        index_bytes = sum(s.index_size_in_bytes for s in cache.finished_segments(TP, 0))
        stats = [storage.stat(k) for k in data]
        sizes = [st.size for st in stats if st is not None]
        assert len(sizes) == len(data)
        assert reader.stats.bytes_requested == sum(sizes) + index_bytes
        cut = reader.read_batches(TP, 0, 3000)
        assert cut is not None and cut.size <= 3000 and cut.batches[0] == batches[0]
    finally:
        cache.close()


def test_blocks_read_once_come_from_the_block_cache_after(tmp_path: Path) -> None:
    """A reader with a block cache reads each block from storage once: reading the same ranges
    again (batches or records, from any offset inside them) asks storage for nothing, and the
    answers are the same bytes."""
    storage, cache, batches = _batch_archive(tmp_path)
    blocks = BlockCache(tmp_path / "blocks", 1 << 20)
    reader = RemoteReader(storage, RemoteLogMetadataManager(cache), ObjectKeyFactory("p"), block_cache=blocks)
    try:
        first = reader.read_batches(TP, 0, 1 << 20)
        assert first is not None and [bytes(b) for b in first.batches] == batches
        records = reader.read_from_offset(TP, 0, max_records=10_000, max_bytes=1 << 30)
        asked = reader.stats.requests
        again = reader.read_batches(TP, 0, 1 << 20)
        assert again is not None and [bytes(b) for b in again.batches] == batches
        assert reader.read_from_offset(TP, 0, max_records=10_000, max_bytes=1 << 30) == records
        middle = reader.read_batches(TP, 101, 3000)
        assert middle is not None and bytes(middle.batches[0]) == batches[25]
        assert reader.stats.requests == asked  # nothing more from storage
    finally:
        cache.close()


def test_a_cached_block_damaged_on_disk_is_read_from_storage_again(tmp_path: Path) -> None:
    storage, cache, batches = _batch_archive(tmp_path)
    blocks = BlockCache(tmp_path / "blocks", 1 << 20)
    reader = RemoteReader(storage, RemoteLogMetadataManager(cache), ObjectKeyFactory("p"), block_cache=blocks)
    try:
        reader.read_batches(TP, 0, 1 << 20)
        for f in (tmp_path / "blocks").iterdir():
            raw = bytearray(f.read_bytes())
            raw[len(raw) // 2] ^= 0x01
            f.write_bytes(bytes(raw))
        asked = reader.stats.requests
        again = reader.read_batches(TP, 0, 1 << 20)
        assert again is not None and [bytes(b) for b in again.batches] == batches
        assert reader.stats.requests > asked  # read from storage, not answered with damaged bytes
    finally:
        cache.close()


def test_a_block_damaged_in_storage_is_never_cached(tmp_path: Path) -> None:
    """A block that fails verification is reported and not kept: the next read asks storage again
    (a block damaged on its way would otherwise stay wrong in the cache)."""
    storage, cache, _batches = _batch_archive(tmp_path)
    blocks = BlockCache(tmp_path / "blocks", 1 << 20)
    reader = RemoteReader(storage, RemoteLogMetadataManager(cache), ObjectKeyFactory("p"), block_cache=blocks)
    try:
        seg = next(iter(cache.finished_segments(TP, 0)))
        path = storage.root / seg.data_object_key
        good = path.read_bytes()
        raw = bytearray(good)
        raw[40] ^= 0x40  # inside the first block
        path.write_bytes(bytes(raw))
        with pytest.raises(CorruptObjectError):
            reader.read_batches(TP, 0, 1 << 20)
        assert blocks.get(seg.data_object_key, 0, len(good)) is None and blocks.size == 0
        path.write_bytes(good)
        assert reader.read_batches(TP, 0, 1 << 20) is not None
    finally:
        cache.close()


def test_format_1_segments_are_read_as_record_batches_at_their_own_offsets(world) -> None:
    """Archives written by early versions (one entry per record) are served as batches too: what a
    Kafka client decodes from them is the archived records from the asked offset on, across
    segments and compacted gaps, each at its own offset. Offset 799 is in no segment (the second
    ends at its last record, 798) and no copy in flight covers it: a read there goes on at 800, as
    over a range the broker deleted before it was archived."""
    reader, expected, _storage, _cache = world
    for start, end in ((350, 1199), (800, 1199)):
        decoded, offset = [], start
        while (got := reader.read_batches(TP, offset, 3000)) is not None:  # as a consumer fetches on
            assert got.batches and got.next_offset > offset
            decoded += [r for b in got.batches for r in batch_records(b)]
            offset = got.next_offset
        assert decoded == [r for r in expected if start <= r.offset <= end]
    small = reader.read_batches(TP, 401, 2000)  # 401 is a gap: from the next record, within the limit
    assert small is not None and batch_records(small.batches[0])[0].offset == 402
    assert small.size <= 2000 or len(small.batches) == 1
    over = reader.read_batches(TP, 799, 2000)
    assert over is not None and batch_records(over.batches[0])[0].offset == 800


def test_a_read_in_a_range_lost_before_archiving_goes_on_at_the_next_segment(tmp_path: Path) -> None:
    """The broker deleted offsets 120..239 before they were archived: the segments served are 0..119
    and 240..359. A read of batches anywhere in the gap is answered from the batch at 240 (as a
    compacted topic's gap is), byte-exact; while a copy in flight covers the gap, nothing is answered
    (the range may still be served). Records read by offset step over it the same way."""
    storage = FilesystemChunkStorage(tmp_path / "s3")
    cache = MetadataCache(tmp_path / "cache")
    sink = CacheSink(cache)
    copier = SegmentCopier(storage, sink, ObjectKeyFactory("p"), "w")
    batches = [make_batch(i * 4, [(1_700_000_000_000 + i, b"k", b"v" * 100, ())] * 4) for i in range(90)]
    for first in (0, 60):  # batches 30..59 (offsets 120..239) lost
        asm = SegmentAssembler(TP.partition, first * 4, 1024)
        for raw in batches[first : first + 30]:
            asm.append(parse_batch_header(raw), raw)
        copier.copy(TP, asm.seal(), 0)
    reader = RemoteReader(storage, RemoteLogMetadataManager(cache), ObjectKeyFactory("p"))
    try:
        for offset in (120, 200, 239):
            got = reader.read_batches(TP, offset, 1 << 20)
            assert got is not None and [bytes(b) for b in got.batches] == batches[60:]
            assert got.next_offset == 360
            ahead = reader.read_batches(TP, offset, 1 << 20, whole_blocks=True)
            assert ahead is not None and bytes(ahead.batches[0]) == batches[60]
        assert reader.read_batches(TP, 360, 1 << 20) is None  # past the end: live data
        assert [r.offset for r in reader.read_from_offset(TP, 118, max_records=4)] == [118, 119, 240, 241]
        assert [r.offset for r in reader.read_from_offset(TP, 200, max_records=2)] == [240, 241]
        # a copy of the gap in flight: not lost (yet), the reader waits for it
        served = cache.finished_segment_for_offset(TP, 240)
        assert served is not None
        sid = uuid.uuid4()
        keys = ObjectKeyFactory("p").segment(TP.topic, TP.partition, 120, sid, 0)
        in_flight = dataclasses.replace(
            served,
            segment_id=dataclasses.replace(served.segment_id, id=sid),
            data_object_key=keys.data,
            index_object_key=keys.index,
            start_offset=120,
            end_offset=239,
            state=SegmentState.COPY_SEGMENT_STARTED,
            event_timestamp_ms=served.event_timestamp_ms + 1,
        )
        sink.publish(in_flight)
        assert any(s.start_offset == 120 for s in cache.listed_segments(TP))
        assert reader.read_batches(TP, 200, 1 << 20) is None
        with pytest.raises(OffsetNotInRemoteError):
            reader.read_from_offset(TP, 200)
    finally:
        cache.close()
