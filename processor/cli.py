"""The ``processor`` command. The only place that reads the environment."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from processor.errors import ConfigError, ProcessorError, ServiceUnavailableError, StorageError

log = logging.getLogger("processor")

DEFAULT_STACK_DIR = ".stack"


def _setup_logging(level: str = "info") -> None:
    logging.basicConfig(
        level=getattr(
            logging, level.upper().replace("WARN", "WARNING").replace("WARNINGING", "WARNING"), logging.INFO
        ),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def cmd_worker(args: argparse.Namespace) -> int:
    import faust

    from processor.app import build_app, build_engine, prepare
    from processor.config import load_settings

    settings = load_settings()
    _setup_logging(settings.log_level)
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    storage, metadata_partitions = prepare(settings)
    engine = build_engine(settings, storage, metadata_partitions)
    app = build_app(settings, engine)
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True)
    engine.start()
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        engine.stop()
        storage.close()
    return 0


def cmd_dev(args: argparse.Namespace) -> int:
    from processor.devstack import stack

    stack_dir = Path(args.dir)
    if args.action == "up":
        info = stack.start(stack_dir)
        if args.json:
            print(json.dumps({**stack.status(stack_dir), "env": info.env()}, indent=2))
        else:
            print(f"local stack running from {info.dir}")
            print(f"  Kafka (Tansu):     {info.bootstrap_servers}")
            print(f"  S3 (SeaweedFS):    {info.s3_endpoint_url}  bucket {info.bucket}")
            print("  use it with:")
            for k, v in info.env().items():
                print(f"    export {k}={v}")
        return 0
    if args.action == "down":
        stopped = stack.stop(stack_dir)
        print(f"stopped: {', '.join(stopped) if stopped else 'nothing was running'}")
        return 0
    status = stack.status(stack_dir)
    print(json.dumps(status, indent=2) if args.json else _format_status(status))
    return 0 if status.get("running") else 1


def _format_status(status: dict[str, object]) -> str:
    if not status.get("processes"):
        return f"no local stack runs from {status['dir']}"
    lines = [f"local stack in {status['dir']}: {'running' if status['running'] else 'NOT fully running'}"]
    procs = status["processes"]
    assert isinstance(procs, dict)
    for name, p in procs.items():
        lines.append(f"  {name:6} pid {p['pid']:>7}  {'running' if p['running'] else 'stopped'}")
    lines.append(f"  Kafka {status['bootstrap_servers']}  S3 {status['s3_endpoint_url']}")
    return "\n".join(lines)


def cmd_demo(args: argparse.Namespace) -> int:
    from processor.demo import run_demo

    _setup_logging("warning")
    return run_demo(Path(args.dir), records=args.records)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="processor", description="Tiered storage for Apache Kafka.")
    sub = parser.add_subparsers(dest="command", required=True)

    worker = sub.add_parser("worker", help="run the offload worker against the configured cluster")
    worker.set_defaults(func=cmd_worker)

    dev = sub.add_parser("dev", help="the embedded local stack (Tansu + SeaweedFS)")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.add_argument("--dir", default=DEFAULT_STACK_DIR, help="where the stack keeps its data and state")
    dev.add_argument("--json", action="store_true", help="machine-readable output")
    dev.set_defaults(func=cmd_dev)

    demo = sub.add_parser("demo", help="offload sample records on the embedded stack, then stop everything")
    demo.add_argument("--dir", default=".stack/demo")
    demo.add_argument("--records", type=int, default=20000)
    demo.set_defaults(func=cmd_demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (ServiceUnavailableError, StorageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 3
    except ProcessorError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
