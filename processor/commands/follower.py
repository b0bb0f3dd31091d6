"""``processor follower``: a read-only follower serving ``/fetch`` and ``/segments`` (see
processor/wiring/follower_server.py)."""

from __future__ import annotations

import argparse

from processor.config import load_settings
from processor.logs import setup_logging
from processor.wiring.follower_server import FollowerServer


def cmd_follower(args: argparse.Namespace) -> int:
    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
    return FollowerServer.build(settings).run()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "follower", help="serve remote reads (/fetch, /segments) from the metadata topic; no offload"
    )
    parser.set_defaults(func=cmd_follower)
