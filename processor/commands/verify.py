"""``processor verify --topic T [--partition P]``: does the bucket hold what the metadata says?

For every partition of the topic (or the one given) it compares the follower's view of the metadata
topic with a listing of the partition's prefix in the bucket and reports:

- ``missing``: a COPY_SEGMENT_FINISHED segment whose data or index object is absent (data loss for
  readers) or has another size than the metadata records, or whose manifest is absent (the bucket
  alone could not rebuild it; the partition's owner writes missing manifests once per claim);
- ``corrupt``: a finished segment whose index CRC differs from the metadata's, whose data blocks
  fail their CRCs or do not hold the recorded number of records, or whose manifest does not decode
  or describes another segment, or whose key filter (``-keys``, optional) does not decode;
- ``unreferenced``: objects under the partition's prefix that no live segment names (leftovers of
  failed copies or of deletions that did not finish: storage that costs and serves nobody).

Segments in COPY_SEGMENT_STARTED or DELETE_SEGMENT_STARTED are in flight: their objects count as
referenced, and their absence is not a finding. Exit code 0 when clean, 1 when anything was found.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass, field
from typing import Any

from processor.commands.progress import progress
from processor.config import load_settings
from processor.errors import FormatError, ObjectNotFoundError
from processor.kafka.admin import check_broker, partition_counts
from processor.kafka.partition import TopicPartition
from processor.metadata.manifest import decode_manifest, manifest_key
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState
from processor.reader.segment_blocks import fetch_key_filter
from processor.reader.segment_check import check_segment
from processor.reader.segment_keys import NO_DECRYPTION, SegmentDecryption
from processor.segment.object_keys import KEY_FILTER_SUFFIX, ObjectKeyFactory, validate_topic
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.read_side import open_read_side


@dataclass
class VerifyReport:
    topic: str
    partitions: list[int] = field(default_factory=list)
    segments_checked: int = 0
    bytes_checked: int = 0
    encrypted_segments: int = 0  # of the segments checked, sealed under data keys of their own
    plaintext_segments: int = 0
    missing: list[dict[str, Any]] = field(default_factory=list)
    corrupt: list[dict[str, Any]] = field(default_factory=list)
    unreferenced: list[dict[str, Any]] = field(default_factory=list)
    # encrypted segments whose key cannot be unwrapped here (no provider, no Decrypt permission)
    key_unavailable: list[dict[str, Any]] = field(default_factory=list)
    # segments of a crypto-shredded topic: unreadable on purpose, not a problem of the archive
    shredded: list[dict[str, Any]] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not (self.missing or self.corrupt or self.unreferenced or self.key_unavailable)

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "clean": self.clean}


def check_finished(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    segment: RemoteLogSegmentMetadata,
    report: VerifyReport,
    decryption: SegmentDecryption = NO_DECRYPTION,
) -> None:
    """Check one finished segment's objects with the one checker (:func:`check_segment`): presence,
    sizes, the index, every block's CRCs (and authentication tags), the record count."""
    base = {"segment_id": str(segment.segment_id.id), "partition": segment.segment_id.partition}
    found = check_segment(storage, keys, segment, blocks="all", decryption=decryption)
    if found.encrypted:
        report.encrypted_segments += 1
    else:
        report.plaintext_segments += 1
    for problem in found.problems:
        if problem.kind in ("shredded", "key_unavailable"):
            getattr(report, problem.kind).append(
                {**base, "key": problem.object_key, "problem": problem.detail}
            )
    report.missing += [{**base, "key": key, "problem": problem} for key, problem in found.missing]
    report.corrupt += [{**base, "key": key, "problem": problem} for key, problem in found.corrupt]
    report.bytes_checked += found.bytes_read


def check_manifest(storage: ChunkStorage, segment: RemoteLogSegmentMetadata, report: VerifyReport) -> None:
    """A finished segment's manifest must be there and describe it: without it the bucket alone
    cannot rebuild the segment's metadata (processor rebuild-metadata)."""
    base = {"segment_id": str(segment.segment_id.id), "partition": segment.segment_id.partition}
    key = manifest_key(segment.data_object_key)
    try:
        manifest = decode_manifest(storage.read_all(key), where=key)
    except ObjectNotFoundError:
        report.missing.append({**base, "key": key, "problem": "manifest is missing (not rebuildable)"})
        return
    except FormatError as exc:
        report.corrupt.append({**base, "key": key, "problem": str(exc)})
        return
    if manifest.segment.segment_id.id != segment.segment_id.id or (
        manifest.segment.start_offset,
        manifest.segment.end_offset,
        manifest.segment.index_crc32,
    ) != (segment.start_offset, segment.end_offset, segment.index_crc32):
        report.corrupt.append({**base, "key": key, "problem": "manifest describes another segment"})


def verify_partition(
    storage: ChunkStorage,
    tp: TopicPartition,
    segments: list[RemoteLogSegmentMetadata],
    keys: ObjectKeyFactory,
    report: VerifyReport,
    advance: Any = None,
    decryption: SegmentDecryption = NO_DECRYPTION,
) -> None:
    listed = {
        info.key: info
        for info in storage.list(keys.topic_listing_prefix(tp.topic))
        if keys.partition_of(tp.topic, info.key) == tp.partition
    }
    referenced: set[str] = set()
    for segment in segments:
        if segment.state == SegmentState.DELETE_SEGMENT_FINISHED:
            continue
        key_filter = segment.data_object_key + KEY_FILTER_SUFFIX
        referenced.update(
            (
                segment.data_object_key,
                segment.index_object_key,
                manifest_key(segment.data_object_key),
                key_filter,
            )
        )
        if segment.state == SegmentState.COPY_SEGMENT_FINISHED:
            check_finished(storage, keys, segment, report, decryption)
            check_manifest(storage, segment, report)
            if key_filter in listed:
                check_key_filter(storage, segment, key_filter, listed[key_filter].size, report)
            report.segments_checked += 1
            if advance is not None:
                advance()
    for key, info in listed.items():
        if key not in referenced:
            report.unreferenced.append({"partition": tp.partition, "key": key, "size": info.size})


def check_key_filter(
    storage: ChunkStorage, segment: RemoteLogSegmentMetadata, key: str, size: int, report: VerifyReport
) -> None:
    """A segment's key filter, where it has one, must decode: a corrupt one costs erasures a read of
    the whole segment (they never trust it), so it is reported, not fatal to reads."""
    base = {"partition": segment.segment_id.partition, "segment": str(segment.segment_id.id)}
    try:
        fetch_key_filter(storage, segment.data_object_key, size)
    except FormatError as exc:
        problem = f"key filter: {exc} (erasure reads the segment whole)"
        report.corrupt.append({**base, "key": key, "problem": problem})


def cmd_verify(args: argparse.Namespace) -> int:
    settings = load_settings()
    topic = validate_topic(args.topic)
    side = open_read_side(settings, topic, args.partition)
    report = VerifyReport(topic)
    try:
        cache = side.follower.cache
        known = {tp.partition for tp in cache.topic_partitions() if tp.topic == topic}
        # partitions the source topic has, even if the metadata knows nothing of them (lost metadata)
        admin = check_broker(settings.kafka)
        known |= set(range(partition_counts(admin, [topic]).get(topic, 0)))
        partitions = [args.partition] if args.partition is not None else sorted(known)
        report.partitions = partitions
        keys = ObjectKeyFactory(settings.s3_prefix)
        by_partition = {p: list(cache.listed_segments(TopicPartition(topic, p))) for p in partitions}
        total = sum(
            1 for segs in by_partition.values() for s in segs if s.state == SegmentState.COPY_SEGMENT_FINISHED
        )
        with progress(f"verifying {topic}", total, enabled=None if not args.json else False) as advance:
            for p, segments in by_partition.items():
                verify_partition(
                    side.reader.storage,
                    TopicPartition(topic, p),
                    segments,
                    keys,
                    report,
                    advance,
                    side.reader.decryption,
                )
    finally:
        side.close()
    if args.json:
        print(json.dumps(report.to_json()))
    else:
        print(
            f"{topic}: {report.segments_checked} segments checked in {len(report.partitions)} partitions, "
            f"{report.bytes_checked} bytes read; {report.encrypted_segments} encrypted, "
            f"{report.plaintext_segments} in the clear"
        )
        for kind in ("missing", "corrupt", "unreferenced", "key_unavailable", "shredded"):
            for finding in getattr(report, kind):
                problem = finding.get("problem", "")
                print(f"  {kind:12} partition {finding['partition']}  {finding['key']}  {problem}")
        print("clean" if report.clean else "PROBLEMS FOUND")
    return 0 if report.clean else 1


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "verify", help="compare a topic's metadata with the bucket: missing, corrupt, unreferenced objects"
    )
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partition", type=int)
    parser.add_argument("--json", action="store_true", help="one JSON report on stdout")
    parser.set_defaults(func=cmd_verify)
