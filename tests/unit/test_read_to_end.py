"""EndSnapshot: a partition not known yet is asked again (bounded); other errors are raised at once."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from processor.metadata import read_to_end
from processor.metadata.read_to_end import EndSnapshot


class Consumer:
    def __init__(self, failures: list[int]) -> None:
        self.failures = failures
        self.calls = 0

    def get_watermark_offsets(self, tp: Any, timeout: float) -> tuple[int, int]:
        self.calls += 1
        if self.failures:
            raise KafkaException(KafkaError(self.failures.pop(0)))
        return 0, 7


def test_a_partition_not_known_yet_is_asked_again_until_it_is() -> None:
    consumer = Consumer([KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_PARTITION])
    snapshot = EndSnapshot(consumer, "t", [0], timeout_s=30)
    assert snapshot.ends == {0: 7} and consumer.calls == 3


def test_other_errors_are_raised_at_once_and_not_known_yet_only_for_a_while(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = Consumer([KafkaError._TRANSPORT])
    with pytest.raises(KafkaException):
        EndSnapshot(consumer, "t", [0], timeout_s=30)
    assert consumer.calls == 1
    monkeypatch.setattr(read_to_end, "UNKNOWN_PARTITION_WAIT_S", 0.3)
    never = Consumer([KafkaError._UNKNOWN_PARTITION] * 100)
    with pytest.raises(KafkaException):
        EndSnapshot(never, "t", [0], timeout_s=30)
    assert 1 < never.calls < 10
