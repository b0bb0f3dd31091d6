"""The remote reader's index cache and its read ahead of an uncached index, over real objects on
filesystem storage and the real metadata fold: bounded, keyed by segment id (a segment taken over
under another id is read anew), a damaged index refused and never kept, the guessed range's bytes
verified and the results byte-exact whether the guess holds the blocks or not."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor.errors import CorruptObjectError, SegmentObjectMissingError
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.reader.remote_reader import RemoteReader
from processor.reader.segment_fetch import MAX_AHEAD_BYTES, guess_range
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord
from processor.segment.sealed_segment import SealedSegment
from processor.storage.filesystem import FilesystemChunkStorage
from tests.support.segment_v1_writer import SegmentBuilder
from tests.unit.test_remote_reader import TP, CacheSink, record

BOUNDS = [(0, 0, 399), (400, 400, 799), (800, 800, 1199)]


@dataclasses.dataclass
class World:
    storage: FilesystemChunkStorage
    cache: MetadataCache
    keys: ObjectKeyFactory
    copier: SegmentCopier
    expected: list[KafkaRecord]

    def reader(self, **kwargs: object) -> RemoteReader:
        return RemoteReader(self.storage, RemoteLogMetadataManager(self.cache), self.keys, **kwargs)  # type: ignore[arg-type]

    def segment(self, offset: int) -> RemoteLogSegmentMetadata:
        found = self.cache.finished_segment_for_offset(TP, offset)
        assert found is not None
        return found


def _sealed(records: list[KafkaRecord], start: int, block_bytes: int = 2048) -> SealedSegment:
    b = SegmentBuilder(TP.partition, start, block_bytes)
    for r in records:
        b.append(r.offset, int(r.timestamp_type), r.timestamp, r.key, r.value, r.headers)
    return b.seal()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    storage = FilesystemChunkStorage(tmp_path / "s3")
    cache = MetadataCache(tmp_path / "cache")
    keys = ObjectKeyFactory("p")
    copier = SegmentCopier(storage, CacheSink(cache), keys, "w")
    expected = [record(o) for o in range(1200)]
    for start, lo, hi in BOUNDS:
        copier.copy(TP, _sealed([r for r in expected if lo <= r.offset <= hi], start), 0)
    yield World(storage, cache, keys, copier, expected)
    cache.close()


def test_the_index_cache_is_bounded_and_an_evicted_index_is_read_again(world: World) -> None:
    reader = world.reader(index_cache_entries=2, ahead_of_index=False)
    for offset in (100, 500, 900):
        reader.read_from_offset(TP, offset, max_records=1)
    assert len(reader.fetch._indexes) == 2  # the least recently used one (0..399) left
    before = reader.stats.requests
    assert reader.read_from_offset(TP, 901, max_records=1) == [world.expected[901]]
    assert reader.stats.requests == before + 1  # cached: the block only
    assert reader.read_from_offset(TP, 101, max_records=1) == [world.expected[101]]
    assert reader.stats.requests == before + 3  # evicted: its index again, and the block
    assert len(reader.fetch._indexes) == 2


def test_a_segment_deleted_and_created_again_under_another_id_is_read_from_its_own_objects(
    world: World, tmp_path: Path
) -> None:
    reader = world.reader(ahead_of_index=True)
    old = world.segment(900)
    assert reader.read_from_offset(TP, 900, max_records=3) == world.expected[900:903]
    # the archive as another fold has it (a topic deleted and archived again in another bucket
    # history): the same offsets in a segment of another id and other values, the old one's
    # objects deleted; the reader's cached index of the old id is never used for the new one
    other = MetadataCache(tmp_path / "other-cache")
    copier = SegmentCopier(world.storage, CacheSink(other), world.keys, "w2")
    again = [dataclasses.replace(r, value=b"again %d" % r.offset) for r in world.expected]
    for start, lo, hi in BOUNDS:
        copier.copy(TP, _sealed(again[lo : hi + 1], start, 4096), 0)
    for offset in (100, 500, 900):
        assert world.copier.delete_segment(world.segment(offset))
    assert not world.storage.exists(old.index_object_key)
    reader.lookup = RemoteLogMetadataManager(other)
    try:
        assert reader.read_from_offset(TP, 900, max_records=3) == again[900:903]
        assert reader.read_from_offset(TP, 799, max_records=2) == again[799:801]
    finally:
        other.close()


@pytest.mark.parametrize("ahead", [False, True])
def test_a_damaged_index_is_refused_and_not_kept(world: World, ahead: bool) -> None:
    reader = world.reader(ahead_of_index=ahead)
    seg = world.segment(500)
    path = world.storage.root / seg.index_object_key
    good = path.read_bytes()
    damaged = bytearray(good)
    damaged[len(damaged) // 2] ^= 0x10
    path.write_bytes(bytes(damaged))
    for _ in range(2):  # refused each time: a refused index is never cached
        with pytest.raises(CorruptObjectError) as err:
            reader.read_from_offset(TP, 500, max_records=5)
        assert seg.index_object_key in str(err.value)
    path.write_bytes(good)
    assert reader.read_from_offset(TP, 500, max_records=5) == world.expected[500:505]
    # once verified and cached, the index is the verified copy: damage later is not read
    path.write_bytes(bytes(damaged))
    assert reader.read_from_offset(TP, 600, max_records=5) == world.expected[600:605]


def test_the_guess_makes_one_round_trip_of_the_index_and_its_blocks(world: World) -> None:
    reader = world.reader(ahead_of_index=True)
    seg = world.segment(805)  # near its start: the guess holds the blocks whatever the record sizes
    got = reader.read_from_offset(TP, 805, max_records=20)
    assert got == world.expected[805:825]
    assert reader.stats.requests == 2  # the index and the guessed range, at once
    assert reader.stats.ahead_used == 1 and reader.stats.ahead_missed == 0
    assert reader.stats.bytes_requested - seg.index_size_in_bytes < seg.segment_size_in_bytes // 3
    assert reader.read_from_offset(TP, 1100, max_records=5) == world.expected[1100:1105]
    assert reader.stats.requests == 3  # index cached: no guess, the block alone


def test_a_guess_that_misses_reads_the_blocks_with_their_own_get(world: World) -> None:
    # a segment whose first half holds nearly all its bytes: the even-size guess lands far off
    records = [dataclasses.replace(r, value=b"x" * (2000 if r.offset < 1300 else 1)) for r in
               [record(o) for o in range(1200, 2400)]]  # fmt: skip
    world.copier.copy(TP, _sealed(records, 1200), 0)
    reader = world.reader(ahead_of_index=True)
    assert reader.read_from_offset(TP, 2300, max_records=50) == records[1100:1150]
    assert reader.stats.ahead_missed == 1 and reader.stats.requests == 3


def test_a_failed_guess_is_counted_and_the_reads_own_error_raised(world: World) -> None:
    reader = world.reader(ahead_of_index=True)
    seg = world.segment(300)
    (world.storage.root / seg.data_object_key).unlink()
    with pytest.raises(SegmentObjectMissingError):
        reader.read_from_offset(TP, 300, max_records=5)
    assert reader.stats.ahead_failed == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(offset=st.integers(0, 1199), max_records=st.integers(1, 700), max_bytes=st.integers(1, 200_000))
def test_reads_with_the_guess_are_those_without(
    world: World, offset: int, max_records: int, max_bytes: int
) -> None:
    plain = world.reader(ahead_of_index=False).read_from_offset(TP, offset, max_records, max_bytes)
    guessed = world.reader(ahead_of_index=True)
    assert guessed.read_from_offset(TP, offset, max_records, max_bytes) == plain
    batches = guessed.read_batches(TP, offset, max_bytes, whole_blocks=True)
    fresh = world.reader(ahead_of_index=False).read_batches(TP, offset, max_bytes, whole_blocks=True)
    assert batches is not None and fresh is not None
    assert [bytes(b) for b in batches.batches] == [bytes(b) for b in fresh.batches]


@given(
    start=st.integers(0, 10**9),
    span=st.integers(1, 10**6),
    at=st.floats(0, 1),
    size=st.integers(1, 1 << 34),
    index_size=st.integers(0, 10**7),
    want=st.integers(-10, 1 << 30),
)
def test_a_guessed_range_lies_within_the_object_and_holds_the_even_size_position(
    start: int, span: int, at: float, size: int, index_size: int, want: int
) -> None:
    seg = dataclasses.replace(
        _any_segment(), start_offset=start, end_offset=start + span - 1, segment_size_in_bytes=size,
        index_size_in_bytes=index_size,
    )  # fmt: skip
    offset = start + int(at * (span - 1))
    got = guess_range(seg, offset, want)
    if got is None:
        return
    lo, length = got
    assert lo >= 0 and length > 0 and lo + length <= size and length <= MAX_AHEAD_BYTES
    even = size * (offset - start) // span
    assert lo <= even <= lo + length
    assert guess_range(seg, start - 1, want) is None and guess_range(seg, start + span, want) is None


def _any_segment() -> RemoteLogSegmentMetadata:
    sid = RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4())
    keys = ObjectKeyFactory("p").segment(TP.topic, TP.partition, 0, sid.id, 1)
    return RemoteLogSegmentMetadata(
        sid, 0, 9, 1_700_000_000_000, 1, "w", 1, ((0, 0),), 1 << 20,
        SegmentState.COPY_SEGMENT_FINISHED, keys.data, keys.index, 1, 10, 0, 100,
    )  # fmt: skip
