"""``processor rekey --topic T [--json]``: re-wrap the data keys of T's encrypted segments under the
key new segments of T get now (its own key, else the default: ``processor keyring new``, or
PROCESSOR_KMS_KEY_ID / PROCESSOR_KMS_TOPIC_KEY_IDS), without rewriting any data.

Data keys live wrapped in each segment's metadata (KIP-405 custom metadata) and its manifest. Per
partition, segments already under the current key are left alone (so the command is idempotent,
and a run that stopped half way is resumed by running it again); for the others the command takes
the partition with an ADMIN claim (workers leading it pause their copies until it is released, as
for delete-before), publishes the segment's COPY_SEGMENT_FINISHED again with the re-wrapped key,
confirms the readers accepted it, then replaces the manifest. The old key must stay available until
the command reports no segment left under it; with KMS the re-wrapping happens inside KMS
(ReEncrypt: the data key never leaves it).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from processor.commands.progress import progress
from processor.config import load_settings
from processor.crypto.keys import KeyProvider, WrappedKey
from processor.errors import ConfigError, FencedWriterError, ObjectNotFoundError, ProcessorError
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for
from processor.metadata.manifest import SegmentManifest, decode_manifest, encode_manifest, manifest_key
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.reader.segment_keys import encryption_context
from processor.segment.object_keys import validate_topic
from processor.wiring.deletion_context import DeletionContext, open_context
from processor.wiring.encryption import segment_encryption

log = logging.getLogger(__name__)

CONFIRM_TIMEOUT_S = 60.0


@dataclass
class RekeyReport:
    topic: str
    key_id: str = ""  # what new data keys of the topic are wrapped under
    segments: int = 0  # encrypted finished segments seen
    rewrapped: int = 0
    already_current: int = 0
    plaintext: int = 0  # stored in the clear: nothing to re-wrap
    failed: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "done": not self.failed}


def _pending(
    provider: KeyProvider, segments: list[RemoteLogSegmentMetadata], report: RekeyReport
) -> list[tuple[RemoteLogSegmentMetadata, WrappedKey]]:
    """Segments whose data key is not under the current key, with the key re-wrapped."""
    todo = []
    for seg in segments:
        if seg.custom_metadata is None:
            report.plaintext += 1
            continue
        report.segments += 1
        wrapped = WrappedKey.decode(seg.custom_metadata, where=f"custom metadata of {seg.segment_id}")
        new = provider.rewrap(wrapped, encryption_context(seg.segment_id))
        if new is wrapped:
            report.already_current += 1
        else:
            todo.append((seg, new))
    return todo


def _replace_manifest(ctx: DeletionContext, seg: RemoteLogSegmentMetadata, custom: bytes) -> None:
    """The manifest with the re-wrapped key (its claim and writer as they were, for the rebuild). A
    crash between the delete and the create leaves it missing: the partition's owner writes missing
    manifests from the metadata, which has the new key."""
    key = manifest_key(seg.data_object_key)
    try:
        old = decode_manifest(ctx.storage.read_all(key), where=key)
    except ObjectNotFoundError:
        old = SegmentManifest(seg, None)
    body = encode_manifest(
        SegmentManifest(dataclasses.replace(old.segment, custom_metadata=custom), old.claim_id)
    )
    ctx.storage.delete(key)
    ctx.storage.create(key, [body])


def rekey_partition(
    ctx: DeletionContext, provider: KeyProvider, tp: TopicPartition, report: RekeyReport, advance: Any
) -> None:
    todo = _pending(provider, ctx.state(tp).finished(), report)
    if not todo:
        return
    epoch = ctx.claim(tp)
    part = metadata_partition_for(tp, ctx.metadata_partitions)
    try:
        for seg, new in todo:
            current = ctx.state(tp).accepted_state(seg)
            if (
                current is None
                or current.state is not SegmentState.COPY_SEGMENT_FINISHED
                or current.custom_metadata != seg.custom_metadata
            ):
                continue  # being deleted (retention) or re-wrapped since: nothing to do
            record = dataclasses.replace(
                current,
                custom_metadata=new.encode(),
                writer_id=ctx.writer_id,
                writer_epoch=epoch,
                event_timestamp_ms=int(time.time() * 1000),
                replaces_state=None,
            )
            offset = ctx.publisher.publish(record)
            accepted = ctx.follower.materializer.outcome(part, offset, CONFIRM_TIMEOUT_S)
            if accepted is not True:
                why = "rejected" if accepted is False else "not confirmed in time"
                report.failed.append({"segment_id": str(seg.segment_id.id), "problem": why})
                continue
            _replace_manifest(ctx, current, record.custom_metadata or b"")
            report.rewrapped += 1
            advance()
    finally:
        ctx.release(tp)


def cmd_rekey(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    provider = segment_encryption(settings)
    if provider is None:
        raise ConfigError("rekey needs the key provider new segments use: set PROCESSOR_ENCRYPTION")
    report = RekeyReport(topic, key_id=provider.current_key_id(topic))
    ctx = open_context(settings, topic)
    try:
        partitions = sorted(ctx.partitions_of(topic), key=lambda tp: tp.partition)
        with progress(
            f"re-wrapping {topic}'s data keys", None, enabled=False if args.json else None
        ) as advance:
            for tp in partitions:
                try:
                    rekey_partition(ctx, provider, tp, report, advance)
                except FencedWriterError as exc:
                    report.failed.append({"partition": tp.partition, "problem": str(exc)})
    finally:
        ctx.close()
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(
            f"{topic}: {report.rewrapped} data keys re-wrapped under {report.key_id}, "
            f"{report.already_current} already under it, {report.plaintext} segments in the clear"
        )
        for failure in report.failed:
            print(f"  not re-wrapped: {failure}")
    if report.failed:
        raise ProcessorError(f"{len(report.failed)} segment(s) or partition(s) not re-wrapped; run it again")
    return 0


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "rekey",
        help="re-wrap a topic's data keys under its current key (no data rewritten; resumable)",
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--json", action="store_true", help="one JSON report on stdout")
    parser.set_defaults(func=cmd_rekey)
