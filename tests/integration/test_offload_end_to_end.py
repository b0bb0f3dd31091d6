"""Records in Kafka become segments in S3, with their metadata on the compacted topic."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from processor.devstack.sample_data import BIG_VALUE, SampleRecord, produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.model import SegmentState
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from processor.metadata.topic_io import load_remote_state
from processor.segment.blocks import iter_blocks
from processor.segment.index_format import decode_index, index_crc
from processor.segment.records import TimestampType
from processor.storage.s3 import S3ChunkStorage
from processor.storage.s3_client import S3Options
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

TOPIC = "e2e-mixed"
PARTITIONS = 5
META = "__remote_log_metadata_e2e"


def expected_ends(records: list[SampleRecord]) -> dict[TopicPartition, int]:
    counts: dict[int, int] = defaultdict(int)
    for r in records:
        counts[r.partition] += 1
    return {TopicPartition(TOPIC, p): counts[p] - 1 for p in range(PARTITIONS)}


def test_every_record_lands_in_exactly_one_finished_segment_byte_exact(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, PARTITIONS, 1, {})
    env = worker_env(
        local_stack,
        tmp_path / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_SEGMENT_BYTES=str(3 * 1024 * 1024),
        PROCESSOR_SEGMENT_MS="1500",
        PROCESSOR_BLOCK_BYTES=str(64 * 1024),
        PROCESSOR_BUFFER_BYTES=str(32 * 1024 * 1024),
        PROCESSOR_WORKER_ID="e2e-1",
        PROCESSOR_S3_PREFIX="e2e",
    )
    produced = produce_samples(local_stack.bootstrap_servers, TOPIC, 30_000, PARTITIONS)

    # Phase 1: a worker offloads the first 30,000 records, then stops.
    worker = WorkerProcess(env, tmp_path / "worker1.log")
    try:
        wait_offloaded(local_stack.bootstrap_servers, META, expected_ends(produced), 240, worker.proc)
    finally:
        worker.stop()
    # Phase 2: more records arrive while no worker runs; a new worker resumes where remote ends.
    produced += produce_samples(local_stack.bootstrap_servers, TOPIC, 20_000, PARTITIONS, start=30_000)
    worker = WorkerProcess(env, tmp_path / "worker2.log")
    try:
        wait_offloaded(local_stack.bootstrap_servers, META, expected_ends(produced), 240, worker.proc)
    finally:
        worker.stop()
    assert "resuming at" in worker.log()

    state, skipped = load_remote_state(local_stack.bootstrap_servers, META)
    assert skipped == 0
    storage = S3ChunkStorage(
        S3Options(bucket=local_stack.bucket, endpoint_url=local_stack.s3_endpoint_url, region="us-east-1")
    )
    by_partition: dict[int, list[SampleRecord]] = defaultdict(list)
    for r in produced:
        by_partition[r.partition].append(r)

    for p in range(PARTITIONS):
        tp = TopicPartition(TOPIC, p)
        finished = state.partition(tp).finished()
        assert finished, f"nothing offloaded for {tp}"
        assert all(s.state is SegmentState.COPY_SEGMENT_FINISHED for s in finished)
        assert coverage_gaps_and_overlaps(finished) == []
        assert finished[0].start_offset == 0
        assert finished[-1].end_offset == len(by_partition[p]) - 1
        seen: list[int] = []
        for seg in finished:
            assert seg.segment_id.topic_id is not None  # the broker's topic id, also in the key
            assert seg.data_object_key.startswith(f"e2e/{TOPIC}-{seg.segment_id.topic_id}/{p}/")
            raw_index = storage.read_all(seg.index_object_key)
            assert index_crc(raw_index) == seg.index_crc32 and len(raw_index) == seg.index_size_in_bytes
            index = decode_index(raw_index)
            data = storage.read_all(seg.data_object_key)
            assert len(data) == seg.segment_size_in_bytes == index.data_object_length
            records = [r for block in iter_blocks(data) for r in block]
            assert len(records) == seg.record_count
            for rec in records:
                want = by_partition[p][rec.offset]
                assert rec.key == want.key and rec.value == want.value, f"{tp}@{rec.offset}"
                assert rec.headers == want.headers
                assert (rec.timestamp, rec.timestamp_type) == (want.timestamp, TimestampType.CREATE_TIME)
                assert seg.start_offset <= rec.offset <= seg.end_offset
                seen.append(rec.offset)
        assert seen == list(range(len(by_partition[p]))), f"{tp}: records missing or duplicated"
    assert sum(1 for r in produced if r.value is not None and len(r.value) == BIG_VALUE) >= 8
    storage.close()
