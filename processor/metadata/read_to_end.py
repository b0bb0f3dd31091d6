"""Reading metadata partitions "to the end": the end is a snapshot, with one absolute deadline.

The end of each partition is its high watermark when reading starts. Once every partition's position
reached it, the high watermark is asked once more and reading continues to the newer value: some
brokers (Tansu under concurrent produce requests) report a high watermark that lags behind records
already acknowledged, and this second look covers them. Then reading stops, however much other
writers keep producing: records published after the snapshot belong to a later read. The deadline is
fixed when reading starts and is never pushed out by new batches.
"""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import TopicPartition as KafkaTP

from processor.errors import MetadataTopicError


class EndSnapshot:
    def __init__(self, consumer: Any, topic: str, partitions: list[int], timeout_s: float) -> None:
        self.consumer = consumer
        self.topic = topic
        self.timeout_s = timeout_s
        self.deadline = time.monotonic() + timeout_s
        self.partitions = sorted(partitions)
        marks = self._watermarks()
        self.starts = {p: lo for p, (lo, _hi) in marks.items()}
        self.ends = {p: hi for p, (_lo, hi) in marks.items()}
        self.requeried = False

    def _remaining(self) -> float:
        return max(0.5, self.deadline - time.monotonic())

    def _watermarks(self) -> dict[int, tuple[int, int]]:
        out: dict[int, tuple[int, int]] = {}
        for p in self.partitions:
            lo, hi = self.consumer.get_watermark_offsets(KafkaTP(self.topic, p), timeout=self._remaining())
            out[p] = (max(int(lo), 0), max(int(hi), 0))
        return out

    def reached(self, positions: dict[int, int]) -> bool:
        """True once ``positions`` (next offset to read, per partition) cover the snapshot, after the
        one re-query. Raises MetadataTopicError past the deadline."""
        behind = {p: end for p, end in self.ends.items() if max(positions.get(p, 0), self.starts[p]) < end}
        if behind:
            if time.monotonic() > self.deadline:
                raise MetadataTopicError(
                    f"reading {self.topic} did not reach its end within {self.timeout_s:.0f} s "
                    f"(ends {self.ends}, at {positions})"
                )
            return False
        if self.requeried:
            return True
        self.requeried = True
        for p, (_lo, hi) in self._watermarks().items():
            self.ends[p] = max(self.ends[p], hi)
        return self.reached(positions)
