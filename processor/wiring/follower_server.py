"""``processor follower``: a read-only follower serving ``/fetch`` and ``/segments`` over aiohttp.

It consumes the metadata topic into its local RocksDB cache and serves remote reads, health and
metrics over HTTP; it holds no leadership and writes nothing, so any number of them can run behind
one Service (the chart's ``followers``). No Faust app: aiohttp (Faust's own web server library)
serves the same handlers as the worker.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from aiohttp import web

from processor.config import Settings
from processor.probes import ReadinessWatch
from processor.storage.chunk_storage import ChunkStorage
from processor.web.servers import follower_web_app
from processor.wiring.follower import Follower, build_follower, build_reader
from processor.wiring.readiness import build_readiness_watch
from processor.wiring.startup import check_shared, read_api_token
from processor.wiring.storage import build_storage

log = logging.getLogger("processor.follower")


@dataclass
class FollowerServer:
    """One ``processor follower`` process, built from its settings (``build``), then ``run``."""

    settings: Settings
    storage: ChunkStorage
    follower: Follower
    web_app: web.Application
    probe_storage: ChunkStorage
    watch: ReadinessWatch

    @classmethod
    def build(cls, settings: Settings) -> FollowerServer:
        token = read_api_token(settings)  # before anything connects: a config error exits 2
        started = check_shared(settings)
        storage = started.storage
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        follower = build_follower(settings, started.metadata_partitions, storage=storage)
        reader = build_reader(settings, storage, follower.rlmm)
        probe_storage = build_storage(settings, probe=True)
        watch = build_readiness_watch(settings, follower.materializer, probe_storage)
        materializer = follower.materializer

        def follower_failure() -> str | None:
            return (
                None if materializer.failure is None else f"metadata follower failed: {materializer.failure}"
            )

        web_app = follower_web_app(
            {"follower": follower_failure},
            reader,
            token=token,
            extra=lambda: {"lag_records": materializer.state.lag_records},
        )
        return cls(settings, storage, follower, web_app, probe_storage, watch)

    def run(self) -> int:
        """Start the follower and the watch, serve until stopped, close everything."""
        materializer = self.follower.materializer
        materializer.start()
        self.watch.start()
        log.info(
            "follower serving reads on %s:%d (%d metadata partitions)",
            self.settings.web_host,
            self.settings.web_port,
            len(materializer.partitions),
        )
        try:
            serve(self.web_app, self.settings)
        finally:
            self.watch.stop()
            self.probe_storage.close()
            self.follower.close()
            self.storage.close()
        return 0


def serve(app: web.Application, settings: Settings) -> None:
    """Run a follower's web app on the configured address until the process is stopped."""
    web.run_app(app, host=settings.web_host, port=settings.web_port, print=None, access_log=None)
