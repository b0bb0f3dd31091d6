"""``processor restore``: put archived records back into a topic, of this cluster or another, exactly once.

Keys, values, headers (order and duplicates), timestamps and partition numbers are kept; a run
killed at any moment and started again with the same arguments continues with no duplicate and no
gap (see processor/restore/restorer.py). ``--dry-run`` reads what would be restored and produces
nothing. Exit codes: 0 done, 1 the restore stopped (what it committed stays; run it again), 2 bad
input, 3 Kafka or S3 unreachable, 130 interrupted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from datetime import datetime

from processor.commands.progress import progress
from processor.config import Settings, load_settings
from processor.errors import ConfigError
from processor.kafka.security import (
    ENV_NAMES,
    KafkaConnection,
    KafkaSecurity,
    SaslMechanism,
    SecurityProtocol,
)
from processor.restore.archive import ArchiveTopic
from processor.restore.plan import PARTITIONERS, range_from, range_to
from processor.restore.progress_record import validate_restore_id
from processor.restore.run import PreparedRestore, RestoreRequest, RestoreSummary
from processor.restore.state import (
    DEFAULT_MAX_BATCH_BYTES,
    DEFAULT_TRANSACTION_MS,
    DEFAULT_TRANSACTION_RECORDS,
    RestoreOptions,
)
from processor.restore.target import DEFAULT_PROGRESS_TOPIC, TargetCluster
from processor.segment.object_keys import validate_topic
from processor.wiring.read_side import open_read_side


def timestamp_ms(text: str) -> int:
    """Milliseconds since the epoch, or an ISO 8601 time with a zone (``2024-05-01T12:00:00Z``)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither milliseconds since the epoch nor an ISO 8601 time"
        ) from None
    if when.tzinfo is None:
        raise argparse.ArgumentTypeError(f"{text!r}: give the time zone (e.g. a trailing Z for UTC)")
    return int(when.timestamp() * 1000)


# The target's security: every KafkaSecurity setting as PROCESSOR_TARGET_* (secrets stay out of
# the command line); the common non-secret ones also as options, which win.
TARGET_ENV_NAMES = {
    field: name.replace("PROCESSOR_", "PROCESSOR_TARGET_", 1) for field, name in ENV_NAMES.items()
}
TARGET_BOOTSTRAP_ENV = "PROCESSOR_TARGET_BOOTSTRAP_SERVERS"  # or --target-bootstrap, which wins
_TARGET_OPTIONS = {
    "target_security_protocol": "protocol",
    "target_sasl_mechanism": "sasl_mechanism",
    "target_sasl_username": "sasl_username",
    "target_ssl_cafile": "ssl_cafile",
}


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    """The target cluster and its security settings (also PROCESSOR_TARGET_* variables)."""
    p.add_argument(
        "--target-bootstrap",
        help="the target cluster, or PROCESSOR_TARGET_BOOTSTRAP_SERVERS (default: "
        "PROCESSOR_BOOTSTRAP_SERVERS, with its security settings)",
    )
    p.add_argument(
        "--target-security-protocol",
        choices=[v.value for v in SecurityProtocol],
        help="or PROCESSOR_TARGET_SECURITY_PROTOCOL",
    )
    p.add_argument(
        "--target-sasl-mechanism",
        choices=[v.value for v in SaslMechanism],
        help="or PROCESSOR_TARGET_SASL_MECHANISM",
    )
    p.add_argument(
        "--target-sasl-username",
        help="or PROCESSOR_TARGET_SASL_USERNAME (the password only as PROCESSOR_TARGET_SASL_PASSWORD)",
    )
    p.add_argument(
        "--target-ssl-cafile", help="CA bundle for the target's TLS, or PROCESSOR_TARGET_SSL_CAFILE"
    )
    p.add_argument(
        "--progress-topic",
        default=DEFAULT_PROGRESS_TOPIC,
        help="compacted topic of restore progress on the target",
    )


def target_from_args(args: argparse.Namespace, source: KafkaConnection) -> TargetCluster:
    """The target: ``--target-bootstrap`` with the target's own security settings, or, without
    either, the source cluster as it is configured (PROCESSOR_BOOTSTRAP_SERVERS and its security)."""
    values: dict[str, str] = {f: os.environ[n] for f, n in TARGET_ENV_NAMES.items() if os.environ.get(n)}
    values.update({field: getattr(args, opt) for opt, field in _TARGET_OPTIONS.items() if getattr(args, opt)})
    bootstrap = args.target_bootstrap or os.environ.get(TARGET_BOOTSTRAP_ENV) or None
    if bootstrap is None and not values:
        return TargetCluster(source)
    security = KafkaSecurity.from_values(values, TARGET_ENV_NAMES)
    return TargetCluster(KafkaConnection(bootstrap or source.bootstrap_servers, security))


def default_restore_id(topic: str, to_topic: str) -> str:
    name = f"{topic}.{to_topic}"
    return name if len(name) <= 200 else f"{topic[:100]}.{hashlib.sha256(name.encode()).hexdigest()[:32]}"


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "restore",
        help="restore archived records into a topic (this cluster or another), exactly once",
        description="Restore archived records into a topic, keeping keys, values, headers, timestamps "
        "and partitions. Killed and run again with the same arguments, it continues with no duplicate "
        "and no gap.",
    )
    p.add_argument("--topic", required=True, help="the archived (source) topic")
    p.add_argument("--partition", type=int, help="only this source partition")
    p.add_argument("--to-topic", help="the target topic (default: the source topic's name)")
    start = p.add_mutually_exclusive_group()
    start.add_argument("--from-offset", type=int, help="first source offset to restore")
    start.add_argument("--from-time", type=timestamp_ms, help="from the first record at or after this time")
    end = p.add_mutually_exclusive_group()
    end.add_argument("--to-offset", type=int, help="stop before this source offset")
    end.add_argument(
        "--to-time", type=timestamp_ms, help="stop before the first record at or after this time"
    )
    add_target_arguments(p)
    p.add_argument(
        "--partitioner",
        choices=PARTITIONERS,
        default="same",
        help="same: each record to its source partition's number (default); modulo: source partition mod "
        "the target's partition count, for a target with fewer partitions",
    )
    p.add_argument("--restore-id", help="names the restore and its progress (default: SOURCE.TARGET)")
    p.add_argument("--transaction-records", type=int, default=DEFAULT_TRANSACTION_RECORDS)
    p.add_argument("--transaction-ms", type=int, default=DEFAULT_TRANSACTION_MS)
    p.add_argument("--max-bytes-per-second", type=int, help="rate limit: key + value + header bytes a second")
    p.add_argument("--max-records-per-second", type=int, help="rate limit: records a second")
    p.add_argument(
        "--max-batch-bytes",
        type=int,
        default=DEFAULT_MAX_BATCH_BYTES,
        help="the largest batch sent (the target's max.message.bytes; default 1 MiB): larger archived "
        "batches are split",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="read and count what would be restored; produce nothing"
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=cmd_restore)


def request_from_args(args: argparse.Namespace, source: KafkaConnection) -> RestoreRequest:
    topic = validate_topic(args.topic)
    target = target_from_args(args, source)
    if args.to_topic is None and target.bootstrap_servers == source.bootstrap_servers:
        raise ConfigError(
            f"restoring {topic} into the cluster it was archived from needs --to-topic "
            f"(give --to-topic {topic} "
            "to write into the topic itself)"
        )
    to_topic = validate_topic(args.to_topic or topic)
    if args.partition is not None and args.partition < 0:
        raise ConfigError("--partition must be >= 0")
    for name in (
        "transaction_records",
        "transaction_ms",
        "max_bytes_per_second",
        "max_records_per_second",
        "max_batch_bytes",
    ):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    options = RestoreOptions(
        max_batch_bytes=args.max_batch_bytes,
        transaction_records=args.transaction_records,
        transaction_ms=args.transaction_ms,
        max_bytes_per_second=args.max_bytes_per_second,
        max_records_per_second=args.max_records_per_second,
    )
    return RestoreRequest(
        topic,
        args.partition,
        to_topic,
        range_from(args.from_offset, args.from_time),
        range_to(args.to_offset, args.to_time),
        args.partitioner,
        validate_restore_id(args.restore_id or default_restore_id(topic, to_topic)),
        validate_topic(args.progress_topic),
        target,
        options,
        args.dry_run,
    )


def print_summary(summary: RestoreSummary) -> None:
    verb = "would restore" if summary.dry_run else "restored"
    for p in summary.partitions:
        resumed = "" if p.resumed_from is None else f" (continued at {p.resumed_from})"
        print(
            f"{summary.source_topic}-{p.source_partition} -> {summary.target_topic}-{p.target_partition}: "
            f"{verb} {p.records} records, {p.bytes} bytes; offsets {p.start}..{p.stop - 1}, "
            f"next {p.next_source_offset}{resumed}"
        )
    rate = (
        f", {summary.records / summary.seconds:,.0f} records/s" if summary.seconds and summary.records else ""
    )
    print(
        f"{verb} {summary.records} records ({summary.bytes} bytes) of {summary.source_topic} into "
        f"{summary.target_topic} at {summary.target} in {summary.seconds:.1f} s{rate}"
    )


def archive_store(settings: Settings) -> str:
    """The archive's bucket or container as a restore's progress records name it (a rerun must read
    the same one): an S3 bucket by its name, as always; a GCS bucket as ``gs://BUCKET``, an Azure
    container as ``azure://CONTAINER`` (never its account's credentials)."""
    if settings.storage == "gcs":
        return f"gs://{settings.gcs_bucket}"
    if settings.storage == "azure":
        return f"azure://{settings.azure_container}"
    return settings.s3_bucket


def cmd_restore(args: argparse.Namespace) -> int:
    settings = load_settings()
    request = request_from_args(args, settings.kafka)
    # the whole topic's metadata, also for one partition: a target topic created here gets the
    # source's partition count
    side = open_read_side(settings, request.topic, None)
    try:
        prepared = PreparedRestore(
            request,
            ArchiveTopic(side.reader, side.follower.cache, request.topic),
            archive_store(settings),
            settings.s3_prefix,
        )
        try:
            verb = "counting" if request.dry_run else "restoring"
            with progress(f"{verb} {request.topic} (source offsets)", prepared.total_offsets) as bar:
                summary = prepared.execute(bar)
        finally:
            prepared.close()
    finally:
        side.close()
    if args.json:
        print(json.dumps(summary.to_json()))
    else:
        print_summary(summary)
    return 0 if all(p.next_source_offset >= p.stop for p in summary.partitions) else 1
