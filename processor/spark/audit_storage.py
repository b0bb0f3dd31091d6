"""The audit's checks against S3 and the source topic (driver side, no pyspark).

- ``missing_object``: a finished segment whose data or index object is gone (HEAD); one finding per
  segment, and its blocks are then not read (so no ``crc_mismatch`` for it too);
- ``crc_mismatch``: the index and a sample of blocks (first, last, and ``sample_blocks - 2`` spread
  between) read and checked by the project's block reader;
- ``orphan_object``: an object under the prefix that no live segment (any state but
  DELETE_SEGMENT_FINISHED) references. Objects are listed *before* the metadata is read, so a copy
  starting in between cannot look orphaned;
- ``offload_lag``: source high watermark - (highest finished offset + 1) above ``max_lag_records``.
"""

from __future__ import annotations

import logging

from processor.errors import CorruptObjectError, StorageError
from processor.metadata.model import RemoteLogSegmentMetadata, SegmentState, TopicPartition
from processor.metadata.remote_log_state import RemoteLogState
from processor.reader.segment_blocks import read_block_range, read_segment_index
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.audit_rules import Finding
from processor.storage.chunk_storage import ChunkStorage

log = logging.getLogger(__name__)


def _finding(
    kind: str,
    tp: TopicPartition | None,
    key: str,
    detail: str,
    segment: RemoteLogSegmentMetadata | None = None,
) -> Finding:
    return Finding(
        kind,
        tp.topic if tp else None,
        tp.partition if tp else None,
        segment.start_offset if segment else None,
        segment.end_offset if segment else None,
        str(segment.segment_id.id) if segment else None,
        detail,
        f"{kind}:{key}",
    )


def _sample(count: int, sample_blocks: int) -> list[int]:
    if count <= sample_blocks:
        return list(range(count))
    step = (count - 1) / (sample_blocks - 1)
    return sorted({round(i * step) for i in range(sample_blocks)})


def check_segment_objects(
    storage: ChunkStorage, keys: ObjectKeyFactory, segment: RemoteLogSegmentMetadata, sample_blocks: int = 3
) -> Finding | None:
    tp = segment.topic_partition
    sid = str(segment.segment_id.id)
    missing = [k for k in (segment.data_object_key, segment.index_object_key) if storage.stat(k) is None]
    if missing:
        return _finding("missing_object", tp, sid, f"missing: {', '.join(missing)}", segment)
    try:
        index = read_segment_index(storage, keys, segment)
        for number in _sample(len(index.blocks), max(2, sample_blocks)):
            for _records in read_block_range(
                storage, segment.data_object_key, str(segment.segment_id), [index.blocks[number]], number
            ):
                pass
    except CorruptObjectError as exc:
        return _finding("crc_mismatch", tp, sid, str(exc), segment)
    return None


def check_storage(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    state: RemoteLogState,
    listed: list[str],
    sample_blocks: int = 3,
) -> list[Finding]:
    """missing_object / crc_mismatch per finished segment, orphan_object per unreferenced object.

    ``listed`` are the object keys under the prefix, listed before ``state`` was read."""
    out: list[Finding] = []
    referenced: set[str] = set()
    for _tp, part in sorted(state.partitions.items()):
        for segment in part.segments.values():
            if segment.state != SegmentState.DELETE_SEGMENT_FINISHED:
                referenced.update((segment.data_object_key, segment.index_object_key))
        for segment in part.finished():
            finding = check_segment_objects(storage, keys, segment, sample_blocks)
            if finding is not None:
                out.append(finding)
    for key in listed:
        if key not in referenced:
            out.append(_finding("orphan_object", _tp_of(keys, key), key, f"no live segment references {key}"))
    return out


def _tp_of(keys: ObjectKeyFactory, key: str) -> TopicPartition | None:
    rest = key[len(keys.prefix) + 1 :] if keys.prefix else key
    parts = rest.split("/")
    if len(parts) >= 3 and parts[1].isdigit():
        return TopicPartition(parts[0], int(parts[1]))
    return None


def list_objects(storage: ChunkStorage, keys: ObjectKeyFactory) -> list[str]:
    try:
        return [c.key for c in storage.list(keys.prefix + "/" if keys.prefix else "")]
    except StorageError:
        raise


def check_lag(
    state: RemoteLogState, high_watermarks: dict[TopicPartition, tuple[int, int]], max_lag_records: int
) -> list[Finding]:
    out: list[Finding] = []
    for tp in sorted(state.partitions):
        highest = state.partition(tp).highest_finished_offset()
        if tp not in high_watermarks or highest is None:
            continue
        lag = high_watermarks[tp][1] - (highest + 1)
        if lag > max_lag_records:
            out.append(
                Finding(
                    "offload_lag",
                    tp.topic,
                    tp.partition,
                    highest + 1,
                    high_watermarks[tp][1] - 1,
                    None,
                    f"{lag} records not offloaded (more than {max_lag_records})",
                    f"offload_lag:{tp}:{highest}",
                )
            )
    return out
