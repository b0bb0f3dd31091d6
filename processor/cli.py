"""The ``processor`` command. The only place that reads the environment."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from processor.errors import (
    ConfigError,
    InvalidNameError,
    MetadataTopicError,
    OffsetNotInRemoteError,
    ProcessorError,
    ServiceUnavailableError,
    StorageError,
)
from processor.logs import faust_logging_options
from processor.runtime import tune_gc

if TYPE_CHECKING:
    from processor.app import Follower
    from processor.config import Settings
    from processor.reader.remote_reader import RemoteReader

log = logging.getLogger("processor")

DEFAULT_STACK_DIR = ".stack"


def _setup_logging(level: str = "info", log_format: str = "text") -> None:
    from processor.logs import setup_logging

    setup_logging(level, log_format)


def cmd_worker(args: argparse.Namespace) -> int:
    import faust

    from processor.app import (
        build_app,
        build_engine,
        build_follower,
        build_planner,
        build_reader,
        build_readiness_watch,
        build_storage,
        prepare,
    )
    from processor.config import load_settings

    settings = load_settings()
    _setup_logging(settings.log_level, settings.log_format)
    (settings.data_dir / "faust").mkdir(parents=True, exist_ok=True)
    storage, metadata_partitions = prepare(settings)
    follower = None
    reader = None
    if settings.follower_enabled:
        follower = build_follower(settings, metadata_partitions)
        reader = build_reader(settings, storage, follower.rlmm)
    planner = build_planner(settings, metadata_partitions, follower)
    engine = build_engine(settings, storage, metadata_partitions, planner, follower)
    app = build_app(settings, engine, reader, follower, planner)
    from processor.lifecycle.worker_tasks import attach_lifecycle  # retention, deletion, multipart sweep

    lifecycle = attach_lifecycle(app, settings, engine, storage, metadata_partitions, follower)
    worker = faust.Worker(app, loglevel=settings.log_level, quiet=True, **faust_logging_options(settings))
    probe_storage = build_storage(settings, probe=True)
    watch = build_readiness_watch(settings, follower, probe_storage)
    engine.start()
    if follower is not None:
        follower.materializer.start()
    watch.start()
    try:
        worker.execute_from_commandline()
    except SystemExit as exc:
        return int(exc.code or 0)
    finally:
        watch.stop()
        probe_storage.close()
        engine.stop()
        lifecycle.close()
        if follower is not None:
            follower.close()
        storage.close()
    return 0


@dataclass
class _ReadSide:
    """A throwaway follower for one-off CLI reads, and what must be released after."""

    follower: Follower
    reader: RemoteReader
    cache_dir: tempfile.TemporaryDirectory[str]

    def close(self) -> None:
        self.follower.close()
        self.reader.storage.close()
        self.cache_dir.cleanup()


def _read_side(settings: Settings, tp_topic: str, partition: int | None) -> _ReadSide:
    """Materialize only the metadata partitions that hold the topic's partitions into a temporary
    cache, then read through it. Works whether or not a worker runs."""
    from processor.app import build_follower, build_reader, build_storage
    from processor.kafka_clients import check_broker, partition_counts
    from processor.metadata.codec import metadata_partition_for
    from processor.metadata.model import TopicPartition

    admin = check_broker(settings.bootstrap_servers)
    counts = partition_counts(admin, [settings.metadata_topic, tp_topic])
    if settings.metadata_topic not in counts:
        raise ProcessorError(
            f"metadata topic {settings.metadata_topic} does not exist: nothing was offloaded yet"
        )
    meta_parts = counts[settings.metadata_topic]
    partitions = [partition] if partition is not None else list(range(counts.get(tp_topic, 0)))
    wanted = sorted({metadata_partition_for(TopicPartition(tp_topic, p), meta_parts) for p in partitions})
    cache_dir = tempfile.TemporaryDirectory(prefix="processor-cli-cache-")
    scoped = settings.model_copy(
        update={"follow_metadata_partitions": tuple(wanted) or (0,), "follow_topics": (tp_topic,)}
    )
    follower = build_follower(scoped, meta_parts, cache_dir=Path(cache_dir.name))
    follower.materializer.catch_up()
    return _ReadSide(follower, build_reader(settings, build_storage(settings), follower.rlmm), cache_dir)


def cmd_segments(args: argparse.Namespace) -> int:
    from processor.config import load_settings
    from processor.metadata.model import TopicPartition
    from processor.reader.record_json import segment_to_json
    from processor.segment.object_keys import validate_topic

    settings = load_settings()
    topic = validate_topic(args.topic)
    side = _read_side(settings, topic, args.partition)
    try:
        cache = side.follower.cache
        tps = [tp for tp in cache.topic_partitions() if tp.topic == topic]
        if args.partition is not None:
            tps = [tp for tp in tps if tp == TopicPartition(topic, args.partition)]
        rows = [segment_to_json(s) for tp in tps for s in cache.listed_segments(tp)]
    finally:
        side.close()
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        print(
            f"{'id':36}  {'partition':>9}  {'start':>12}  {'end':>12}  {'state':22}  {'size':>12}  object key"
        )
        for r in rows:
            print(
                f"{r['id']:36}  {r['partition']:>9}  {r['start_offset']:>12}  {r['end_offset']:>12}  "
                f"{r['state']:22}  {r['size_bytes']:>12}  {r['object_key']}"
            )
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
    from processor import __version__

    parser = argparse.ArgumentParser(
        prog="processor",
        description="Tiered storage for Apache Kafka.",
        epilog="exit codes: 0 ok, 1 problems found, 2 bad input (usage, configuration, an offset "
        "not in remote storage), 3 Kafka or S3 unreachable, 130 interrupted",
    )
    parser.add_argument("--version", action="version", version=f"processor {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    worker = sub.add_parser("worker", help="run the offload worker against the configured cluster")
    worker.set_defaults(func=cmd_worker)

    dev = sub.add_parser("dev", help="the embedded local stack (Tansu + SeaweedFS)")
    dev.add_argument("action", choices=["up", "down", "status"])
    dev.add_argument("--dir", default=DEFAULT_STACK_DIR, help="where the stack keeps its data and state")
    dev.add_argument("--json", action="store_true", help="machine-readable output")
    dev.set_defaults(func=cmd_dev)

    segments = sub.add_parser("segments", help="list a topic's remote segments")
    segments.add_argument("--topic", required=True)
    segments.add_argument("--partition", type=int)
    segments.add_argument("--json", action="store_true", help="one JSON object per line")
    segments.set_defaults(func=cmd_segments)

    from processor.commands import config_cmd, verify
    from processor.commands import fetch as fetch_command
    from processor.commands import follower as follower_command

    fetch = sub.add_parser(
        "fetch", help="read records back from remote storage (text, JSON lines, raw, Parquet)"
    )
    fetch_command.register_arguments(fetch)

    demo = sub.add_parser("demo", help="offload sample records on the embedded stack, then stop everything")
    demo.add_argument("--dir", default=".stack/demo")
    demo.add_argument("--records", type=int, default=20000)
    demo.set_defaults(func=cmd_demo)

    follower_command.register(sub)
    config_cmd.register(sub)
    verify.register(sub)
    from processor.spark.audit_command import add_audit_parser  # imports pyspark only when it runs

    add_audit_parser(sub)

    from processor.commands import abort_multipart, delete_before, delete_topic, offload  # lifecycle

    for command in (delete_before, delete_topic, abort_multipart, offload):
        command.add_parser(sub)
    return parser


def _error(exc: BaseException) -> None:
    """Report a command's failure: a log record when JSON logging is on (so every line the process
    writes stays JSON), else one plain line on stderr."""
    from processor.logs import json_logging_active

    if json_logging_active():
        log.error("error: %s", exc, extra={"error": type(exc).__name__})
    else:
        print(f"error: {exc}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Exit codes, the same for every command: 0 ok, 1 problems found, 2 bad input (usage,
    configuration, an offset not in remote storage), 3 Kafka or S3 unreachable, 130 interrupted."""
    args = build_parser().parse_args(argv)
    tune_gc()
    try:
        return int(args.func(args))
    except (ConfigError, InvalidNameError, OffsetNotInRemoteError) as exc:
        _error(exc)
        return 2
    except (ServiceUnavailableError, StorageError, MetadataTopicError) as exc:
        _error(exc)
        return 3
    except ProcessorError as exc:
        _error(exc)
        return 1
    except KeyboardInterrupt:
        return 130
