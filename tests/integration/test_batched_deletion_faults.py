"""A merge's batched deletion of its sources with S3 failing half way (the fault proxy in front of the
real SeaweedFS answers the second DeleteObjects request with a 500): the manifests are gone, the
sources' other objects stay, every record stays served (from the merged segment), the failed
sources are recorded for retry and counted, and the next pass deletes them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterable, Iterator, Sequence

import pytest

from processor import metrics
from processor.devstack.stack import StackInfo
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.lifecycle.retention_policy import RetentionLimits
from processor.lifecycle.retention_service import clean_partition
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.fold import MetadataFold
from processor.metadata.model import (
    ClaimKind,
    MetadataRecord,
    PartitionClaim,
    RemoteLogSegmentMetadata,
    SegmentState,
)
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic, read_partitions
from processor.reader.segment_keys import NO_DECRYPTION
from processor.rewrite.merge_plan import MergeLimits
from processor.rewrite.merge_runner import merge_partition
from processor.rewrite.merged_segment import merged_segment
from processor.rewrite.source_segment import read_source
from processor.segment.entries_v2 import parse_batch_header, records_as_batches
from processor.segment.object_keys import ObjectKeyFactory
from processor.segment.records import KafkaRecord, TimestampType
from processor.segment.sealed_segment import SealedSegment
from processor.segment.segment_assembler import SegmentAssembler
from processor.storage.s3 import S3ChunkStorage
from processor.storage.s3_client import S3Options
from tests.support.fault_proxy import FaultProxy, error_rule

pytestmark = pytest.mark.integration

TP = TopicPartition("batched-delete", 0)
S = SegmentState


class Metadata:
    """The metadata topic's fold in memory (the real fold): what the publisher appends and the
    follower confirms; the deletion topic's failed entries."""

    def __init__(self) -> None:
        self.fold = MetadataFold()
        self.accepted: dict[int, bool] = {}
        self.offset = 0
        self.failed: list[uuid.UUID] = []

    def publish(self, record: MetadataRecord) -> int:
        offset = self.offset
        self.offset += 1
        self.accepted[offset] = self.fold.apply_record(offset, record).accepted
        return offset

    def confirm(self, record: MetadataRecord, offset: int) -> bool:
        return self.accepted.get(offset, False)

    def tombstone(self, segment: RemoteLogSegmentMetadata) -> int:
        return self.offset

    def record_failed(self, segment: RemoteLogSegmentMetadata) -> None:
        self.failed.append(segment.segment_id.id)

    def resolve(self, segment: RemoteLogSegmentMetadata) -> None:
        self.failed.remove(segment.segment_id.id)

    def state(self) -> PartitionRemoteState:
        return PartitionRemoteState.of(self.fold.partition(TP))


class FailsSecondBatch(S3ChunkStorage):
    """S3 through the fault proxy; at its second batch delete (the first after the manifests) the
    proxy answers the DeleteObjects request, and the client's retry of it, with a 500."""

    def __init__(self, options: S3Options, proxy: FaultProxy) -> None:
        super().__init__(options)
        self.proxy = proxy
        self.batches = 0

    def delete_many(self, keys: Iterable[str]) -> None:
        self.batches += 1
        if self.batches == 2:
            # the request and the client's one retry (max_attempts=1)
            self.proxy.add_rule(error_rule({"delete_objects"}, limit=2))
        super().delete_many(keys)


def _storage(endpoint: str, bucket: str) -> S3Options:
    return S3Options(bucket=bucket, endpoint_url=endpoint, region="us-east-1", max_attempts=1)


@pytest.fixture
def direct(local_stack: StackInfo) -> Iterator[S3ChunkStorage]:
    storage = S3ChunkStorage(_storage(local_stack.s3_endpoint_url, local_stack.bucket))
    yield storage
    storage.close()


def _segment(start: int, count: int) -> tuple[SealedSegment, list[bytes]]:
    records = [
        KafkaRecord(o, 1_700_000_000_000 + o, TimestampType.CREATE_TIME, b"k%d" % o, bytes([o % 251]) * 512)
        for o in range(start, start + count)
    ]
    batches = list(records_as_batches(records, 4096))
    assembler = SegmentAssembler(TP.partition, start, 1 << 20)
    for batch in batches:
        assembler.append(parse_batch_header(batch), batch)
    return assembler.seal(), [bytes(b) for b in batches]


def test_a_batched_deletion_cut_half_way_loses_nothing_and_the_rest_is_retried(
    local_stack: StackInfo, fault_proxy: FaultProxy, direct: S3ChunkStorage
) -> None:
    keys = ObjectKeyFactory(f"batched-{uuid.uuid4().hex[:8]}")
    meta = Metadata()
    epoch = meta.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0))
    copier = SegmentCopier(direct, meta, keys, "w", confirm=meta.confirm)
    written: list[bytes] = []
    start = 0
    for _ in range(6):
        sealed, batches = _segment(start, 20)
        copier.copy(TP, sealed, epoch)
        written += batches
        start = sealed.end_offset + 1
    sources = meta.state().finished()
    objects = {s.segment_id.id: keys.owned_objects(TP.topic, 0, s.segment_id.id, s.segment_id.topic_id,
                                                    s.data_object_key, s.index_object_key)
               for s in sources}  # fmt: skip

    proxied = FailsSecondBatch(_storage(fault_proxy.endpoint_url, local_stack.bucket), fault_proxy)
    try:
        deleter = SegmentDeleter(proxied, meta, meta, meta, "w", keys, meta.confirm)
        failures = metrics.DELETE_FAILURES._value.get()

        def delete(
            tp: TopicPartition,
            todo: Sequence[RemoteLogSegmentMetadata],
            ep: int,
            part: PartitionRemoteState | None,
        ) -> list[str]:
            return deleter.delete_superseded(tp, todo, ep, part)

        report, _runs = merge_partition(
            TP,
            meta.state,
            epoch,
            MergeLimits(target_bytes=1 << 24, small_bytes=1 << 22, min_age_ms=0),
            int(time.time() * 1000),
            lambda run: merged_segment(direct, keys, run, NO_DECRYPTION, 1 << 20),
            copier,
            delete,
        )
        # the merge is served; its sources' deletion started and was cut after the manifests
        (merged,) = meta.state().finished()
        assert report.merged_segments == 6 and len(report.failed) == 6
        assert fault_proxy.stats.faulted[("delete_objects", "error")] == 2
        assert fault_proxy.stats.forwarded["delete_objects"] == 1  # the manifests' request
        assert metrics.DELETE_FAILURES._value.get() - failures == 6
        assert sorted(meta.failed) == sorted(objects)  # queued on the deletion topic, each of them
        part = meta.state()
        assert all(part.segments[sid].state is S.DELETE_SEGMENT_STARTED for sid in objects)
        for owned in objects.values():
            assert direct.stat(owned.manifest) is None  # first: a rebuild never serves it again
            assert direct.stat(owned.data) is not None and direct.stat(owned.index) is not None
        # nothing served is lost: every batch reads back, byte-exact, from the merged segment
        assert [bytes(b) for b in read_source(direct, keys, merged, NO_DECRYPTION).batches] == written

        # the next pass retries the rest (deletions this deleter started) and finishes them
        clean_partition(TP, meta.state(), deleter, epoch, RetentionLimits(), int(time.time() * 1000))
        part = meta.state()
        assert all(part.segments[sid].state is S.DELETE_SEGMENT_FINISHED for sid in objects)
        assert meta.failed == []
        for owned in objects.values():
            assert all(direct.stat(k) is None for k in owned.in_delete_order())
        assert part.finished() == [merged]
        assert [bytes(b) for b in read_source(direct, keys, merged, NO_DECRYPTION).batches] == written
    finally:
        for info in direct.list(keys.prefix + "/"):
            direct.delete(info.key)
        proxied.close()


def test_publish_many_lands_every_record_in_order_with_one_wait(local_stack: StackInfo) -> None:
    """The publisher's batch (what the deleter publishes a pass's records with) on the real broker:
    every record acknowledged, its offsets in the order given, each read back as published; and one
    call after another keeps them apart."""
    topic = f"__meta_many_{uuid.uuid4().hex[:8]}"
    parts = ensure_metadata_topic(local_stack.bootstrap_servers, topic, 1, 1)
    publisher = MetadataPublisher(local_stack.bootstrap_servers, topic, parts)
    try:
        claims = [PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, f"w{i}", i) for i in range(50)]
        first = publisher.publish_many(claims[:40])
        assert first == list(range(40))
        assert publisher.publish_many(claims[40:]) == list(range(40, 50))
        assert publisher.publish_many([]) == []
    finally:
        publisher.close()
    read = [m.record for m in read_partitions(local_stack.bootstrap_servers, topic, [0])]
    assert read == claims
