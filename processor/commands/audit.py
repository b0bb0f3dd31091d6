"""The ``processor audit`` command: the Spark audit (processor/spark/audit/) over the configured
archive. Imports pyspark only when it runs, so the CLI works without it."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from processor.errors import ConfigError, ProcessorError, ServiceUnavailableError
from processor.spark import active_session, require_pyspark
from processor.spark.audit.rules import FORMATS
from processor.spark_sources import local_session
from processor.units import parse_size

log = logging.getLogger(__name__)


# Under PROCESSOR_DATA_DIR: the one place both the defaults and the help text come from.
DEFAULT_OUTPUT = "audit"
DEFAULT_CHECKPOINT = "audit/checkpoint"


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _bytes(text: str) -> int:
    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1 byte")
    return value


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser(
        "audit",
        help="scrub the archive: metadata, objects and offsets, as a Spark Structured Streaming query",
    )
    audit.add_argument(
        "--once",
        action="store_true",
        help="one pass over what is there, then exit 0 clean / 1 while a problem is open",
    )
    audit.add_argument(
        "--checkpoint", help=f"checkpoint folder (default: $PROCESSOR_DATA_DIR/{DEFAULT_CHECKPOINT})"
    )
    audit.add_argument(
        "--output",
        help=f"folder of the findings/ and problems/ tables (default: $PROCESSOR_DATA_DIR/{DEFAULT_OUTPUT})",
    )
    audit.add_argument("--format", choices=FORMATS, default="parquet", help="output format (default parquet)")
    audit.add_argument(
        "--verify-objects",
        action="store_true",
        help="check objects too: sizes, CRCs, counts, orphans (bounded per pass)",
    )
    audit.add_argument(
        "--full-crc", action="store_true", help="with --verify-objects: read every block, not samples"
    )
    audit.add_argument(
        "--max-bytes-per-pass",
        type=_bytes,
        default=1 << 30,
        help="object bytes one pass may read (default 1GiB)",
    )
    audit.add_argument(
        "--max-requests-per-pass",
        type=_positive,
        default=10_000,
        help="storage requests one pass may send (10000)",
    )
    audit.add_argument(
        "--stuck-after-ms", type=_non_negative, default=600_000, help="default 600000 (10 min)"
    )
    audit.add_argument(
        "--max-lag-records", type=_non_negative, help="report partitions lagging more than N records"
    )
    audit.add_argument(
        "--sample-blocks", type=_non_negative, default=3, help="blocks read per segment (>= 2)"
    )
    audit.add_argument("--interval-s", type=float, default=30.0, help="seconds between passes without --once")
    audit.add_argument(
        "--metrics-port", type=_positive, help="serve the audit's Prometheus metrics on this port"
    )
    audit.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    audit.set_defaults(func=cmd_audit)


def spark_session(master: str) -> Any:
    return local_session("processor-audit", master, spark__sql__shuffle__partitions="4")


def cmd_audit(args: argparse.Namespace) -> int:
    from processor.config import load_settings
    from processor.kafka.admin import check_broker, partition_counts
    from processor.wiring.spark_connection import spark_connection

    require_pyspark("the audit")
    settings = load_settings()
    # where the Spark sources connect, from the settings alone (the audit takes no source options):
    # the cluster and its security, the metadata topic, the bucket, and the key ring that opens
    # encrypted segments (PROCESSOR_ENCRYPTION_KEYRING; KMS is reached in PROCESSOR_S3_REGION)
    conn = spark_connection({}, settings)
    admin = check_broker(settings.kafka)
    if settings.metadata_topic not in partition_counts(admin, [settings.metadata_topic]):
        raise ConfigError(
            f"metadata topic {settings.metadata_topic} does not exist (PROCESSOR_METADATA_TOPIC)"
        )
    if args.verify_objects:
        storage = conn.storage()
        try:
            storage.check_bucket()
        finally:
            storage.close()
    if args.metrics_port:
        from prometheus_client import start_http_server

        start_http_server(args.metrics_port)
    from processor.spark.audit.run import AuditOptions, run_audit

    options = AuditOptions(
        connection=conn,
        checkpoint=Path(args.checkpoint) if args.checkpoint else settings.data_dir / DEFAULT_CHECKPOINT,
        output=Path(args.output) if args.output else settings.data_dir / DEFAULT_OUTPUT,
        format=args.format,
        once=args.once,
        verify_objects=args.verify_objects,
        full_crc=args.full_crc,
        stuck_after_ms=args.stuck_after_ms,
        max_lag_records=args.max_lag_records,
        sample_blocks=max(2, args.sample_blocks),
        interval_s=args.interval_s,
        max_bytes_per_pass=args.max_bytes_per_pass,
        max_requests_per_pass=args.max_requests_per_pass,
    )
    # Called from a program that already has a session (``processor.cli.main`` in-process): use it
    # and leave it running; a session this command made is its own to stop.
    borrowed = active_session() is not None
    spark = spark_session(args.master)
    try:
        run = run_audit(spark, options)
    except ProcessorError:
        raise
    except Exception as exc:  # a failure inside a Spark task arrives as a Py4J/streaming exception
        text = str(exc)
        refused = refusal_in(text)
        if refused is not None:
            raise ServiceUnavailableError(refused) from None
        if "ServiceUnavailableError" in text or "StorageError" in text or "MetadataTopicError" in text:
            raise ServiceUnavailableError(
                f"the audit lost Kafka or S3: {text.splitlines()[0][:500]}"
            ) from None
        raise
    finally:
        if not borrowed:
            spark.stop()
    opened, resolved = len(run.outcome.opened), len(run.outcome.resolved)
    print(
        f"audit: {len(run.open_problems)} open problem(s) ({opened} new, {resolved} resolved)"
        + (f"; see {options.output}/problems" if args.format != "console" else "")
    )
    return 1 if run.open_problems else 0


def refusal_in(text: str) -> str | None:
    """The line of a Spark-wrapped failure that says which topic the broker refused the principal
    (TopicRefusedError, raised in the audit's batch function), or None."""
    marker = "TopicRefusedError: "
    line = next((line for line in text.splitlines() if marker in line), None)
    return None if line is None else line.split(marker, 1)[1].strip()[:500]
