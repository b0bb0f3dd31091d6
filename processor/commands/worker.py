"""``processor worker``: run the offload worker against the configured cluster."""

from __future__ import annotations

import argparse

from processor.config import load_settings
from processor.logs import setup_logging


def cmd_worker(args: argparse.Namespace) -> int:
    # faust: imported only by the command that runs it (the other commands start faster without it)
    from processor.wiring.worker import Worker

    settings = load_settings()
    setup_logging(settings.log_level, settings.log_format)
    return Worker.build(settings).run()


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    worker = sub.add_parser("worker", help="run the offload worker against the configured cluster")
    worker.set_defaults(func=cmd_worker)
