"""Restoring every archive shape into the real broker: a format 1 segment (one entry per record), and
format 2 segments holding compacted batches (offset gaps inside a batch), a LogAppendTime batch and
compressed batches. The archive lives on filesystem storage with its metadata in a follower cache
(the same reader and catalog the command uses); the target is the stack's broker."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.devstack.stack import StackInfo
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.codec import encode_value, record_key
from processor.metadata.model import MetadataRecord
from processor.reader.remote_reader import RemoteReader
from processor.restore.archive import ArchiveTopic
from processor.restore.plan import range_from, range_to
from processor.restore.run import PreparedRestore, RestoreRequest
from processor.restore.state import RestoreOptions
from processor.restore.target import DEFAULT_PROGRESS_TOPIC, TargetCluster
from processor.segment.entries_v2 import parse_batch_header
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord, TimestampType
from processor.segment.segment_assembler import SegmentAssembler, compress_segment
from processor.storage.filesystem import FilesystemChunkStorage
from tests.batch_samples import expected_records, make_batch
from tests.integration.restore_support import committed_target, content
from tests.support.segment_v1_writer import SegmentBuilder

pytestmark = pytest.mark.integration

TOPIC = "shapes"
TP = TopicPartition(TOPIC, 0)


class CacheSink:
    def __init__(self, cache: MetadataCache) -> None:
        self.cache, self.n = cache, 0

    def publish(self, record: MetadataRecord) -> int:
        self.cache.apply_batch([RawMessage(0, self.n, record_key(record), encode_value(record))])
        self.n += 1
        return self.n - 1


def archive_of_every_shape(root: Path) -> tuple[ArchiveTopic, MetadataCache, list[KafkaRecord]]:
    storage = FilesystemChunkStorage(root / "bucket")
    cache = MetadataCache(root / "cache")
    keys = ObjectKeyFactory("shapes")
    copier = SegmentCopier(storage, CacheSink(cache), keys, "w")
    expected: list[KafkaRecord] = []
    v1 = SegmentBuilder(0, 0, 1024)  # format 1, several blocks
    for offset in range(0, 300):
        record = KafkaRecord(
            offset,
            1_700_000_000_000 + offset,
            TimestampType.CREATE_TIME,
            b"k%d" % offset,
            b"v" * (offset % 40),
            (("h", b"%d" % offset),) if offset % 3 == 0 else (),
        )
        v1.append(
            record.offset,
            int(record.timestamp_type),
            record.timestamp,
            record.key,
            record.value,
            record.headers,
        )
        expected.append(record)
    copier.copy(TP, v1.seal(), 0)
    rows = [
        (1_700_000_100_000 + i, None if i % 4 == 0 else b"key", b"x" * i, [("a", None)]) for i in range(6)
    ]
    batches = [
        make_batch(300, rows, "zstd"),  # compressed
        make_batch(306, rows, offset_deltas=[0, 2, 3, 7, 8, 11]),  # compacted: gaps inside the batch
        make_batch(318, rows, "lz4", log_append_time=1_700_000_200_000),
        make_batch(324, rows, "gzip", offset_deltas=[0, 1, 2, 3, 4, 9]),
    ]
    expected += expected_records(300, rows) + expected_records(306, rows, [0, 2, 3, 7, 8, 11])
    expected += expected_records(318, rows, log_append_time=1_700_000_200_000)
    expected += expected_records(324, rows, [0, 1, 2, 3, 4, 9])
    asm = SegmentAssembler(0, 300, 512)
    for raw in batches:
        asm.append(parse_batch_header(raw), raw)
    copier.copy(TP, compress_segment(asm.seal()), 0)
    reader = RemoteReader(storage, RemoteLogMetadataManager(cache), keys)
    return ArchiveTopic(reader, cache, TOPIC), cache, expected


def test_every_archive_shape_restores_byte_exact(local_stack: StackInfo, tmp_path: Path) -> None:
    archive, cache, expected = archive_of_every_shape(tmp_path)
    try:
        assert archive.decoded(0) == expected  # the archive holds what the test wrote
        target = TargetCluster(local_stack.bootstrap_servers)
        request = RestoreRequest(
            TOPIC,
            None,
            "shapes-restored",
            range_from(None, None),
            range_to(None, None),
            "same",
            "shapes",
            DEFAULT_PROGRESS_TOPIC,
            target,
            RestoreOptions(transaction_records=50),
        )
        prepared = PreparedRestore(request, archive, "bucket", "shapes")
        try:
            summary = prepared.execute()
        finally:
            prepared.close()
        assert summary.records == len(expected) and summary.transactions > 1
        got, _aborted = committed_target(local_stack.bootstrap_servers, TopicPartition("shapes-restored", 0))
        # LogAppendTime records come back as CreateTime records carrying the append time
        assert content(got) == content(expected)
        assert {r.timestamp_type for r in got} == {TimestampType.CREATE_TIME}
        progress = target.committed_progress(
            DEFAULT_PROGRESS_TOPIC, target.partition_count(DEFAULT_PROGRESS_TOPIC) or 1, "shapes"
        )
        offset_map = progress[0].offset_map
        assert [offset_map.target_of(r.offset) for r in expected] == [r.offset for r in got]
        assert offset_map.covered_end == 334  # the last batch ends at 324 + 9 + 1
        assert offset_map.translate(310) == offset_map.target_of(313)  # inside a compacted gap
    finally:
        archive.reader.storage.close()
        cache.close()
