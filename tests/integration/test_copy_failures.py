"""Failed copies are cleaned up and retried in order; a crashed writer's dangling copy is removed."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path

import pytest

from processor import metrics
from processor.config import load_settings
from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.errors import StorageError
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.leader.batch_source import BatchSource
from processor.leader.offload_engine import EngineOptions, OffloadEngine
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.remote_log_state import coverage_gaps_and_overlaps
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic, load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import Buffer, ChunkInfo
from processor.storage.filesystem import FilesystemChunkStorage
from processor.wiring.resume import remote_state_loader
from tests.integration.lifecycle_support import fold_with_history
from tests.integration.worker_process import wait_engine_offloaded
from tests.support.segment_v1_writer import SegmentBuilder

pytestmark = pytest.mark.integration

TOPIC = "copy-failures"
META = "__remote_log_metadata_failures"


class FlakyStorage(FilesystemChunkStorage):
    """Real filesystem storage whose first ``failures`` data-object writes for partition 1 fail."""

    def __init__(self, root: Path, failures: int) -> None:
        super().__init__(root)
        self.failures = failures
        self.created: list[str] = []
        self._lock = threading.Lock()

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        with self._lock:
            if f"/{TOPIC}/1/" in key and key.endswith(".log") and self.failures > 0:
                self.failures -= 1
                raise StorageError("injected outage")
            self.created.append(key)
        return super().create(key, parts)


def test_failed_copies_are_retried_in_order_and_dangling_copies_cleaned(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, 2, 1, {})
    produced = produce_samples(local_stack.bootstrap_servers, TOPIC, 6000, 2, big_every=0)
    parts = ensure_metadata_topic(local_stack.bootstrap_servers, META, 2, 1)
    publisher = MetadataPublisher(local_stack.bootstrap_servers, META, parts)
    storage = FlakyStorage(tmp_path / "s3", failures=3)
    keys = ObjectKeyFactory("f")
    copier = SegmentCopier(storage, publisher, keys, "w-test")

    # A writer that crashed mid-copy left a dangling COPY_SEGMENT_STARTED and its data object.
    crashed = SegmentBuilder(0, 0, 4096)
    crashed.append(0, 1, 1, None, b"x", None)
    dangling, _index = copier.build_metadata(TopicPartition(TOPIC, 0), crashed.seal(), writer_epoch=0)
    storage.create(dangling.data_object_key, [b"partial"])
    publisher.publish(dangling)

    settings = load_settings(
        {"PROCESSOR_BOOTSTRAP_SERVERS": local_stack.bootstrap_servers, "PROCESSOR_METADATA_TOPIC": META}
    )
    engine = OffloadEngine(
        EngineOptions(
            segment_bytes=256 * 1024,
            segment_ms=500,
            block_bytes=16 * 1024,
            buffer_bytes=8 * 1024 * 1024,
            copy_concurrency=4,
            retry_backoff_ms=50,
            retry_backoff_max_ms=200,
        ),
        lambda fetched, lost: BatchSource(local_stack.bootstrap_servers, "copy-failures", fetched, lost),
        copier,
        remote_state_loader(settings, parts),
    )
    failures_before = metrics.COPY_ERRORS.labels(TOPIC)._value.get()
    engine.start()
    try:
        engine.assign({TopicPartition(TOPIC, 0): 3, TopicPartition(TOPIC, 1): 3})
        ends = {p: sum(1 for r in produced if r.partition == p) - 1 for p in (0, 1)}
        wait_engine_offloaded(engine, {TopicPartition(TOPIC, p): e for p, e in ends.items()}, 120)
    finally:
        engine.stop()
        publisher.close()
    assert metrics.COPY_ERRORS.labels(TOPIC)._value.get() - failures_before == 3

    state, skipped = load_remote_state(local_stack.bootstrap_servers, META)
    assert skipped == 0
    for p, end in ends.items():
        part = state.partition(TopicPartition(TOPIC, p))
        finished = part.finished()
        assert coverage_gaps_and_overlaps(finished) == [] and finished[0].start_offset == 0
        assert finished[-1].end_offset == end
        assert part.dangling() == []
    # the crashed writer's segment was deleted, objects and all
    _state, history = fold_with_history(local_stack.bootstrap_servers, META)
    assert dangling.segment_id.id in {s.segment_id.id for s in history[TopicPartition(TOPIC, 0)]}
    assert not storage.exists(dangling.data_object_key)
    # each failed attempt of partition 1 is recorded as deleted, under its own segment id
    deleted = history[TopicPartition(TOPIC, 1)]
    assert len(deleted) == 3 and len({s.segment_id for s in deleted}) == 3
    # ... all for the first segment: nothing later was copied before it succeeded
    first = state.partition(TopicPartition(TOPIC, 1)).finished()[0]
    assert all(s.start_offset == first.start_offset for s in deleted)
    order = [k for k in storage.created if f"/{TOPIC}/1/" in k and k.endswith(".log")]
    assert order == sorted(order), "segments of a partition were copied out of offset order"
