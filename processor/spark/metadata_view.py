"""The metadata topic materialized for Spark planning and the audit.

``MaterializedMetadata`` keeps the metadata topic materialized in the follower's cache format
(``processor.follower.metadata_cache``, RocksDB) in a local directory, so planning applies only the
metadata records that arrived since the last query instead of re-reading the whole topic. Planners
of concurrent queries take turns on it (a file lock held for the refresh and the read); a cache
built from another incarnation of the metadata topic (another topic id, or stored offsets beyond
the topic's end) or an unreadable one is rebuilt. What each partition's archive serves is read
from it through ``processor.spark.fold_adapter`` (the one place that knows the fold).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from processor.errors import MetadataTopicError, ProcessorError, ServiceUnavailableError
from processor.follower.materializer import Materializer
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshots import SnapshotStore, load_snapshots
from processor.kafka.partition import TopicPartition
from processor.metadata.topic_io import MIN_COMPACTION_LAG_MS
from processor.spark.connection import Connection
from processor.spark.fold_adapter import PartitionArchive, partition_archive

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 120.0
CATCH_UP_TIMEOUT_S = 60.0
METADATA_TOPIC_NEEDS = (
    "reading the archive needs Read and Describe on the metadata topic (option metadata.topic)"
)


def default_cache_dir(conn: Connection) -> Path:
    """``$PROCESSOR_DATA_DIR/spark-metadata/<key>`` (the connection's ``data_dir``; or under the temp
    dir), one per cluster and metadata topic."""
    base = (
        Path(conn.data_dir) / "spark-metadata"
        if conn.data_dir
        else Path(tempfile.gettempdir()) / f"kafka-tiered-processor-{os.getuid()}" / "spark-metadata"
    )
    key = hashlib.sha256(f"{conn.bootstrap_servers}\0{conn.metadata_topic}".encode()).hexdigest()[:16]
    return base / f"{conn.metadata_topic}-{key}"


@contextlib.contextmanager
def _locked(path: Path, timeout_s: float = LOCK_TIMEOUT_S) -> Iterator[None]:
    """An exclusive lock on ``path`` (a file beside the cache), waited for with a deadline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ServiceUnavailableError(
                        f"the Spark metadata cache lock {path} was held for over {timeout_s:.0f} s "
                        "by another process"
                    ) from None
                time.sleep(0.02)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


class MaterializedMetadata:
    """The metadata topic materialized in a local directory (the follower cache format)."""

    def __init__(self, conn: Connection, cache_dir: str | Path | None = None) -> None:
        self.conn = conn
        self.path = Path(cache_dir) if cache_dir is not None else default_cache_dir(conn)

    def read(self, wanted: Callable[[TopicPartition], bool]) -> dict[TopicPartition, PartitionArchive]:
        """Apply the metadata records that arrived since the last call (by any process), then return
        the archive of every partition ``wanted`` accepts."""
        with _locked(self.path.with_name(self.path.name + ".lock")):
            partitions = self._metadata_partitions()
            incarnation = self._incarnation()
            marker = self.path.with_name(self.path.name + ".topic-id")
            if marker.exists() and marker.read_text() != incarnation:
                log.warning(
                    "the metadata topic %s was re-created: rebuilding %s", self.conn.metadata_topic, self.path
                )
                shutil.rmtree(self.path, ignore_errors=True)
            try:
                cache = MetadataCache(self.path)
            except ProcessorError as exc:
                log.warning("rebuilding the Spark metadata cache %s: %s", self.path, exc)
                shutil.rmtree(self.path, ignore_errors=True)
                cache = MetadataCache(self.path)
            marker.write_text(incarnation)
            try:
                if self._stale(cache, partitions):
                    cache.close()
                    log.warning(
                        "the metadata topic %s was re-created: rebuilding %s",
                        self.conn.metadata_topic,
                        self.path,
                    )
                    shutil.rmtree(self.path, ignore_errors=True)
                    cache = MetadataCache(self.path)
                if partitions:
                    materializer = Materializer(
                        cache,
                        lambda: self.conn.consumer("processor-spark-metadata"),
                        self.conn.metadata_topic,
                        partitions,
                    )
                    # a partition this cache never read starts from its newest valid snapshot
                    store = SnapshotStore(
                        self.conn.shared_storage(),
                        self.conn.s3_prefix,
                        f"{self.conn.metadata_topic}/{incarnation}",
                    )
                    materializer.bootstrap = lambda peek, never: load_snapshots(
                        cache, store, peek, never, len(partitions), None, MIN_COMPACTION_LAG_MS
                    )
                    materializer.catch_up(CATCH_UP_TIMEOUT_S)
                return {
                    tp: partition_archive(tp, cache.remote_state(tp))
                    for tp in cache.topic_partitions()
                    if wanted(tp)
                }
            finally:
                cache.close()

    def _metadata_partitions(self) -> list[int]:
        from processor.spark.live_tail import broker_partitions
        from processor.spark.options import Subscription

        found = broker_partitions(
            self.conn, Subscription(topics=(self.conn.metadata_topic,)), needs=METADATA_TOPIC_NEEDS
        )
        if not found:
            raise MetadataTopicError(
                f"metadata topic {self.conn.metadata_topic} does not exist on "
                f"{self.conn.bootstrap_servers} (option metadata.topic)"
            )
        return [tp.partition for tp in found]

    def _incarnation(self) -> str:
        """The metadata topic's topic id ("" where the broker reports none)."""
        from processor.spark.live_tail import broker_topic_ids

        return broker_topic_ids(self.conn, [self.conn.metadata_topic]).get(self.conn.metadata_topic, "")

    def _stale(self, cache: MetadataCache, partitions: list[int]) -> bool:
        """True when the cache consumed past a partition's end: it was built from another
        incarnation of the metadata topic."""
        from processor.spark.live_tail import watermarks

        stored = cache.consumed_offsets()
        if not stored:
            return False
        if any(p not in partitions for p in stored):
            return True
        marks = watermarks(self.conn, [TopicPartition(self.conn.metadata_topic, p) for p in stored])
        return any(stored[tp.partition] > high for tp, (_low, high) in marks.items())
