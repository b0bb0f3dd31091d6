"""Waiting for metadata through one long-lived follower per metadata topic.

The tests used to poll ``load_remote_state`` every second: a new consumer that re-read the whole
metadata topic each time. A :class:`MetadataWatch` is the product's own follower (a
:class:`~processor.follower.metadata_cache.MetadataCache` fed by a running
:class:`~processor.follower.materializer.Materializer`): it connects once, applies each record once,
and answers from its cache, so a wait ends within a poll (0.1 s) of the record arriving. What is
served is decided by the follower's fold, the same one every reader uses.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from processor.follower.materializer import Materializer
from processor.follower.metadata_cache import MetadataCache
from processor.kafka.admin import partition_counts
from processor.kafka.clients import KafkaTarget, new_admin, new_consumer
from processor.kafka.partition import TopicPartition
from processor.metadata.remote_log_state import PartitionRemoteState

POLL_S = 0.1


class MetadataWatch:
    """Follows one metadata topic from its beginning until closed. The topic may not exist yet (the
    worker creates it when it starts): the follower starts at the first wait that finds it."""

    def __init__(
        self, bootstrap_servers: KafkaTarget, metadata_topic: str, cache_dir: Path | None = None
    ) -> None:
        self.bootstrap_servers = bootstrap_servers
        self.topic = metadata_topic
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        if cache_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="metadata-watch-")
            cache_dir = Path(self._tmp.name)
        self.cache_dir = cache_dir
        self._cache: MetadataCache | None = None
        self._materializer: Materializer | None = None

    def _started(self) -> Materializer | None:
        if self._materializer is None:
            admin = new_admin(self.bootstrap_servers, "tests-metadata-watch")
            count = partition_counts(admin, [self.topic]).get(self.topic, 0)
            if count == 0:
                return None
            self._cache = MetadataCache(self.cache_dir)
            self._materializer = Materializer(
                self._cache,
                lambda: new_consumer(self.bootstrap_servers, "tests-metadata-watch"),
                self.topic,
                list(range(count)),
            )
            self._materializer.start()
        if self._materializer.failure is not None:
            raise RuntimeError(f"the watch of {self.topic} failed: {self._materializer.failure}")
        return self._materializer

    def remote_state(self, tp: TopicPartition) -> PartitionRemoteState:
        """``tp``'s remote state as the follower holds it now (empty before the topic exists)."""
        materializer = self._started()
        return materializer.remote_state(tp) if materializer is not None else PartitionRemoteState()

    def highest_finished(self, tp: TopicPartition) -> int:
        found = self.remote_state(tp).highest_finished_offset()
        return -1 if found is None else found

    def wait_until(
        self,
        what: str,
        check: Callable[[], bool],
        timeout_s: float,
        proc: subprocess.Popen[bytes] | None = None,
    ) -> None:
        """Poll ``check`` (which reads this watch) until true; fail if ``proc`` exits meanwhile."""
        deadline = time.monotonic() + timeout_s
        while True:
            if check():
                return
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"the worker exited with code {proc.returncode} while waiting for {what}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"not reached within {timeout_s:.0f} s: {what}")
            time.sleep(POLL_S)

    def wait_offloaded(
        self,
        expected_end: dict[TopicPartition, int],
        timeout_s: float,
        proc: subprocess.Popen[bytes] | None = None,
    ) -> dict[TopicPartition, int]:
        """Wait until every partition's finished coverage reaches its expected end offset."""
        reached: dict[TopicPartition, int] = {}

        def done() -> bool:
            reached.update({tp: self.highest_finished(tp) for tp in expected_end})
            return all(reached[tp] >= end for tp, end in expected_end.items())

        try:
            self.wait_until(f"offloaded to {expected_end}", done, timeout_s, proc)
        except TimeoutError:
            raise TimeoutError(
                f"records not offloaded within {timeout_s:.0f} s: reached {reached}, expected {expected_end}"
            ) from None
        return reached

    def close(self) -> None:
        if self._materializer is not None:
            self._materializer.stop()
        if self._cache is not None:
            self._cache.close()
        if self._tmp is not None:
            self._tmp.cleanup()


@contextmanager
def metadata_watch(bootstrap_servers: KafkaTarget, metadata_topic: str) -> Iterator[MetadataWatch]:
    watch = MetadataWatch(bootstrap_servers, metadata_topic)
    try:
        yield watch
    finally:
        watch.close()


def wait_offloaded(
    bootstrap_servers: KafkaTarget,
    metadata_topic: str,
    expected_end: dict[TopicPartition, int],
    timeout_s: float,
    proc: subprocess.Popen[bytes] | None = None,
) -> dict[TopicPartition, int]:
    """One wait through a watch of its own (for a test that waits once)."""
    with metadata_watch(bootstrap_servers, metadata_topic) as watch:
        return watch.wait_offloaded(expected_end, timeout_s, proc)
