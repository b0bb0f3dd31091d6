"""The worker's lifecycle tasks as plain blocking calls, built in processor/wiring/lifecycle.py and run
on the worker's timers: the retention pass over the partitions it leads, the sweep of abandoned
multipart uploads, then its merges of small segments."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from processor.errors import ProcessorError
from processor.kafka.partition import TopicPartition
from processor.lifecycle.multipart_sweep import SWEEP_INTERVAL_S, sweep_multipart_uploads
from processor.lifecycle.retention_service import RetentionService
from processor.lifecycle.segment_deleter import SegmentDeleter
from processor.metadata.topic_io import DurableProducer, MetadataPublisher
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)

# Called with the partitions a pass found held by another claim: the worker stops writing them.
OnFenced = Callable[[list[TopicPartition]], None]


class Merges(Protocol):
    """The worker's merges of small segments (processor/rewrite/merge_passes.py: WorkerMerges)."""

    def due(self) -> bool: ...

    def run_once(self, led: Mapping[TopicPartition, int]) -> object: ...


@dataclass
class Lifecycle:
    service: RetentionService
    producer: DurableProducer
    publisher: MetadataPublisher

    def close(self) -> None:
        self.producer.close()
        self.publisher.close()


class LifecycleTasks:
    """The retention pass (``run_once``, every PROCESSOR_RETENTION_CHECK_MS) and the multipart sweep
    (``sweep``: at start, then every SWEEP_INTERVAL_S from within ``run_once``). Blocking calls: the
    caller runs them off its event loop. ``cache`` is the worker's follower cache (it follows every
    led partition); partitions a pass finds held by another claim go to ``on_fenced``."""

    def __init__(
        self,
        retention: Lifecycle,
        storage: ChunkStorage,
        keys: ObjectKeyFactory,
        bucket_prefix: str,
        multipart_abort_after_ms: int,
        led_partitions: Callable[[], dict[TopicPartition, int]],
        on_fenced: OnFenced,
    ) -> None:
        self.lifecycle = retention
        self.storage, self.keys, self.bucket_prefix = storage, keys, bucket_prefix
        self.multipart_abort_after_ms = multipart_abort_after_ms
        self.led_partitions = led_partitions
        self.on_fenced = on_fenced
        self._last_sweep = -SWEEP_INTERVAL_S
        # the worker's merges of small segments (processor/rewrite/merge_passes.py), after the pass
        self.merges: Merges | None = None

    def sweep(self) -> None:
        self._last_sweep = time.monotonic()
        try:
            aborted = sweep_multipart_uploads(
                self.storage, self.keys, self.bucket_prefix, self.multipart_abort_after_ms
            )
            if aborted:
                log.info("aborted %d abandoned multipart uploads", aborted)
        except ProcessorError as exc:
            log.warning("multipart upload sweep failed: %s", exc)

    def run_once(self) -> None:
        if time.monotonic() - self._last_sweep >= SWEEP_INTERVAL_S:
            self.sweep()
        led = self.led_partitions()
        try:
            result = self.lifecycle.service.run_pass(led)
        except ProcessorError as exc:
            log.warning("retention pass failed: %s", exc)
            return
        if result.fenced:
            self.on_fenced(result.fenced)
        if result.outcome.deleted or result.outcome.failed:
            log.info(
                "retention pass: %d segments deleted, %d deletions failed",
                len(result.outcome.deleted),
                len(result.outcome.failed),
            )
        if self.merges is not None and self.merges.due():
            self.merges.run_once({tp: e for tp, e in led.items() if tp not in result.fenced})

    @property
    def deleter(self) -> SegmentDeleter:
        """The retention pass's deleter (the worker's merges delete what they supersede with it)."""
        return self.lifecycle.service.deleter

    def close(self) -> None:
        self.lifecycle.close()
