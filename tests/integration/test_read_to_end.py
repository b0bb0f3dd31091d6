"""Reading the metadata topic "to the end" finishes while other writers keep producing to it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

import pytest

from processor.devstack.stack import StackInfo
from processor.follower.materializer import Materializer
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.clients import new_consumer
from processor.kafka.partition import TopicPartition
from processor.metadata.model import SegmentState
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic, load_remote_state
from tests.integration.test_metadata_topic import meta

pytestmark = pytest.mark.integration

META = "__remote_log_metadata_read_to_end"
PARTS = 2
T = TypeVar("T")


@pytest.fixture
def busy_topic(local_stack: StackInfo) -> Iterator[dict[TopicPartition, int]]:
    """The metadata topic with 20 finished segments for each of 4 partitions, then a writer that
    keeps publishing records of other partitions (another app sharing the topic) until the test ends."""
    ensure_metadata_topic(local_stack.bootstrap_servers, META, PARTS, 1)
    publisher = MetadataPublisher(local_stack.bootstrap_servers, META, PARTS)
    ends: dict[TopicPartition, int] = {}
    for p in range(4):
        tp = TopicPartition("steady", p)
        for i in range(20):
            publisher.publish(meta(tp, i * 10, i * 10 + 9, SegmentState.COPY_SEGMENT_FINISHED))
        ends[tp] = 199
    stop = threading.Event()

    def keep_writing() -> None:
        i = 0
        other = MetadataPublisher(local_stack.bootstrap_servers, META, PARTS, "other-app")
        while not stop.is_set():
            tp = TopicPartition("other-app-topic", i % 8)
            other.publish(meta(tp, i * 10, i * 10 + 9, SegmentState.COPY_SEGMENT_STARTED))
            i += 1
            stop.wait(0.02)
        other.close()

    writer = threading.Thread(target=keep_writing, daemon=True)
    writer.start()
    try:
        yield ends
    finally:
        stop.set()
        writer.join(30)
        publisher.close()


def within(timeout_s: float, call: Callable[[], T]) -> T:
    """Run ``call`` on a thread; fail (instead of hanging) if it has not returned in ``timeout_s``."""
    box: list[T] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            box.append(call())
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout_s)
    assert not t.is_alive(), f"did not return within {timeout_s} s under steady traffic"
    if errors:
        raise errors[0]
    return box[0]


def test_load_remote_state_returns_under_steady_traffic(
    local_stack: StackInfo, busy_topic: dict[TopicPartition, int]
) -> None:
    state, skipped = within(60, lambda: load_remote_state(local_stack.bootstrap_servers, META))
    assert skipped == 0
    for tp, end in busy_topic.items():
        assert state.partition(tp).highest_finished_offset() == end


def test_follower_catch_up_returns_under_steady_traffic(
    local_stack: StackInfo, busy_topic: dict[TopicPartition, int], tmp_path: Path
) -> None:
    cache = MetadataCache(tmp_path / "cache")
    try:
        materializer = Materializer(
            cache,
            lambda: new_consumer(local_stack.bootstrap_servers, "read-to-end-follower"),
            META,
            list(range(PARTS)),
        )
        within(60, materializer.catch_up)
        for tp, end in busy_topic.items():
            assert cache.offset_range(tp) == (0, end)
    finally:
        cache.close()
