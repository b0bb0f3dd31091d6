"""``processor follower --from-bucket``: a read replica that needs the bucket and nothing else.

Instead of consuming the metadata topic, it looks at the bucket every ``refresh_s``: lists the
prefix, reads the manifests it has not read yet (in parallel), decides what is served the way a
rebuild does (processor/rebuild/resolve.py) and applies the difference to its cache as metadata
records (processor/rebuild/mirror.py), through the same fold every follower uses. It serves
``/fetch`` and ``/segments`` like any follower, in another region or after the source cluster is
gone. Ready once the first look at the bucket succeeded; a look that fails is reported by
``/readyz`` until one succeeds again (what was served stays served meanwhile).
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from dataclasses import dataclass

from aiohttp import web

from processor.config import Settings
from processor.errors import ProcessorError
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.follower.remote_log_metadata_manager import RemoteLogMetadataManager
from processor.metadata.manifest import SegmentManifest, manifest_key
from processor.probes import ReadinessWatch, storage_probe
from processor.rebuild.inventory import take_inventory
from processor.rebuild.manifests import READ_THREADS, read_manifests
from processor.rebuild.mirror import MirrorState, mirror_messages
from processor.rebuild.resolve import plan_rebuild
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage
from processor.web.servers import follower_web_app
from processor.wiring.follower import build_reader
from processor.wiring.follower_server import serve
from processor.wiring.storage import build_storage

log = logging.getLogger("processor.follower")

DEFAULT_REFRESH_S = 30.0


class BucketMirror:
    """Keeps a follower cache in step with the bucket's manifests."""

    def __init__(
        self,
        storage: ChunkStorage,
        keys: ObjectKeyFactory,
        cache: MetadataCache,
        topics: frozenset[str] | None,
    ) -> None:
        self.storage, self.keys, self.cache, self.topics = storage, keys, cache, topics
        self.state = MirrorState()
        self._manifests: dict[str, SegmentManifest] = {}  # by manifest key, read once
        self.failure: str | None = None
        self.refreshed = threading.Event()  # the first look at the bucket succeeded

    def refresh(self) -> int:
        """One look at the bucket; returns the number of metadata records applied."""
        root = f"{self.keys.prefix}/" if self.keys.prefix else ""
        inventory = take_inventory((info.key, info.size) for info in self.storage.list(root))
        complete = {o.manifest_key: o for o in inventory.complete}
        for key in [k for k in self._manifests if k not in complete]:
            del self._manifests[key]  # deleted in the bucket
        new = [o for key, o in complete.items() if key not in self._manifests]
        manifests, problems = read_manifests(self.storage, self.keys, new)
        for problem in problems:
            log.warning("manifest %s not used: %s", problem.key, problem.what)
        self._manifests.update((manifest_key(m.segment.data_object_key), m) for m in manifests)
        kept = [
            m
            for m in self._manifests.values()
            if self.topics is None or m.segment.segment_id.topic in self.topics
        ]
        plan = plan_rebuild(kept, {}, int(time.time() * 1000))
        messages = mirror_messages(self.state, plan, int(time.time() * 1000))
        if messages:
            self.cache.apply_batch([RawMessage(0, offset, key, value) for offset, key, value in messages])
        return len(messages)

    def run(self, refresh_s: float, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                applied = self.refresh()
                if self.failure is not None:
                    log.info("the bucket answers again")
                self.failure = None
                self.refreshed.set()
                if applied:
                    log.info("applied %d metadata records from the bucket", applied)
            except ProcessorError as exc:
                self.failure = f"looking at the bucket failed: {exc}"
                log.warning("%s; trying again in %.0f s", self.failure, refresh_s)
            stop.wait(refresh_s)


@dataclass
class BucketFollowerServer:
    settings: Settings
    storage: ChunkStorage
    cache: MetadataCache
    mirror: BucketMirror
    web_app: web.Application
    probe_storage: ChunkStorage
    watch: ReadinessWatch
    refresh_s: float

    @classmethod
    def build(cls, settings: Settings, refresh_s: float = DEFAULT_REFRESH_S) -> BucketFollowerServer:
        storage = build_storage(settings.model_copy(update={"s3_upload_concurrency": READ_THREADS}))
        storage.check_bucket()
        cache_dir = settings.data_dir / "bucket-cache"
        shutil.rmtree(cache_dir, ignore_errors=True)  # rebuilt from the bucket at every start
        cache_dir.mkdir(parents=True, exist_ok=True)
        cache = MetadataCache(cache_dir)
        mirror = BucketMirror(
            storage, ObjectKeyFactory(settings.s3_prefix), cache, frozenset(settings.follow_topics) or None
        )
        reader = build_reader(settings, storage, RemoteLogMetadataManager(cache))
        probe_storage = build_storage(settings, probe=True)
        watch = ReadinessWatch(
            [storage_probe(probe_storage.check_bucket)], settings.storage_probe_interval_ms / 1000
        )

        def bucket_failure() -> str | None:
            if not mirror.refreshed.is_set():
                return mirror.failure or "the first look at the bucket is not done"
            return mirror.failure

        token = settings.web_token.get_secret_value() if settings.web_token else None
        web_app = follower_web_app({"bucket": bucket_failure}, reader, token=token)
        return cls(settings, storage, cache, mirror, web_app, probe_storage, watch, refresh_s)

    def run(self) -> int:
        stop = threading.Event()
        thread = threading.Thread(
            target=self.mirror.run, args=(self.refresh_s, stop), name="bucket-mirror", daemon=True
        )
        thread.start()
        self.watch.start()
        log.info(
            "follower serving reads from the bucket alone on %s:%d (a new look every %.0f s)",
            self.settings.web_host,
            self.settings.web_port,
            self.refresh_s,
        )
        try:
            serve(self.web_app, self.settings)
        finally:
            stop.set()
            thread.join(timeout=30)
            self.watch.stop()
            self.probe_storage.close()
            self.cache.close()
            self.storage.close()
        return 0
