"""A Kafka topic partition as the processor names it everywhere: pure (no client library).

Kafka clients have partition types of their own (confluent-kafka's ``TopicPartition`` carries an
offset and an error too); this one is the immutable value the metadata, the follower's cache, the
roles and the commands key partitions by. The client modules translate at their edge.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int
    # The hash, computed once: partitions key most of the follower's per-record dict lookups (about
    # nine a record), and the generated dataclass hash re-hashes a tuple in Python each time.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash((self.topic, self.partition)))

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[TopicPartition], tuple[str, int]]:
        # never ship the hash: string hashes differ between processes (PYTHONHASHSEED)
        return (TopicPartition, (self.topic, self.partition))

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"
