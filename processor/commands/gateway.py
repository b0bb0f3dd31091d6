"""``processor gateway``: a Kafka-protocol endpoint that serves archived offsets to unmodified Kafka
clients (see processor/gateway/server.py)."""

from __future__ import annotations

import argparse

from processor.config import load_settings
from processor.logs import setup_logging


def cmd_gateway(_args: argparse.Namespace) -> int:
    # the gateway's Kafka protocol (kio): imported only by the command that runs it, as the
    # worker's faust is; it cost every other command 0.4-0.7 s of start-up
    from processor.wiring.gateway_server import GatewayServer

    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
    return GatewayServer.build(settings).run()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "gateway",
        help="serve the archive to unmodified Kafka clients (a Kafka-protocol endpoint before the cluster)",
    )
    parser.set_defaults(func=cmd_gateway)
