"""The metadata topic: compacted, keyed per segment, and garbage on it never stops a resume."""

from __future__ import annotations

import dataclasses
import uuid

import pytest
from confluent_kafka.admin import ConfigResource  # type: ignore[attr-defined]

from processor.devstack.stack import StackInfo
from processor.kafka_clients import new_admin, new_producer
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import (
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    SegmentState,
    TopicPartition,
)
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic, load_remote_state
from processor.segment.object_keys import ObjectKeyFactory

pytestmark = pytest.mark.integration


def meta(tp: TopicPartition, start: int, end: int, state: SegmentState) -> RemoteLogSegmentMetadata:
    sid = RemoteLogSegmentId(tp.topic, tp.partition, uuid.uuid4())
    keys = ObjectKeyFactory("p").segment(tp.topic, tp.partition, start, sid.id, 0)
    return RemoteLogSegmentMetadata(
        sid,
        start,
        end,
        1,
        1,
        "w",
        0,
        ((0, start),),
        10,
        state,
        keys.data,
        keys.index,
        1,
        end - start + 1,
        0,
        10,
    )


def test_topic_is_compacted_and_garbage_is_skipped_and_counted(local_stack: StackInfo) -> None:
    topic = "__meta_garbage_test"
    parts = ensure_metadata_topic(local_stack.bootstrap_servers, topic, 3, 1)
    assert parts == 3
    admin = new_admin(local_stack.bootstrap_servers, "t")
    cfg = next(iter(admin.describe_configs([ConfigResource("topic", topic)]).values())).result(timeout=10)
    assert cfg["cleanup.policy"].value == "compact"
    assert ensure_metadata_topic(local_stack.bootstrap_servers, topic, 3, 1) == 3  # idempotent

    tp = TopicPartition("orders", 4)
    pub = MetadataPublisher(local_stack.bootstrap_servers, topic, parts)
    first = meta(tp, 0, 99, SegmentState.COPY_SEGMENT_STARTED)
    pub.publish(first)
    raw = new_producer(local_stack.bootstrap_servers, "garbage")
    where = metadata_partition_for(tp, parts)
    raw.produce(topic, value=b"\x00\xffnot avro at all", key=b"junk", partition=where)
    raw.produce(topic, value=b"", key=b"empty", partition=where)
    raw.flush(10)
    pub.publish(dataclasses.replace(first, state=SegmentState.COPY_SEGMENT_FINISHED, event_timestamp_ms=2))
    # illegal: a finished segment cannot go back to started
    pub.publish(dataclasses.replace(first, state=SegmentState.COPY_SEGMENT_STARTED, event_timestamp_ms=3))
    second = meta(tp, 100, 149, SegmentState.COPY_SEGMENT_STARTED)
    pub.publish(second)
    pub.close()

    state, skipped = load_remote_state(local_stack.bootstrap_servers, topic)
    assert skipped == 3
    part = state.partition(tp)
    assert part.highest_finished_offset() == 99
    assert [s.segment_id for s in part.dangling()] == [second.segment_id]
