"""The worker: builds the leader, follower, lifecycle and web parts from ``Settings``, starts them in
order, runs Faust, and closes everything in reverse order.

Start: start-up checks -> follower + reader (PROCESSOR_FOLLOWER_ENABLED) -> resume planner ->
offload engine -> Faust app (leadership, timers, views) -> lifecycle tasks -> readiness watch; then
the engine, the follower and the watch start, and Faust runs until it stops. Close: watch, probe
client, engine, lifecycle, follower, storage.
"""

from __future__ import annotations

from dataclasses import dataclass

import faust

from processor.config import Settings
from processor.leader.leadership import Leadership
from processor.leader.offload_engine import OffloadEngine
from processor.lifecycle.worker_tasks import LifecycleTasks
from processor.logs import faust_logging_options
from processor.metadata.model import TopicPartition
from processor.probes import ReadinessWatch
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.faust_app import build_app
from processor.wiring.faust_views import add_offload_view
from processor.wiring.follower import Follower, build_follower, build_reader
from processor.wiring.leader import build_engine
from processor.wiring.readiness import build_readiness_watch
from processor.wiring.rebalance import generation
from processor.wiring.resume import build_planner, remote_state_loader
from processor.wiring.startup import check_worker
from processor.wiring.storage import build_storage
from processor.wiring.timers import add_lifecycle_timers


@dataclass
class Worker:
    """One ``processor worker`` process, built from its settings (``build``), then ``run``."""

    settings: Settings
    storage: ChunkStorage
    follower: Follower | None
    engine: OffloadEngine
    app: faust.App
    lifecycle: LifecycleTasks
    probe_storage: ChunkStorage
    watch: ReadinessWatch

    @classmethod
    def build(cls, settings: Settings) -> Worker:
        (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
        started = check_worker(settings)
        storage, metadata_partitions = started.storage, started.metadata_partitions
        follower = None
        reader = None
        if settings.follower_enabled:
            follower = build_follower(settings, metadata_partitions)
            reader = build_reader(settings, storage, follower.rlmm)
        materializer = follower.materializer if follower is not None else None
        planner = build_planner(settings, metadata_partitions, materializer)
        engine = build_engine(settings, storage, metadata_partitions, planner, materializer)
        app = build_app(settings, engine, Leadership(engine, planner), reader, materializer)
        add_offload_view(app, engine, settings)  # POST /offload (processor offload)

        def led_partitions() -> dict[TopicPartition, int]:
            epoch = generation(app)
            return {tp: epoch for tp in engine.status() if isinstance(tp, TopicPartition)}

        # the follower's cache holds every led partition only when it follows everything
        use_cache = (
            follower is not None and not settings.follow_topics and not settings.follow_metadata_partitions
        )
        lifecycle = LifecycleTasks(
            settings,
            storage,
            metadata_partitions,
            led_partitions,
            follower.cache if use_cache and follower is not None else None,
            remote_state_loader(settings, metadata_partitions),
        )
        add_lifecycle_timers(app, lifecycle, settings.retention_check_ms)
        probe_storage = build_storage(settings, probe=True)
        watch = build_readiness_watch(settings, materializer, probe_storage)
        return cls(settings, storage, follower, engine, app, lifecycle, probe_storage, watch)

    def start(self) -> None:
        self.engine.start()
        if self.follower is not None:
            self.follower.materializer.start()
        self.watch.start()

    def close(self) -> None:
        self.watch.stop()
        self.probe_storage.close()
        self.engine.stop()
        self.lifecycle.close()
        if self.follower is not None:
            self.follower.close()
        self.storage.close()

    def run(self) -> int:
        """Start, run Faust until it stops, close; the process's exit code."""
        faust_worker = faust.Worker(
            self.app, loglevel=self.settings.log_level, quiet=True, **faust_logging_options(self.settings)
        )
        self.start()
        try:
            faust_worker.execute_from_commandline()
        except SystemExit as exc:
            return int(exc.code or 0)
        finally:
            self.close()
        return 0
