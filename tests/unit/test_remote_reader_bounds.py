"""Remote reads by offset within a record and a byte budget, against a model: the records from the
first at or after the offset, at most ``max_records``, and the one whose key and value bytes reach
``max_bytes`` the last (the reader takes a block's records at a time, sliced and summed in bulk)."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.leader.segment_copier import SegmentCopier
from processor.reader.remote_reader import RemoteReader
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord
from processor.storage.filesystem import FilesystemChunkStorage
from tests.support.segment_v1_writer import SegmentBuilder
from tests.unit.test_remote_reader import TP, CacheSink, record

OFFSETS = [*range(0, 400), *range(400, 800, 2), *range(800, 1200)]  # a gap inside the second segment
EXPECTED = [record(o) for o in OFFSETS]


@pytest.fixture(scope="module")
def reader() -> Iterator[RemoteReader]:
    with tempfile.TemporaryDirectory() as tmp:
        storage = FilesystemChunkStorage(Path(tmp) / "s3")
        cache = MetadataCache(Path(tmp) / "cache")
        keys = ObjectKeyFactory("p")
        copier = SegmentCopier(storage, CacheSink(cache), keys, "w")
        for start, hi in ((0, 399), (400, 799), (800, 1199)):
            b = SegmentBuilder(TP.partition, start, 2048)  # 2 KiB blocks: many per read
            for r in EXPECTED:
                if start <= r.offset <= hi:
                    b.append(r.offset, int(r.timestamp_type), r.timestamp, r.key, r.value, r.headers)
            copier.copy(TP, b.seal(), 0)
        yield RemoteReader(storage, RemoteLogMetadataManager(cache), keys)
        cache.close()


def _model(offset: int, max_records: int, max_bytes: int) -> list[KafkaRecord]:
    out: list[KafkaRecord] = []
    size = 0
    for r in EXPECTED:
        if r.offset < offset:
            continue
        if len(out) >= max_records or size >= max_bytes:
            break
        out.append(r)
        size += len(r.key or b"") + len(r.value or b"")
    return out


@settings(max_examples=200)
@given(
    st.integers(0, 1199),
    st.integers(1, 700),
    st.one_of(st.integers(1, 5000), st.just(1 << 40)),
)
def test_reads_match_the_model(reader: RemoteReader, offset: int, max_records: int, max_bytes: int) -> None:
    assert reader.read_from_offset(TP, offset, max_records, max_bytes) == _model(
        offset, max_records, max_bytes
    )
