"""Helpers of the retention and deletion tests: producing records with chosen timestamps, and
checking a partition's metadata against the bucket's contents."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass

from processor.devstack.stack import StackInfo
from processor.kafka.admin import partition_counts
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.metadata.manifest import manifest_key
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.metadata.remote_log_state import PartitionRemoteState, RemoteLogState
from processor.metadata.topic_io import read_partitions
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.s3 import S3ChunkStorage
from processor.storage.s3_client import S3Options
from tests.support.cli import CliResult
from tests.support.cli import run_cli as in_process


def produce(
    bootstrap: str, topic: str, partition: int, count: int, timestamp_ms: int, value_bytes: int = 1024
) -> None:
    # Small producer batches: segments end at batch boundaries, so small segments need small batches.
    producer = new_producer(
        bootstrap, "lifecycle-test-producer", **{"linger.ms": 5, "batch.num.messages": 10}
    )
    for i in range(count):
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"k{i}".encode(),
                    value=bytes([i % 251]) * value_bytes,
                    partition=partition,
                    timestamp=timestamp_ms,
                )
                break
            except BufferError:
                producer.poll(0.05)
    assert producer.flush(30) == 0


def storage_for(info: StackInfo, endpoint_url: str | None = None) -> S3ChunkStorage:
    return S3ChunkStorage(
        S3Options(bucket=info.bucket, endpoint_url=endpoint_url or info.s3_endpoint_url, region="us-east-1")
    )


@dataclass
class PartitionView:
    part: PartitionRemoteState
    objects: set[str]
    history: list[RemoteLogSegmentMetadata]  # every accepted DELETE_SEGMENT_FINISHED of the partition

    @property
    def finished(self) -> list[RemoteLogSegmentMetadata]:
        return self.part.finished()

    @property
    def live(self) -> list[RemoteLogSegmentMetadata]:
        return [s for s in self.part.segments.values() if s.state is not SegmentState.DELETE_SEGMENT_FINISHED]

    @property
    def deleted(self) -> list[RemoteLogSegmentMetadata]:
        """Segments whose deletion finished (their keys are tombstoned: the topic's history tells)."""
        return sorted(self.history, key=lambda s: s.start_offset)

    @property
    def referenced(self) -> set[str]:
        """The live segments' objects, and the manifests of the finished ones."""
        objects = {k for s in self.live for k in (s.data_object_key, s.index_object_key)}
        return objects | {
            manifest_key(s.data_object_key)
            for s in self.live
            if s.state is SegmentState.COPY_SEGMENT_FINISHED
        }


def fold_with_history(
    bootstrap: str, meta: str
) -> tuple[RemoteLogState, dict[TopicPartition, list[RemoteLogSegmentMetadata]]]:
    """The metadata topic folded, and each partition's segments whose DELETE_SEGMENT_FINISHED was
    accepted (the fold forgets them at their tombstones, as compaction does)."""
    admin = new_admin(bootstrap, "lifecycle-tests")
    partitions = list(range(partition_counts(admin, [meta]).get(meta, 0)))
    state = RemoteLogState()
    deleted: dict[TopicPartition, list[RemoteLogSegmentMetadata]] = {}
    for msg in read_partitions(bootstrap, meta, partitions):
        accepted = state.apply_message(msg.offset, msg.key, msg.value) is None
        record = msg.record
        finished = (
            isinstance(record, RemoteLogSegmentMetadata)
            and record.state is SegmentState.DELETE_SEGMENT_FINISHED
        )
        if accepted and finished:
            assert isinstance(record, RemoteLogSegmentMetadata)
            deleted.setdefault(record.topic_partition, []).append(record)
    return state, deleted


def view(info: StackInfo, meta: str, tp: TopicPartition, prefix: str) -> PartitionView:
    state, history = fold_with_history(info.bootstrap_servers, meta)
    storage = storage_for(info)
    try:
        keys = ObjectKeyFactory(prefix)
        objects = {
            o.key
            for o in storage.list(keys.topic_listing_prefix(tp.topic))
            if keys.partition_of(tp.topic, o.key) == tp.partition
        }
    finally:
        storage.close()
    return PartitionView(state.partition(tp), objects, history.get(tp, []))


def wait_for(
    what: str, check: Callable[[], bool], timeout_s: float, proc: subprocess.Popen[bytes] | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the worker exited with code {proc.returncode} while waiting for {what}")
        if check():
            return
        time.sleep(0.5)
    raise TimeoutError(f"not reached within {timeout_s:.0f} s: {what}")


def run_cli(env: dict[str, str], *args: str) -> CliResult:
    """``processor ARGS`` in this process, with the environment ``env`` (tests/support/cli.py)."""
    return in_process(env, *args)
