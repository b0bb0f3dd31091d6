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
from processor.follower.snapshot_writer import SnapshotSchedule
from processor.leader.leadership import Leadership
from processor.leader.offload_engine import OffloadEngine
from processor.lifecycle.worker_tasks import LifecycleTasks
from processor.logs import faust_logging_options
from processor.probes import ReadinessWatch
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.faust_app import build_app
from processor.wiring.faust_views import add_offload_view
from processor.wiring.follower import Follower, build_follower, build_reader
from processor.wiring.leader import build_engine
from processor.wiring.lifecycle import lifecycle_tasks
from processor.wiring.read_your_write import caught_up_by_follower, confirm_by_follower
from processor.wiring.readiness import build_readiness_watch
from processor.wiring.resume import build_planner
from processor.wiring.rewrite import worker_merges
from processor.wiring.startup import check_worker, read_api_token, require_topics
from processor.wiring.storage import build_storage
from processor.wiring.timers import add_lifecycle_timers


def reclaim_after_s(settings: Settings) -> float:
    """How long another claim of a partition Faust assigns here must be quiet before this worker
    claims it again: twice the session timeout, at least 30 s."""
    return max(30.0, 2 * settings.session_timeout_ms / 1000)


@dataclass
class Worker:
    """One ``processor worker`` process, built from its settings (``build``), then ``run``."""

    settings: Settings
    storage: ChunkStorage
    follower: Follower
    engine: OffloadEngine
    app: faust.App
    lifecycle: LifecycleTasks
    probe_storage: ChunkStorage
    watch: ReadinessWatch
    snapshots: SnapshotSchedule | None = None  # writes the metadata snapshots of what it follows

    @classmethod
    def build(cls, settings: Settings) -> Worker:
        require_topics(settings)  # the configuration first: a config error exits 2 before any connection
        token = read_api_token(settings)
        (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
        started = check_worker(settings)
        storage, metadata_partitions = started.storage, started.metadata_partitions
        # Every worker follows the metadata of its own source topics: it reads its claims and
        # records back through it (PROCESSOR_FOLLOWER_ENABLED only decides whether it serves reads).
        follower = build_follower(settings, metadata_partitions, own_topics=True, storage=storage)
        reader = build_reader(settings, storage, follower.rlmm) if settings.follower_enabled else None
        materializer = follower.materializer
        planner = build_planner(settings, metadata_partitions, materializer, storage)
        engine = build_engine(settings, storage, metadata_partitions, planner, materializer)
        leadership = Leadership(engine, planner, materializer, reclaim_after_s(settings))
        app = build_app(settings, engine, leadership, token, reader, materializer)
        add_offload_view(app, engine, settings, token)  # POST /offload (processor offload)
        lifecycle = lifecycle_tasks(
            settings,
            storage,
            metadata_partitions,
            leadership.led,
            follower.cache,
            engine.copier.in_flight,
            confirm_by_follower(materializer, metadata_partitions),
            leadership.fence,
            caught_up_by_follower(materializer, metadata_partitions),
        )
        if settings.merge_check_ms > 0:
            lifecycle.merges = worker_merges(
                settings,
                storage,
                follower.cache.remote_state,
                engine.copier,
                lifecycle.deleter,
                leadership.fence,
            )
        add_lifecycle_timers(app, lifecycle, settings.retention_check_ms)
        probe_storage = build_storage(settings, probe=True)
        watch = build_readiness_watch(settings, materializer, probe_storage)
        snapshots = follower.snapshot_schedule(settings.snapshot_interval_ms, settings.snapshots_kept)
        return cls(settings, storage, follower, engine, app, lifecycle, probe_storage, watch, snapshots)

    def start(self) -> None:
        self.engine.start()
        self.follower.materializer.start()
        self.watch.start()
        if self.snapshots is not None:
            self.snapshots.start()

    def close(self) -> None:
        if self.snapshots is not None:
            self.snapshots.stop()
        self.watch.stop()
        self.probe_storage.close()
        self.engine.stop()
        self.lifecycle.close()
        self.follower.close()
        self.storage.close()

    def run(self) -> int:
        """Start, run Faust until it stops, close; the process's exit code: Faust's, or 130 when
        SIGINT (Ctrl-C) stopped it, as every command exits when interrupted (SIGTERM, the way
        Kubernetes stops a pod, is a clean stop: 0)."""
        faust_worker = _FaustWorker(
            self.app, loglevel=self.settings.log_level, quiet=True, **faust_logging_options(self.settings)
        )
        self.start()
        try:
            faust_worker.execute_from_commandline()
        except SystemExit as exc:
            code = int(exc.code or 0)
            return EXIT_INTERRUPTED if code == 0 and faust_worker.interrupted else code
        finally:
            self.close()
        return 0


EXIT_INTERRUPTED = 130  # what every command exits with when interrupted (processor/cli.py)


class _FaustWorker(faust.Worker):
    """Faust's worker, remembering whether SIGINT stopped it (Faust exits 0 either way)."""

    interrupted = False

    def _on_sigint(self) -> None:
        self.interrupted = True
        super()._on_sigint()

    def _repr_name(self) -> str:
        return "Worker"  # Faust's log lines name it "[^Worker]", as before
