"""The worker's Faust app: group membership (= leadership), rebalance callbacks, timers, web views."""

from __future__ import annotations

from typing import Any

import faust

from processor.config import Settings
from processor.follower.materializer import Materializer
from processor.kafka.admin import cluster_replication
from processor.kafka.clients import faust_broker_settings
from processor.leader.leadership import Leadership
from processor.leader.offload_engine import OffloadEngine
from processor.reader.remote_reader import RemoteReader
from processor.web.handlers import FailureCheck
from processor.wiring.faust_transport import ProcessorApp
from processor.wiring.faust_views import register_faust_views
from processor.wiring.leader import REBALANCE_TIMEOUT_S
from processor.wiring.rebalance import connect_rebalance
from processor.wiring.timers import add_data_path_timers


def build_app(
    settings: Settings,
    engine: OffloadEngine,
    leadership: Leadership,
    token: str | None,
    reader: RemoteReader | None = None,
    materializer: Materializer | None = None,
) -> faust.App:
    app = ProcessorApp(
        settings.app_id,
        **faust_broker_settings(settings.kafka),
        datadir=str(settings.data_dir / "faust"),
        web_enabled=settings.web_enabled,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        # Faust's own pages (/router, /table, /graph, /stats, /performance) are not needed here:
        # off, so the web server serves only health, metrics and the read API.
        web_router_enabled=False,
        web_tables_enabled=False,
        web_graph_enabled=False,
        web_stats_enabled=False,
        web_metrics_enabled=False,
        broker_session_timeout=settings.session_timeout_ms / 1000,
        broker_rebalance_timeout=REBALANCE_TIMEOUT_S,
        broker_heartbeat_interval=1.0,
        # The topics Faust creates (<app_id>-__assignor-__leader; no tables, so no changelogs) get the
        # replication of the processor's own topics: PROCESSOR_METADATA_REPLICATION_FACTOR, else
        # min(3, brokers). Faust's default of 1 is refused by managed clusters (Confluent Cloud: 3).
        topic_replication_factor=cluster_replication(settings.kafka, settings.metadata_replication_factor),
        topic_partitions=1,
        producer_acks=-1,
    )
    app.source_topics = frozenset(settings.topics)
    source = app.topic(*settings.topics, key_serializer="raw", value_serializer="raw")

    @app.agent(source, name="offload-leader")
    async def offload_leader(stream: Any) -> None:
        # Never receives events: source partitions stay paused in Faust's consumer. The agent's
        # subscription is what gives this worker its share of the source partitions.
        async for _event in stream:  # pragma: no cover - defensive
            pass

    connect_rebalance(app, leadership, app.source_topics)
    if materializer is not None:
        materializer.listeners.append(leadership.on_metadata)
    add_data_path_timers(app, engine, materializer, leadership)

    def data_path() -> str | None:
        return None if engine.failure is None else f"data path failed: {engine.failure}"

    checks: dict[str, FailureCheck] = {"data_path": data_path}
    if materializer is not None:
        follower = materializer
        checks["follower"] = lambda: (
            None if follower.failure is None else f"metadata follower failed: {follower.failure}"
        )
    register_faust_views(
        app,
        checks,
        extra=lambda: {"paused": engine.paused, "buffer_bytes": engine.buffer.used},
        reader=reader,
        token=token,
    )
    return app
