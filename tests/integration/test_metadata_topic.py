"""The metadata topic: compacted, keyed per segment, and garbage on it never stops a resume."""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid

import pytest
from confluent_kafka.admin import ConfigResource, NewTopic  # type: ignore[attr-defined]

from processor.devstack.stack import StackInfo
from processor.errors import MetadataTopicError
from processor.kafka.admin import broker_count, topic_config
from processor.kafka.clients import new_admin, new_producer
from processor.kafka.partition import TopicPartition
from processor.lifecycle.deletion_topic import DeletionTopic
from processor.metadata.codec import metadata_partition_for
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata, SegmentState
from processor.metadata.topic_io import (
    DurableProducer,
    MetadataPublisher,
    ensure_metadata_topic,
    load_remote_state,
)
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


def set_on_topic(admin: object, topic: str) -> dict[str, str | None]:
    """The keys set on the topic itself: Apache Kafka describes every key, its defaults included."""
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=10)  # type: ignore[attr-defined]
    return {name: e.value for name, e in entries.items() if not e.is_default}


def create_topic(bootstrap: str, name: str, config: dict[str, str]) -> None:
    """A topic as an earlier version, or an operator by hand, may have left it."""
    admin = new_admin(bootstrap, "t")
    admin.create_topics([NewTopic(name, 2, 1, config=config)])[name].result(timeout=10)


@pytest.mark.parametrize("lag", [None, "1000"], ids=["lag-unset", "lag-one-second"])
def test_existing_compacted_topic_gets_its_compaction_lag_raised_to_a_day(
    local_stack: StackInfo, caplog: pytest.LogCaptureFixture, lag: str | None
) -> None:
    bootstrap = local_stack.bootstrap_servers
    topic = f"__meta_old_{uuid.uuid4().hex[:8]}"
    config = {"cleanup.policy": "compact", "segment.ms": "3600000"}
    if lag is not None:
        config["min.compaction.lag.ms"] = lag
    create_topic(bootstrap, topic, config)
    admin = new_admin(bootstrap, "t")
    assert set_on_topic(admin, topic).get("min.compaction.lag.ms") == lag

    with caplog.at_level(logging.WARNING, logger="processor.metadata.topic_io"):
        assert ensure_metadata_topic(bootstrap, topic, 3, 1) == 2  # the topic's own count
    after = topic_config(admin, topic)
    assert after["min.compaction.lag.ms"] == "86400000"
    # incremental: the other keys stay as they were
    assert after["cleanup.policy"] == "compact"
    assert after["segment.ms"] == "3600000"
    raised = [r.getMessage() for r in caplog.records if "raised min.compaction.lag.ms" in r.getMessage()]
    assert len(raised) == 1 and topic in raised[0] and "to 86400000" in raised[0]
    # unset: Tansu describes no value, Apache Kafka its default, 0
    assert f"from {lag}" in raised[0] if lag is not None else re.search(r"from (unset|0)\b", raised[0])

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="processor.metadata.topic_io"):
        assert ensure_metadata_topic(bootstrap, topic, 3, 1) == 2  # now nothing to raise
    assert not [r for r in caplog.records if "raised" in r.getMessage()]


def test_metadata_topic_created_here_needs_no_raise(
    local_stack: StackInfo, caplog: pytest.LogCaptureFixture
) -> None:
    topic = f"__meta_new_{uuid.uuid4().hex[:8]}"
    with caplog.at_level(logging.WARNING, logger="processor.metadata.topic_io"):
        assert ensure_metadata_topic(local_stack.bootstrap_servers, topic, 3, 1) == 3
    cfg = topic_config(new_admin(local_stack.bootstrap_servers, "t"), topic)
    assert cfg["cleanup.policy"] == "compact" and cfg["min.compaction.lag.ms"] == "86400000"
    assert not [r for r in caplog.records if "raised" in r.getMessage()]


@pytest.mark.parametrize("policy", ["delete", "compact,delete"])
def test_metadata_topic_that_is_not_compacted_is_refused_and_left_alone(
    local_stack: StackInfo, policy: str
) -> None:
    bootstrap = local_stack.bootstrap_servers
    topic = f"__meta_delete_{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, {"cleanup.policy": policy})
    with pytest.raises(MetadataTopicError, match=r"cleanup\.policy") as refused:
        ensure_metadata_topic(bootstrap, topic, 3, 1)
    assert f"cleanup.policy={policy}" in str(refused.value)
    assert "--add-config cleanup.policy=compact" in str(refused.value)
    cfg = set_on_topic(new_admin(bootstrap, "t"), topic)
    assert cfg["cleanup.policy"] == policy  # never altered by us
    assert "min.compaction.lag.ms" not in cfg  # nor anything else before refusing


def test_deletion_topic_that_is_not_compacted_is_refused(local_stack: StackInfo) -> None:
    bootstrap = local_stack.bootstrap_servers
    topic = f"__deletions_delete_{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic, {"cleanup.policy": "delete"})
    producer = DurableProducer(bootstrap, "t")
    try:
        with pytest.raises(MetadataTopicError, match=r"deletion topic .* cleanup\.policy=delete"):
            DeletionTopic.ensure(bootstrap, topic, 2, 1, producer)
        ok = f"__deletions_new_{uuid.uuid4().hex[:8]}"
        assert DeletionTopic.ensure(bootstrap, ok, 2, 1, producer).topic == ok
        assert topic_config(new_admin(bootstrap, "t"), ok)["cleanup.policy"] == "compact"
    finally:
        producer.close()


def test_a_deletion_topic_of_another_size_is_used_with_the_partitions_it_has(local_stack: StackInfo) -> None:
    """The deletion topic is shared by name: created by a deployment with a 1-partition metadata
    topic, it serves one with 4 (before, the second wrote to and read partitions it does not have:
    "Unknown partition")."""
    bootstrap = local_stack.bootstrap_servers
    topic = f"__deletions_sized_{uuid.uuid4().hex[:8]}"
    producer = DurableProducer(bootstrap, "t")
    try:
        assert DeletionTopic.ensure(bootstrap, topic, 1, 1, producer).num_partitions == 1
        deletions = DeletionTopic.ensure(bootstrap, topic, 4, 1, producer)
        assert deletions.num_partitions == 1
        failed = [
            meta(TopicPartition(f"t{i}", i), 0, 9, SegmentState.DELETE_SEGMENT_STARTED) for i in range(4)
        ]
        for segment in failed:
            deletions.record_failed(segment)
        deletions.resolve(failed[0])
        assert [s.segment_id for s in deletions.pending()] == [s.segment_id for s in failed[1:]]
    finally:
        producer.close()


def test_unset_replication_is_from_the_cluster_one_on_a_single_broker(local_stack: StackInfo) -> None:
    """No PROCESSOR_METADATA_REPLICATION_FACTOR: min(3, brokers), so 1 on the single-broker stack (and
    no min.insync.replicas of ours: that comes with a factor of 3)."""
    topic = f"__meta_replication_{uuid.uuid4().hex[:8]}"
    assert ensure_metadata_topic(local_stack.bootstrap_servers, topic, 2, None) == 2
    admin = new_admin(local_stack.bootstrap_servers, "t")
    assert broker_count(admin) == 1
    partitions = admin.list_topics(topic=topic, timeout=10).topics[topic].partitions
    assert {len(p.replicas) for p in partitions.values()} == {1}
