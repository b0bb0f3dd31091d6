"""The audit's checks of the objects behind the metadata, and of the source topic. No pyspark: the
segment checks run inside Spark tasks (``processor.spark.audit``), the rest on the driver.

Per segment (``check_segment``), every request and byte counted:
- ``missing_object``: the data or index object is gone (HEAD);
- ``size_mismatch``: an object's size is not the one the metadata records;
- ``crc_mismatch``: the index, or a block, fails its CRCs (the project's block reader checks them
  all, header and payload, and each record batch's CRC-32C);
- ``truncated_object``: a read ran past the object's end (an object cut short is a finding, never
  the end of the audit);
- ``count_mismatch`` / ``timestamp_mismatch``: the index's record count or maximum timestamp is not
  the metadata's, or a block holds more rows than its index entry's offsets or a later timestamp;
  with ``full_crc`` every block is read and the segment's totals are compared too (control
  batches count in the index and decode to no row, so fewer rows or earlier times are no finding).
Sampled mode reads the index and ``sample_blocks`` blocks (first, last, spread between); full-CRC
mode reads the whole data object.

On the driver: ``orphan_findings`` (objects under the prefix no listed segment references; objects
are listed before the metadata is read, so a copy starting in between cannot look orphaned) and
``lag_findings`` (``offload_lag``: the topic holds more than ``max_lag_records`` past the archive;
``expired_before_offload``: the topic's log start is above the archive's end, so records expired
from Kafka before they were offloaded).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from processor.errors import CorruptObjectError, InvalidRangeError, SegmentObjectMissingError, StorageError
from processor.metadata.model import RemoteLogSegmentMetadata, TopicPartition
from processor.reader.segment_blocks import read_block_range_columns, read_segment_index
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.audit_rules import Finding, segment_finding, segment_scope
from processor.spark.fold_adapter import PartitionArchive
from processor.storage.chunk_storage import ChunkStorage


@dataclass
class ScrubStats:
    segments: int = 0
    requests: int = 0
    bytes_read: int = 0

    def add(self, other: ScrubStats) -> None:
        self.segments += other.segments
        self.requests += other.requests
        self.bytes_read += other.bytes_read


@dataclass
class SegmentCheck:
    findings: list[Finding] = field(default_factory=list)
    stats: ScrubStats = field(default_factory=ScrubStats)


def sample(count: int, sample_blocks: int) -> list[int]:
    """Block numbers to read: all of a small segment, else first, last and spread between."""
    if count <= sample_blocks:
        return list(range(count))
    step = (count - 1) / (sample_blocks - 1)
    return sorted({round(i * step) for i in range(sample_blocks)})


def _finding(kind: str, seg: RemoteLogSegmentMetadata, detail: str, object_key: str | None = None) -> Finding:
    return segment_finding(kind, seg, detail, segment_scope(str(seg.segment_id.id)), object_key)


def check_segment(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    seg: RemoteLogSegmentMetadata,
    *,
    full_crc: bool = False,
    sample_blocks: int = 3,
) -> SegmentCheck:
    out = SegmentCheck()
    out.stats.segments = 1
    for key, wanted in (
        (seg.data_object_key, seg.segment_size_in_bytes),
        (seg.index_object_key, seg.index_size_in_bytes),
    ):
        out.stats.requests += 1
        stored = storage.stat(key)
        if stored is None:
            out.findings.append(_finding("missing_object", seg, f"missing: {key}", key))
            return out
        if stored.size != wanted:
            kind = "truncated_object" if stored.size < wanted else "size_mismatch"
            detail = f"{key} holds {stored.size} bytes; the metadata says {wanted}"
            out.findings.append(_finding(kind, seg, detail, key))
    if out.findings:
        return out  # its blocks cannot be where the index says
    try:
        out.stats.requests += 1
        out.stats.bytes_read += seg.index_size_in_bytes
        index = read_segment_index(storage, keys, seg)
        if index.record_count != seg.record_count:
            out.findings.append(
                _finding(
                    "count_mismatch",
                    seg,
                    f"the index counts {index.record_count} records; the metadata {seg.record_count}",
                )
            )
        if index.max_timestamp != seg.max_timestamp_ms:
            out.findings.append(
                _finding(
                    "timestamp_mismatch",
                    seg,
                    f"the index's largest timestamp is {index.max_timestamp}; the metadata's "
                    f"{seg.max_timestamp_ms}",
                )
            )
        chosen = (
            list(range(len(index.blocks))) if full_crc else sample(len(index.blocks), max(2, sample_blocks))
        )
        runs = [chosen] if full_crc else [[n] for n in chosen]  # full: one ranged GET of every block
        rows, largest = 0, -1
        for run in runs:
            blocks = [index.blocks[n] for n in run]
            out.stats.requests += 1
            out.stats.bytes_read += sum(b.length for b in blocks)
            for number, info, cols in zip(
                run,
                blocks,
                read_block_range_columns(storage, seg.data_object_key, str(seg.segment_id), blocks, run[0]),
                strict=True,
            ):
                top = max(cols.timestamps, default=-1)
                rows += len(cols)
                largest = max(largest, top)
                too_many = len(cols) > info.last_offset - info.first_offset + 1
                if too_many or top > info.max_timestamp:
                    out.findings.append(
                        _finding(
                            "count_mismatch" if too_many else "timestamp_mismatch",
                            seg,
                            f"block {number} holds {len(cols)} rows up to timestamp {top}; its index "
                            f"entry says offsets {info.first_offset}..{info.last_offset} up to "
                            f"{info.max_timestamp}",
                        )
                    )
        # Control batches (transaction markers) count in the index but decode to no row: the blocks
        # may hold fewer rows and earlier timestamps than the metadata, never more or later.
        if full_crc and (rows > seg.record_count or largest > seg.max_timestamp_ms):
            out.findings.append(
                _finding(
                    "count_mismatch" if rows > seg.record_count else "timestamp_mismatch",
                    seg,
                    f"the blocks hold {rows} records up to timestamp {largest}; the metadata says "
                    f"{seg.record_count} up to {seg.max_timestamp_ms}",
                )
            )
    except SegmentObjectMissingError as exc:
        out.findings.append(_finding("missing_object", seg, str(exc), exc.object_key))
    except CorruptObjectError as exc:
        out.findings.append(_finding("crc_mismatch", seg, str(exc), exc.object_key))
    except InvalidRangeError as exc:
        out.findings.append(_finding("truncated_object", seg, str(exc), exc.key))
    except StorageError:
        raise  # the store is unreachable: not a finding about this segment
    return out


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
    referenced = {k for a in archives for s in a.listed for k in (s.data_object_key, s.index_object_key)}
    out: list[Finding] = []
    for key in listed:
        if key not in referenced:
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
