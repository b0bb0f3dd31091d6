"""``processor erase --topic T (--key K... | --key-file F) [--key-encoding E] [--partition P]
[--dry-run] [--json]``: rewrite every archived segment of a topic that holds a record with one of the
keys into one without them (processor/rewrite/erase_runner.py).

Keys are input: given on the command line or in a file (one a line; blank lines skipped), in UTF-8
text, hex or base64 (``--key-encoding``), checked here and only here (at most MAX_KEYS keys of at most
MAX_KEY_BYTES bytes each, none empty, a key file at most MAX_KEY_FILE_BYTES), every problem named
with its line. Per partition the command takes an ``ADMIN`` claim (workers leading the partition
pause their copies until it is released, as for merge), deletes what an earlier run left (resumable
after a kill), then rewrites. It writes an audit trail to the bucket (processor/rewrite/erase_audit.py:
keyed hashes of the keys, never the keys) and reports segments rewritten and records removed.
Idempotent: a second run changes nothing. ``--dry-run`` reads and counts and writes nothing; like
the erasure it refuses to run without the erasure secret (PROCESSOR_ERASURE_SECRET): it previews the
erasure, which needs it, and without it no key filter can be used, so every segment would be read.

Only archived segments are erased: records the broker still holds are the broker's (a compacted
topic's tombstone, DeleteRecords, its retention); records of the keys it copies later are archived
as they come (run the command again once the broker no longer holds them).
"""

from __future__ import annotations

import argparse
import base64
import binascii
import dataclasses
import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any

from processor.config import Settings, load_settings
from processor.errors import ConfigError, FencedWriterError, ProcessorError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.rewrite.erase_audit import audit_object_key, audit_record
from processor.rewrite.erase_runner import EraseReport, erase_partition
from processor.segment.batch_rewrite import erasing
from processor.segment.object_keys import validate_topic
from processor.wiring.deletion_context import DeletionContext, open_context
from processor.wiring.erasure import audit_key, key_filter_secret
from processor.wiring.rewrite import FilterStats, erase_builder, key_filter_lookup, rewrite_copier

log = logging.getLogger(__name__)

HELP = "erase records by key from a topic's archived segments (rewrites them; audited; --dry-run first)"

MAX_KEYS = 1_000_000
MAX_KEY_BYTES = 1024 * 1024  # Kafka's default message.max.bytes: no key can be longer
MAX_KEY_FILE_BYTES = 256 * 1024 * 1024
ENCODINGS = ("utf-8", "hex", "base64")


def decode_key(text: str, encoding: str, where: str) -> bytes:
    """One key as given (``where`` names it in an error). Raises ConfigError."""
    try:
        if encoding == "hex":
            key = bytes.fromhex(text)
        elif encoding == "base64":
            key = base64.b64decode(text, validate=True)
        else:
            key = text.encode("utf-8")
    except (ValueError, binascii.Error) as exc:
        raise ConfigError(f"{where}: not {encoding}: {exc}") from None
    if not key:
        raise ConfigError(f"{where}: an empty key (erasure names keys; a null key is never erased)")
    if len(key) > MAX_KEY_BYTES:
        raise ConfigError(f"{where}: {len(key)} bytes, longer than any Kafka key ({MAX_KEY_BYTES})")
    return key


def read_keys(keys: list[str], key_file: Path | None, encoding: str) -> list[bytes]:
    """The keys to erase, each once, in the order given. Raises ConfigError naming what is wrong."""
    out = [decode_key(k, encoding, f"--key {k[:40]!r}") for k in keys]
    if key_file is not None:
        try:
            size = key_file.stat().st_size
            if size > MAX_KEY_FILE_BYTES:
                raise ConfigError(f"--key-file {key_file}: {size} bytes, more than {MAX_KEY_FILE_BYTES}")
            raw = key_file.read_bytes()
        except OSError as exc:
            raise ConfigError(f"--key-file {key_file}: {exc.strerror or exc}") from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(
                f"--key-file {key_file}: not UTF-8 at byte {exc.start} "
                "(binary keys: --key-encoding hex or base64)"
            ) from None
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                out.append(decode_key(line, encoding, f"--key-file {key_file} line {number}"))
            if len(out) > MAX_KEYS:
                raise ConfigError(f"more than {MAX_KEYS} keys: erase them in several runs")
    unique = list(dict.fromkeys(out))
    if not unique:
        raise ConfigError("no key to erase: give --key or --key-file")
    if len(unique) > MAX_KEYS:
        raise ConfigError(f"more than {MAX_KEYS} keys: erase them in several runs")
    return unique


def _report_json(report: EraseReport) -> dict[str, Any]:
    return {
        **{k: v for k, v in dataclasses.asdict(report).items() if k != "tp"},
        "partition": report.tp.partition,
    }


def cmd_erase(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    keys = read_keys(args.key or [], args.key_file, args.key_encoding)
    if args.dry_run and settings.erasure_secret is None:
        raise ConfigError(
            "PROCESSOR_ERASURE_SECRET is not set: the erasure refuses to run without it, and so does its "
            "dry run (without it no key filter can be used: every archived segment would be read); "
            "set the workers' value here"
        )
    hash_key = None if args.dry_run else audit_key(settings)  # no secret: refused before any work
    ctx = open_context(settings, topic)
    stats = FilterStats()
    reports: list[EraseReport] = []
    erasure_id = uuid.uuid4().hex
    started = int(time.time() * 1000)
    try:
        partitions = sorted(ctx.partitions_of(topic), key=lambda tp: tp.partition)
        if args.partition is not None:
            partitions = [tp for tp in partitions if tp.partition == args.partition]
        if hash_key is not None:
            _audit(ctx, settings, topic, keys, hash_key, erasure_id, started, "started", [])
        for tp in partitions:
            reports.append(erase_one(ctx, settings, tp, keys, stats, args.dry_run))
        if hash_key is not None:
            _audit(ctx, settings, topic, keys, hash_key, erasure_id, started, "finished", reports)
    finally:
        ctx.close()
    failed = sum(len(r.failed) for r in reports)
    if args.json:
        print(
            json.dumps(
                {
                    "topic": topic,
                    "dry_run": args.dry_run,
                    "erasure_id": None if args.dry_run else erasure_id,
                    "keys": len(keys),
                    "segments_rewritten": sum(r.rewritten for r in reports),
                    "records_removed": sum(r.records_removed for r in reports),
                    "segments_without_key_filter": stats.missing,
                    "key_filters_unusable": stats.unusable,
                    "partitions": [_report_json(r) for r in reports],
                }
            )
        )
    else:
        verb = "would be erased" if args.dry_run else "erased"
        for r in reports:
            print(
                f"{topic}-{r.tp.partition}: {r.records_removed} records {verb} from {r.rewritten} segments "
                f"({r.scanned} of {r.segments} read, {r.skipped_by_filter} skipped by their key filter)"
            )
            for problem in r.failed:
                print(f"  failed: {problem}")
        if stats.missing or stats.unusable:
            print(f"{stats.missing} segments had no key filter, {stats.unusable} an unusable one: read whole")
        if not args.dry_run:
            print(f"audit trail: erasure {erasure_id}")
    if failed:
        raise ProcessorError(f"{failed} segment(s) or deletion(s) failed; run the command again")
    return 0


def erase_one(
    ctx: DeletionContext,
    settings: Settings,
    tp: TopicPartition,
    keys: list[bytes],
    stats: FilterStats,
    dry_run: bool,
    filters: bool = True,
) -> EraseReport:
    """One partition's erasure under an ADMIN claim (none for a dry run). ``filters=False``: every
    segment read, whatever its key filter says (the benchmark's baseline)."""
    secret = key_filter_secret(settings) if filters else None
    lookup = key_filter_lookup(ctx.storage, secret, keys, stats)
    answers: dict[uuid.UUID, bool] = {}

    def may_hold(segment: RemoteLogSegmentMetadata) -> bool:  # each filter read once a run
        sid = segment.segment_id.id
        if sid not in answers:
            answers[sid] = lookup(segment)
        return answers[sid]

    build = erase_builder(settings, ctx.storage, ctx.keys, erasing(keys))
    if dry_run:
        return erase_partition(tp, lambda: ctx.state(tp), None, may_hold, build, None, None)
    state = ctx.state(tp)
    served = state.finished()
    if not state.rewritten() and not any([may_hold(s) for s in served]):
        # every filter says no: nothing to rewrite, no claim taken (the workers are not paused)
        return EraseReport(tp, segments=len(served), skipped_by_filter=len(served))
    epoch = ctx.claim(tp)  # workers leading tp stop writing it until the claim is released
    log.info(
        "%s: taken from the worker leading it with an operator claim (epoch %d) for this erasure; "
        "handed back when it is done",
        tp,
        epoch,
    )
    try:
        lineage = ctx.state(tp).lineage
        copier = rewrite_copier(settings, ctx, {tp.topic: lineage.topic_id} if lineage.topic_id else {})
        return erase_partition(
            tp, lambda: ctx.state(tp), epoch, may_hold, build, copier, ctx.deleter.delete_superseded
        )
    except FencedWriterError as exc:
        return EraseReport(tp, failed=[str(exc)])
    finally:
        ctx.release(tp)
        log.info("%s: operator claim %d released: the worker Faust assigns it claims it again", tp, epoch)


def _audit(
    ctx: DeletionContext,
    settings: Settings,
    topic: str,
    keys: list[bytes],
    hash_key: bytes,
    erasure_id: str,
    started: int,
    stage: str,
    reports: list[EraseReport],
) -> None:
    finished = int(time.time() * 1000) if stage == "finished" else None
    body = audit_record(
        stage=stage,
        erasure_id=erasure_id,
        topic=topic,
        keys=keys,
        audit_key=hash_key,
        started_ms=started,
        finished_ms=finished,
        reports=reports,
    )
    ctx.storage.create(audit_object_key(ctx.keys.prefix, topic, started, erasure_id, stage), [body])


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("erase", help=HELP)
    p.add_argument("--topic", required=True)
    p.add_argument("--key", action="extend", nargs="+", metavar="K", help="a key to erase (repeatable)")
    p.add_argument("--key-file", type=Path, help="keys to erase, one a line (blank lines skipped)")
    p.add_argument(
        "--key-encoding", choices=ENCODINGS, default="utf-8", help="how keys are written (default utf-8)"
    )
    p.add_argument("--partition", type=int, help="only this partition (default: every one)")
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="count what would be erased; write nothing (needs the secret too)",
    )
    p.add_argument("--json", action="store_true", help="one JSON report on stdout")
    p.set_defaults(func=cmd_erase)
