"""``processor follower``: a read-only follower serving ``/fetch`` and ``/segments``.

It consumes the metadata topic into its local RocksDB cache and serves remote reads, health and
metrics over HTTP; it holds no leadership and writes nothing, so any number of them can run behind
one Service (the chart's ``followers``). No Faust app: aiohttp (Faust's own web server library)
serves the same handlers as the worker.
"""

from __future__ import annotations

import argparse
import logging

from aiohttp import web

log = logging.getLogger("processor.follower")


def cmd_follower(args: argparse.Namespace) -> int:
    from processor.app import (
        build_follower,
        build_reader,
        build_readiness_watch,
        build_storage,
        prepare_read_side,
    )
    from processor.config import load_settings
    from processor.logs import setup_logging
    from processor.web.servers import follower_web_app

    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
    storage, metadata_partitions, _admin = prepare_read_side(settings)
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    follower = build_follower(settings, metadata_partitions)
    reader = build_reader(settings, storage, follower.rlmm)
    probe_storage = build_storage(settings, probe=True)
    watch = build_readiness_watch(settings, follower, probe_storage)
    materializer = follower.materializer

    def follower_failure() -> str | None:
        return None if materializer.failure is None else f"metadata follower failed: {materializer.failure}"

    token = settings.web_token.get_secret_value() if settings.web_token else None
    app = follower_web_app(
        {"follower": follower_failure},
        reader,
        token=token,
        extra=lambda: {"lag_records": materializer.state.lag_records},
    )
    materializer.start()
    watch.start()
    log.info(
        "follower serving reads on %s:%d (%d metadata partitions)",
        settings.web_host,
        settings.web_port,
        len(materializer.partitions),
    )
    try:
        web.run_app(app, host=settings.web_host, port=settings.web_port, print=None, access_log=None)
    finally:
        watch.stop()
        probe_storage.close()
        follower.close()
        storage.close()
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "follower", help="serve remote reads (/fetch, /segments) from the metadata topic; no offload"
    )
    parser.set_defaults(func=cmd_follower)
