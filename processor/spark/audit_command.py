"""The ``processor audit`` command. Imports pyspark only when it runs, so the CLI works without it."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from processor.errors import ConfigError, ProcessorError, ServiceUnavailableError

log = logging.getLogger(__name__)


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def add_audit_parser(sub: Any) -> None:
    from processor.spark.audit_rules import FORMATS

    audit = sub.add_parser(
        "audit", help="check the archive's metadata (and objects) with a Spark Structured Streaming query"
    )
    audit.add_argument(
        "--once", action="store_true", help="process what is there, then exit 0 clean / 1 findings"
    )
    audit.add_argument(
        "--checkpoint", help="checkpoint folder (default: $PROCESSOR_DATA_DIR/audit/checkpoint)"
    )
    audit.add_argument("--output", help="findings folder (default: $PROCESSOR_DATA_DIR/audit/findings)")
    audit.add_argument(
        "--format", choices=FORMATS, default="parquet", help="findings format (default parquet)"
    )
    audit.add_argument(
        "--verify-objects", action="store_true", help="HEAD objects, check sampled block CRCs, find orphans"
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
    audit.add_argument("--interval-s", type=float, default=30.0, help="micro-batch interval without --once")
    audit.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    audit.set_defaults(func=cmd_audit)


def spark_session(master: str) -> Any:
    from processor.spark import local_session

    return local_session("processor-audit", master, spark__sql__shuffle__partitions="4")


def cmd_audit(args: argparse.Namespace) -> int:
    from processor.config import load_settings
    from processor.kafka_clients import check_broker, partition_counts
    from processor.spark.options import Connection

    try:
        import pyspark  # noqa: F401
    except ImportError:
        raise ConfigError("the audit needs pyspark: pip install 'kafka-tiered-processor[spark]'") from None
    settings = load_settings()
    conn = Connection(
        settings.kafka,
        settings.metadata_topic,
        settings.s3_endpoint_url,
        settings.s3_bucket,
        settings.s3_prefix,
        settings.s3_region,
    )
    admin = check_broker(settings.kafka)
    if settings.metadata_topic not in partition_counts(admin, [settings.metadata_topic]):
        raise ConfigError(
            f"metadata topic {settings.metadata_topic} does not exist (PROCESSOR_METADATA_TOPIC)"
        )
    if args.verify_objects:
        storage = conn.storage()
        try:
            next(iter(storage.list(settings.s3_prefix + "/" if settings.s3_prefix else "")), None)
        finally:
            storage.close()
    from processor.spark.audit import AuditOptions, run_audit

    options = AuditOptions(
        connection=conn,
        checkpoint=Path(args.checkpoint) if args.checkpoint else settings.data_dir / "audit" / "checkpoint",
        output=Path(args.output) if args.output else settings.data_dir / "audit" / "findings",
        format=args.format,
        once=args.once,
        verify_objects=args.verify_objects,
        stuck_after_ms=args.stuck_after_ms,
        max_lag_records=args.max_lag_records,
        sample_blocks=max(2, args.sample_blocks),
        interval_s=args.interval_s,
    )
    spark = spark_session(args.master)
    try:
        run = run_audit(spark, options)
    except ProcessorError:
        raise
    except Exception as exc:  # a failure inside a Spark task arrives as a Py4J/streaming exception
        text = str(exc)
        if "ServiceUnavailableError" in text or "StorageError" in text or "MetadataTopicError" in text:
            raise ServiceUnavailableError(
                f"the audit lost Kafka or S3: {text.splitlines()[0][:500]}"
            ) from None
        raise
    finally:
        spark.stop()
    print(
        f"audit: {len(run.findings)} finding(s)"
        + (f" written to {options.output}" if run.findings and args.format != "console" else "")
    )
    return 1 if run.findings else 0
