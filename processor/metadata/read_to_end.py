"""Reading metadata partitions "to the end": the end is a snapshot, with one absolute deadline.

The end of each partition is its high watermark when reading starts. Once every partition's position
reached it, the high watermark is asked once more and reading continues to the newer value: some
brokers (Tansu under concurrent produce requests) report a high watermark that lags behind records
already acknowledged, and this second look covers them. Then reading stops, however much other
writers keep producing: records published after the snapshot belong to a later read. The deadline is
fixed when reading starts and is never pushed out by new batches.

A partition the client does not know yet (a topic created a moment ago, its metadata not yet at this
client: Tansu answers "unknown partition" for a while) is asked again, with a jittered backoff, for
at most ``UNKNOWN_PARTITION_WAIT_S`` within the deadline; then the error stands.
"""

from __future__ import annotations

import random
import time
from typing import Any

from processor.errors import MetadataTopicError
from processor.kafka.client_types import KafkaError, KafkaException, KafkaTP

UNKNOWN_PARTITION_WAIT_S = 10.0
_NOT_KNOWN_YET = {KafkaError._UNKNOWN_PARTITION, KafkaError._UNKNOWN_TOPIC, KafkaError.UNKNOWN_TOPIC_OR_PART}


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
            lo, hi = self._watermark(p)
            out[p] = (max(int(lo), 0), max(int(hi), 0))
        return out

    def _watermark(self, partition: int) -> tuple[int, int]:
        # Hand-written (a retry library's loop adds nothing to four lines): bounded, jittered, and
        # only for "not known yet"; every other error is raised at once.
        give_up = min(self.deadline, time.monotonic() + UNKNOWN_PARTITION_WAIT_S)
        delay = 0.1
        while True:
            try:
                lo, hi = self.consumer.get_watermark_offsets(
                    KafkaTP(self.topic, partition), timeout=self._remaining()
                )
                return int(lo), int(hi)
            except KafkaException as exc:
                if exc.args[0].code() not in _NOT_KNOWN_YET or time.monotonic() + delay > give_up:
                    raise
            time.sleep(delay * random.uniform(0.8, 1.2))
            delay = min(delay * 2, 1.0)

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
