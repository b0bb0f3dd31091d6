"""The names of the Kafka client library (confluent-kafka) that code outside the Kafka edge works
with: its error and exception types, the partition-with-offset it passes around, the special
offsets, and the client classes for type hints. Named here once so that the library is imported only
in processor/kafka/ (a contract in pyproject.toml checks it): code elsewhere keeps to these names,
and a change of client library is a change of this package.

The clients themselves are built in :mod:`processor.kafka.clients`.
"""

from __future__ import annotations

from confluent_kafka import (
    OFFSET_BEGINNING,
    OFFSET_END,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Message,
    Producer,
)
from confluent_kafka import TopicPartition as KafkaTP
from confluent_kafka.admin import AdminClient

__all__ = [
    "OFFSET_BEGINNING",
    "OFFSET_END",
    "AdminClient",
    "Consumer",
    "ConsumerGroupTopicPartitions",
    "KafkaError",
    "KafkaException",
    "KafkaTP",
    "Message",
    "Producer",
]
