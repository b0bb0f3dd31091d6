"""The follower's consumer: metadata topic -> MetadataCache, resuming from offsets kept in the cache.

Why not a Faust agent or a Faust global table: every follower needs *all* the metadata partitions it
follows (not a group share of them), in its own key layout, at tens of thousands of records a second.
Faust's per-event path (~100 us) would cap that near 10 k/s, and a global table fixes the layout. So
Faust runs this as a service of the worker (lifecycle, health), and records move in batches: an
assign-only consumer starts at the offsets stored in the cache, and each consumed batch is applied
in one atomic RocksDB write together with the new offsets.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException
from confluent_kafka import TopicPartition as KafkaTP

from processor.errors import MetadataTopicError
from processor.follower.metadata_cache import MetadataCache, RawMessage
from processor.metadata.read_to_end import EndSnapshot

log = logging.getLogger(__name__)


@dataclass
class MaterializerStats:
    consumed: int = 0  # messages read from the topic by this process
    applied: int = 0
    skipped: int = 0


class Materializer:
    def __init__(
        self,
        cache: MetadataCache,
        consumer_factory: Callable[[], Consumer],
        topic: str,
        partitions: list[int],
        source_topics: frozenset[str] | None = None,
        batch_size: int = 10_000,
    ) -> None:
        self.cache = cache
        self.topic = topic
        self.partitions = sorted(partitions)
        self.source_topics = source_topics
        self.batch_size = batch_size
        self.stats = MaterializerStats()
        self._consumer_factory = consumer_factory
        self._consumer: Consumer | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failure: BaseException | None = None

    def _open(self) -> Consumer:
        consumer = self._consumer_factory()
        stored = self.cache.consumed_offsets()
        consumer.assign([KafkaTP(self.topic, p, stored.get(p, OFFSET_BEGINNING)) for p in self.partitions])
        return consumer

    def poll_once(self, consumer: Consumer, timeout_s: float = 0.1) -> int:
        batch = consumer.consume(self.batch_size, timeout_s)
        if not batch:
            return 0
        messages: list[RawMessage] = []
        for msg in batch:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if err.fatal():
                    raise MetadataTopicError(f"metadata consumer: {err}")
                log.warning("metadata consumer: %s", err)
                continue
            messages.append(
                RawMessage(int(msg.partition() or 0), int(msg.offset() or 0), msg.key(), msg.value())
            )
        result = self.cache.apply_batch(messages, self.source_topics)
        self.stats.consumed += len(messages)
        self.stats.applied += result.applied
        self.stats.skipped += result.skipped
        return len(messages)

    def catch_up(self, timeout_s: float = 60.0, quiet_s: float = 0.0) -> MaterializerStats:
        """Consume until every followed partition reaches the end it had when this was called (the
        high watermark, re-queried once: see :mod:`processor.metadata.read_to_end`), within one
        absolute deadline. Records others publish meanwhile do not keep it reading. ``quiet_s`` is
        accepted for old callers and ignored: there is no quiet period to wait for any more."""
        consumer = self._open()
        try:
            snapshot = EndSnapshot(consumer, self.topic, self.partitions, timeout_s)
            while not snapshot.reached(self.cache.consumed_offsets()):
                self.poll_once(consumer, 0.1)
            return self.stats
        except KafkaException as exc:
            raise MetadataTopicError(f"reading {self.topic}: {exc.args[0]}") from None
        finally:
            consumer.close()

    # -- as a background service of the worker ----------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="metadata-follower", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        consumer = self._open()
        try:
            while not self._stop.is_set():
                self.poll_once(consumer, 0.1)
        except BaseException as exc:
            log.exception("metadata follower crashed")
            self.failure = exc
        finally:
            consumer.close()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
