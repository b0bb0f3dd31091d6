"""The audit's checks of the objects behind the metadata, and of the source topic. No pyspark: the
segment checks run inside Spark tasks (``processor.spark.audit.run``), the rest on the driver.

Per segment (``segment_findings``): the project's one segment check
(:func:`processor.reader.segment_check.check_segment`, sampled blocks or, with ``full_crc``, every
block), its problems as findings of the same kinds, every request and byte counted.

On the driver: ``orphan_findings`` (objects under the prefix no listed segment references as its
data, index or manifest; objects are listed before the metadata is read, so a copy starting in
between cannot look orphaned), ``manifest_findings`` (``missing_manifest``: a served segment
finished longer ago than the grace has no manifest, so the bucket alone could not rebuild it) and
``lag_findings`` (``offload_lag``: the topic holds more than ``max_lag_records`` past the archive;
``expired_before_offload``: the topic's log start is above the archive's end, so records expired
from Kafka before they were offloaded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from processor.kafka.partition import TopicPartition
from processor.metadata.manifest import manifest_key
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.segment_check import check_segment
from processor.reader.segment_keys import NO_DECRYPTION, SegmentDecryption
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.audit.rules import Finding, segment_finding, segment_scope
from processor.spark.fold_adapter import PartitionArchive
from processor.storage.chunk_storage import ChunkStorage


@dataclass
class ScrubStats:
    segments: int = 0
    requests: int = 0
    bytes_read: int = 0
    encrypted: int = 0  # of the segments checked, sealed under data keys of their own

    def add(self, other: ScrubStats) -> None:
        self.segments += other.segments
        self.requests += other.requests
        self.bytes_read += other.bytes_read
        self.encrypted += other.encrypted


def segment_findings(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    seg: RemoteLogSegmentMetadata,
    *,
    full_crc: bool = False,
    sample_blocks: int = 3,
    decryption: SegmentDecryption = NO_DECRYPTION,
) -> tuple[list[Finding], ScrubStats]:
    found = check_segment(
        storage,
        keys,
        seg,
        "all" if full_crc else "sample",
        sample_blocks=sample_blocks,
        decryption=decryption,
    )
    scope = segment_scope(str(seg.segment_id.id))
    findings = [segment_finding(p.kind, seg, p.detail, scope, p.object_key) for p in found.problems]
    return findings, ScrubStats(1, found.requests, found.bytes_read, int(found.encrypted))


def list_objects(storage: ChunkStorage, keys: ObjectKeyFactory) -> tuple[list[str], int]:
    """Every object key under the prefix, and the LIST requests it took (1000 keys a page)."""
    listed = [c.key for c in storage.list(keys.prefix + "/" if keys.prefix else "")]
    return listed, max(1, -(-len(listed) // 1000))


def _tp_of(keys: ObjectKeyFactory, key: str) -> TopicPartition | None:
    rest = key[len(keys.prefix) + 1 :] if keys.prefix else key
    parts = rest.split("/")
    if len(parts) >= 3 and parts[1].isdigit():
        return TopicPartition(parts[0], int(parts[1]))
    return None


def orphan_findings(
    keys: ObjectKeyFactory, listed: Iterable[str], archives: Iterable[PartitionArchive]
) -> list[Finding]:
    referenced = {
        k
        for a in archives
        for s in a.listed
        for k in (s.data_object_key, s.index_object_key, manifest_key(s.data_object_key))
    }
    out: list[Finding] = []
    for key in listed:
        if key not in referenced and not keys.in_side_folder(key):
            tp = _tp_of(keys, key)
            out.append(
                Finding(
                    key=f"orphan_object:{key}",
                    kind="orphan_object",
                    scope="objects",
                    detail=f"no listed segment references {key}",
                    topic=tp.topic if tp else None,
                    partition=tp.partition if tp else None,
                    object_key=key,
                )
            )
    return out


def manifest_findings(
    listed: Iterable[str], archives: Iterable[PartitionArchive], now_ms: int, grace_ms: int
) -> list[Finding]:
    """Served segments whose manifest is not in the listing. A manifest is written just after its
    segment's FINISHED is accepted (and the partition's owner writes missing ones once per claim),
    so only segments that finished more than ``grace_ms`` before the pass count."""
    present = set(listed)
    out: list[Finding] = []
    for a in archives:
        for s in a.served:
            key = manifest_key(s.data_object_key)
            if key in present or s.event_timestamp_ms > now_ms - grace_ms:
                continue
            out.append(
                Finding(
                    key=f"missing_manifest:{s.segment_id.id}",
                    kind="missing_manifest",
                    scope="objects",
                    detail=f"{key} is missing: the bucket alone could not rebuild this segment's metadata",
                    topic=a.tp.topic,
                    partition=a.tp.partition,
                    start_offset=s.start_offset,
                    end_offset=s.end_offset,
                    segment_id=str(s.segment_id.id),
                    object_key=key,
                )
            )
    return out


def lag_findings(
    archives: Iterable[PartitionArchive],
    watermarks: Mapping[TopicPartition, tuple[int, int]],
    max_lag_records: int | None,
) -> list[Finding]:
    out: list[Finding] = []
    for a in archives:
        if a.tp not in watermarks or a.earliest is None:
            continue
        low, high = watermarks[a.tp]
        nxt = a.next_offset
        if low > nxt:
            kind, last = "expired_before_offload", low - 1
            detail = (
                f"offsets {nxt}..{low - 1} expired from Kafka (log start {low}) before they were "
                f"offloaded (the archive ends at {nxt - 1})"
            )
        elif max_lag_records is not None and high - nxt > max_lag_records:
            kind, last = "offload_lag", high - 1
            detail = f"{high - nxt} records not offloaded (more than {max_lag_records})"
        else:
            continue
        out.append(
            Finding(
                key=f"{kind}:{a.tp}",
                kind=kind,
                scope="lag",
                detail=detail,
                topic=a.tp.topic,
                partition=a.tp.partition,
                start_offset=nxt,
                end_offset=last,
            )
        )
    return out
