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
from processor.config import load_settings
from processor.errors import ConfigError
from processor.leader.batch_source import SourceSecurity
from processor.restore.archive import ArchiveTopic
from processor.restore.plan import PARTITIONERS, range_from, range_to
from processor.restore.progress_record import validate_restore_id
from processor.restore.run import PreparedRestore, RestoreRequest, RestoreSummary
from processor.restore.state import DEFAULT_TRANSACTION_MS, DEFAULT_TRANSACTION_RECORDS, RestoreOptions
from processor.restore.target import DEFAULT_PROGRESS_TOPIC, TargetCluster
from processor.segment.object_keys import validate_topic
from processor.wiring.read_side import open_read_side

TARGET_PASSWORD_ENV = "PROCESSOR_TARGET_SASL_PASSWORD"


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


def add_target_arguments(p: argparse.ArgumentParser) -> None:
    """The target cluster and its security settings (the password comes from the environment)."""
    p.add_argument("--target-bootstrap", help="the target cluster (default: PROCESSOR_BOOTSTRAP_SERVERS)")
    p.add_argument(
        "--target-security-protocol",
        default="PLAINTEXT",
        choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
    )
    p.add_argument(
        "--target-sasl-mechanism", default="PLAIN", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
    )
    p.add_argument(
        "--target-sasl-username", help=f"SASL user of the target (password: ${TARGET_PASSWORD_ENV})"
    )
    p.add_argument("--target-ssl-cafile", help="CA bundle for the target's TLS")
    p.add_argument(
        "--progress-topic",
        default=DEFAULT_PROGRESS_TOPIC,
        help="compacted topic of restore progress on the target",
    )


def target_from_args(args: argparse.Namespace, default_bootstrap: str) -> TargetCluster:
    security = SourceSecurity(
        args.target_security_protocol,
        args.target_sasl_mechanism,
        args.target_sasl_username,
        os.environ.get(TARGET_PASSWORD_ENV),
        args.target_ssl_cafile,
    )
    try:
        security.client_kwargs()
    except ConfigError as exc:
        raise ConfigError(
            f"target security: {exc} (for the target: --target-sasl-username, ${TARGET_PASSWORD_ENV})"
        ) from None
    return TargetCluster(args.target_bootstrap or default_bootstrap, security)


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
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a librdkafka producer setting for the target, e.g. compression.type=zstd (repeatable)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="read and count what would be restored; produce nothing"
    )
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=cmd_restore)


# What the restore's exactly-once guarantee rests on, or what other options set: not overridable.
RESERVED_PROPERTIES = (
    "transactional.id",
    "enable.idempotence",
    "acks",
    "bootstrap.servers",
    "transaction.timeout.ms",
)


def producer_properties(items: list[str]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    for item in items:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"--producer-property {item!r}: expected KEY=VALUE")
        if key in RESERVED_PROPERTIES or key.startswith(("security.", "sasl.", "ssl.")):
            raise ConfigError(
                f"--producer-property {key}: set by the restore itself (transactions, --target-* options)"
            )
        out.append((key, value))
    return tuple(out)


def request_from_args(args: argparse.Namespace, default_bootstrap: str) -> RestoreRequest:
    topic = validate_topic(args.topic)
    target = target_from_args(args, default_bootstrap)
    if args.to_topic is None and target.bootstrap_servers == default_bootstrap:
        raise ConfigError(
            f"restoring {topic} into the cluster it was archived from needs --to-topic "
            f"(give --to-topic {topic} "
            "to write into the topic itself)"
        )
    to_topic = validate_topic(args.to_topic or topic)
    if args.partition is not None and args.partition < 0:
        raise ConfigError("--partition must be >= 0")
    for name in ("transaction_records", "transaction_ms", "max_bytes_per_second", "max_records_per_second"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')} must be at least 1")
    options = RestoreOptions(
        producer_properties=producer_properties(args.producer_property),
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
        f"{summary.target_topic} at {summary.target_bootstrap} in {summary.seconds:.1f} s{rate}"
    )


def cmd_restore(args: argparse.Namespace) -> int:
    settings = load_settings()
    request = request_from_args(args, settings.bootstrap_servers)
    # the whole topic's metadata, also for one partition: a target topic created here gets the
    # source's partition count
    side = open_read_side(settings, request.topic, None)
    try:
        prepared = PreparedRestore(
            request,
            ArchiveTopic(side.reader, side.follower.cache, request.topic),
            settings.s3_bucket,
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
