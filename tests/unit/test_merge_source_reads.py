"""A merge's source read in one round trip (``read_source`` with ``gets``: the index and the whole data
object fetched at once) gives what the block reader gives, with the same refusals: a missing object,
a block that does not verify, and a data key that is not the segment's own, which is never read."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from processor.errors import CorruptObjectError, SegmentObjectMissingError
from processor.rewrite.source_segment import read_source
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_claims import KEYS
from tests.unit.test_merge import NO_KEYS, Archive


class CountingStorage(FilesystemChunkStorage):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []

    def read(self, key: str, offset: int, length: int) -> bytes:
        self.reads.append(key)
        return super().read(key, offset, length)


def test_the_same_batches_as_the_block_reader_for_every_source(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    with ThreadPoolExecutor(2) as gets:
        for source in arch.served():
            one_trip = read_source(arch.storage, KEYS, source, NO_KEYS, gets)
            two_trips = read_source(arch.storage, KEYS, source, NO_KEYS)
            assert [bytes(b) for b in one_trip.batches] == [bytes(b) for b in two_trips.batches]
            assert one_trip.batches and not one_trip.records


def test_a_missing_or_damaged_data_object_is_refused(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    missing, damaged = arch.served()[:2]
    data = arch.storage.read(damaged.data_object_key, 0, damaged.segment_size_in_bytes)
    arch.storage.delete(damaged.data_object_key)
    arch.storage.create(damaged.data_object_key, [data[:-1] + bytes([data[-1] ^ 1])])
    arch.storage.delete(missing.data_object_key)
    with ThreadPoolExecutor(2) as gets:
        with pytest.raises(SegmentObjectMissingError):
            read_source(arch.storage, KEYS, missing, NO_KEYS, gets)
        with pytest.raises(CorruptObjectError, match="CRC"):
            read_source(arch.storage, KEYS, damaged, NO_KEYS, gets)


def test_a_data_key_outside_the_segments_prefix_is_never_read(tmp_path: Path) -> None:
    arch = Archive(tmp_path)
    storage = CountingStorage(tmp_path)
    source = arch.served()[0]
    forged = dataclasses.replace(source, data_object_key="other-tenant/secret.log")
    with ThreadPoolExecutor(2) as gets, pytest.raises(CorruptObjectError, match="outside"):
        read_source(storage, KEYS, forged, NO_KEYS, gets)
    assert "other-tenant/secret.log" not in storage.reads
