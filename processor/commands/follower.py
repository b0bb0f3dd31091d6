"""``processor follower``: a read-only follower serving ``/fetch`` and ``/segments`` (see
processor/wiring/follower_server.py); ``--from-bucket``: from the bucket's manifests alone (see
processor/wiring/bucket_follower.py)."""

from __future__ import annotations

import argparse

from processor.config import load_settings
from processor.errors import ConfigError
from processor.logs import setup_logging
from processor.wiring.bucket_follower import BucketFollowerServer
from processor.wiring.follower_server import FollowerServer


def cmd_follower(args: argparse.Namespace) -> int:
    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
    if args.from_bucket:
        if args.refresh_ms < 1000:
            raise ConfigError("--refresh-ms must be at least 1000")
        return BucketFollowerServer.build(settings, args.refresh_ms / 1000).run()
    return FollowerServer.build(settings).run()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "follower", help="serve remote reads (/fetch, /segments) from the metadata topic; no offload"
    )
    parser.add_argument(
        "--from-bucket",
        action="store_true",
        help="a read replica from the bucket's segment manifests alone: no Kafka, no metadata topic",
    )
    parser.add_argument(
        "--refresh-ms", type=int, default=30_000, help="with --from-bucket: how often to look at the bucket"
    )
    parser.set_defaults(func=cmd_follower)
