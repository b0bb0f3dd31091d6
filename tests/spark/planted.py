"""Archives made to order for the Spark tests: records produced to a real topic, read back, and the
chosen offset ranges copied as segments by the real copier (so an archive can have holes, start
above 0, lose objects, or belong to an older incarnation of its topic)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import TopicPartition as KafkaTP

from processor.config import load_settings
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic, topic_ids
from processor.kafka.clients import new_admin, new_consumer, new_producer
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.storage import build_storage
from tests.support.segment_v1_writer import SegmentBuilder

BASE_TS = 1_700_000_000_000


@dataclass
class PlantedArchive:
    stack: StackInfo
    topic: str
    meta: str
    prefix: str
    storage: ChunkStorage
    publisher: MetadataPublisher
    copied: list[RemoteLogSegmentMetadata] = field(default_factory=list)

    @property
    def options(self) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.stack.bootstrap_servers,
            "metadata.topic": self.meta,
            "s3.endpoint": self.stack.s3_endpoint_url,
            "s3.bucket": self.stack.bucket,
            "s3.prefix": self.prefix,
            "s3.region": "us-east-1",
            "subscribe": self.topic,
        }

    def produce(self, partition: int, count: int, start_ts: int = BASE_TS) -> None:
        producer = new_producer(self.stack.bootstrap_servers, "planted")
        before = self.high(partition)
        for i in range(count):
            headers: list[tuple[str, str | bytes | None]] | None = (
                [("n", str(i).encode())] if i % 3 == 0 else None
            )
            if i == count - 1:
                # Tansu reports a wrong high watermark after a multi-record batch until the next
                # produce request: the last record goes in a request of its own.
                assert producer.flush(30) == 0
            producer.produce(
                self.topic,
                key=b"k%d" % i,
                value=b"v" * (50 + i % 40),
                partition=partition,
                headers=headers,
                timestamp=start_ts + i,
            )
            if i == count - 1:
                assert producer.flush(30) == 0
        assert producer.flush(30) == 0
        deadline = time.monotonic() + 10  # Tansu's high watermark can lag a moment behind a flush
        while self.high(partition) < before + count:
            assert time.monotonic() < deadline, "the high watermark did not reach the records produced"
            time.sleep(0.05)

    def high(self, partition: int) -> int:
        consumer = new_consumer(self.stack.bootstrap_servers, "planted")
        try:
            return int(consumer.get_watermark_offsets(KafkaTP(self.topic, partition), timeout=10)[1])
        finally:
            consumer.close()

    def messages(self, partition: int, lo: int, hi: int) -> list[Any]:
        consumer = new_consumer(self.stack.bootstrap_servers, "planted")
        consumer.assign([KafkaTP(self.topic, partition, lo)])
        out: list[Any] = []
        deadline = time.monotonic() + 30
        while (not out or int(out[-1].offset()) < hi - 1) and time.monotonic() < deadline:
            out.extend(
                m for m in consumer.consume(500, 0.2) if m.error() is None and int(m.offset() or 0) < hi
            )
        consumer.close()
        assert out and out[-1].offset() == hi - 1, (partition, lo, hi, len(out))
        return out

    def copy(self, partition: int, lo: int, hi: int, epoch: int = 0) -> RemoteLogSegmentMetadata:
        """Archive offsets ``[lo, hi)`` of a partition as one segment (records as the topic has them)."""
        builder = SegmentBuilder(partition, lo, 2048)
        for m in self.messages(partition, lo, hi):
            ts_type, ts = m.timestamp()
            builder.append(m.offset(), ts_type, ts, m.key(), m.value(), list(m.headers() or []))
        ids = topic_ids(new_admin(self.stack.bootstrap_servers, "planted"), [self.topic])
        copier = SegmentCopier(
            self.storage, self.publisher, ObjectKeyFactory(self.prefix), "planted", topic_ids=ids
        )
        done = copier.copy(TopicPartition(self.topic, partition), builder.seal(), epoch)
        self.copied.append(done)
        return done

    def recreate_topic(self, partitions: int) -> None:
        admin = new_admin(self.stack.bootstrap_servers, "planted")
        admin.delete_topics([self.topic])[self.topic].result(30)
        deadline = time.monotonic() + 30
        while True:
            try:
                ensure_topic(admin, self.topic, partitions, 1, {})
                break
            except Exception:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        # Apache Kafka creates a topic's partitions a moment after it answers: wait for their leaders
        while True:
            described = admin.list_topics(self.topic, timeout=10).topics.get(self.topic)
            parts = described.partitions if described is not None and described.error is None else {}
            if len(parts) == partitions and all(p.leader >= 0 and p.error is None for p in parts.values()):
                break
            assert time.monotonic() < deadline, f"{self.topic} has no leaders after its re-creation"
            time.sleep(0.1)

    def close(self) -> None:
        self.publisher.close()
        self.storage.close()


def plant(stack: StackInfo, name: str, partitions: int = 1) -> PlantedArchive:
    meta, prefix = f"__meta_{name}", f"planted-{name}"
    env = {
        **{k: v for k, v in stack.env().items() if k.startswith("PROCESSOR_")},
        "PROCESSOR_METADATA_TOPIC": meta,
        "PROCESSOR_S3_PREFIX": prefix,
        "PROCESSOR_S3_REGION": "us-east-1",
    }
    settings = load_settings(env)
    parts = ensure_metadata_topic(stack.bootstrap_servers, meta, 1, 1)
    ensure_topic(new_admin(stack.bootstrap_servers, "planted"), name, partitions, 1, {})
    return PlantedArchive(
        stack,
        name,
        meta,
        prefix,
        build_storage(settings),
        MetadataPublisher(stack.bootstrap_servers, meta, parts),
    )
