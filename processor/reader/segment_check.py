"""The one integrity check of a finished segment's objects, used by every checker (``processor
verify``, the Spark audit's scrubber) on top of the readers' own checks (``segment_blocks``:
``fetch_index``, ``check_block``, the block decoders' CRCs).

``check_segment`` returns problems, never raises for what it finds about the segment; each problem
has a kind:

- ``missing_object``: the data or index object is gone;
- ``truncated_object`` / ``size_mismatch``: an object is shorter / longer than the metadata says
  (its blocks cannot be where the index says, so nothing more is read);
- ``crc_mismatch``: the index or a block fails its checks (keys outside the segment's prefix, CRCs,
  an index that describes another segment, a block that is not its index entry's);
- ``shredded``: the segment's topic was crypto-shredded (its key destroyed on purpose): not corrupt,
  never readable again;
- ``key_unavailable``: the segment is encrypted and its data key cannot be unwrapped here (no key
  provider configured for it, Decrypt refused, the key unknown): not corrupt, not readable here;
- ``count_mismatch`` / ``timestamp_mismatch``: the index's record count or largest timestamp is not
  the metadata's; a block holds more rows than its index entry's offsets, or a later timestamp; with
  every block read, more rows or a later timestamp than the metadata's. Control batches (transaction
  markers) count in the index and decode to no row, so fewer rows or earlier times are no problem.

Blocks read: ``all`` (in ranged GETs of at most ``CHUNK_BYTES``), ``sample`` (the first, the last and
a spread between, ``sample_blocks`` in all, one GET each) or ``none``. Requests and bytes are counted
so a scrubber can hold a quota. A storage outage (a StorageError other than a missing object or a
read past the end) propagates: it says nothing about this segment.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from processor.errors import (
    CorruptObjectError,
    InvalidRangeError,
    SegmentKeyError,
    SegmentObjectMissingError,
    SegmentShreddedError,
)
from processor.metadata.model import RemoteLogSegmentMetadata
from processor.reader.segment_blocks import chunk_runs, fetch_index, read_block_range_columns
from processor.reader.segment_keys import NO_DECRYPTION, SegmentDecryption
from processor.segment.block_header import BlockInfo
from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import ChunkStorage

Blocks = Literal["all", "sample", "none"]
SAMPLE_BLOCKS = 8
CHUNK_BYTES = 8 << 20  # memory held per GET when every block is read
CORRUPT_KINDS = frozenset(
    {"truncated_object", "size_mismatch", "crc_mismatch", "count_mismatch", "timestamp_mismatch"}
)


@dataclass(frozen=True)
class Problem:
    kind: str  # "missing_object" or one of CORRUPT_KINDS
    object_key: str
    detail: str


@dataclass
class SegmentCheck:
    """What :func:`check_segment` found about one segment, and what it cost."""

    problems: list[Problem] = field(default_factory=list)
    encrypted: bool = False  # sealed under a data key of its own (encryption at rest)
    requests: int = 0
    bytes_read: int = 0
    blocks_checked: int = 0

    @property
    def clean(self) -> bool:
        return not self.problems

    @property
    def missing(self) -> list[tuple[str, str]]:
        return [(p.object_key, p.detail) for p in self.problems if p.kind == "missing_object"]

    @property
    def corrupt(self) -> list[tuple[str, str]]:
        return [(p.object_key, p.detail) for p in self.problems if p.kind in CORRUPT_KINDS]


def sample(count: int, sample_blocks: int) -> list[int]:
    """Block numbers to read: all of a small segment, else first, last and spread between."""
    if count <= sample_blocks:
        return list(range(count))
    step = (count - 1) / (sample_blocks - 1)
    return sorted({round(i * step) for i in range(sample_blocks)})


def check_segment(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    segment: RemoteLogSegmentMetadata,
    blocks: Blocks = "all",
    *,
    sample_blocks: int = SAMPLE_BLOCKS,
    decryption: SegmentDecryption = NO_DECRYPTION,
) -> SegmentCheck:
    """Check one finished segment's objects (encrypted ones opened through ``decryption``); see the
    module docstring."""
    out = SegmentCheck(encrypted=segment.custom_metadata is not None)
    seg = segment
    for key, wanted in (
        (seg.data_object_key, seg.segment_size_in_bytes),
        (seg.index_object_key, seg.index_size_in_bytes),
    ):
        out.requests += 1
        stored = storage.stat(key)
        if stored is None:
            out.problems.append(Problem("missing_object", key, f"missing: {key}"))
            return out
        if stored.size != wanted:
            kind = "truncated_object" if stored.size < wanted else "size_mismatch"
            out.problems.append(
                Problem(kind, key, f"{key} holds {stored.size} bytes; the metadata says {wanted}")
            )
    if out.problems:
        return out
    try:
        _check_objects(storage, keys, seg, blocks, max(2, sample_blocks), out, decryption)
    except SegmentShreddedError as exc:
        out.problems.append(Problem("shredded", seg.data_object_key, str(exc)))
    except SegmentKeyError as exc:
        out.problems.append(Problem("key_unavailable", seg.data_object_key, str(exc)))
    except SegmentObjectMissingError as exc:  # gone between the stat and the read
        out.problems.append(Problem("missing_object", exc.object_key or seg.data_object_key, str(exc)))
    except CorruptObjectError as exc:
        out.problems.append(Problem("crc_mismatch", exc.object_key or seg.index_object_key, str(exc)))
    except InvalidRangeError as exc:
        out.problems.append(Problem("truncated_object", exc.key or seg.data_object_key, str(exc)))
    return out


def _check_objects(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    seg: RemoteLogSegmentMetadata,
    blocks: Blocks,
    sample_blocks: int,
    out: SegmentCheck,
    decryption: SegmentDecryption,
) -> None:
    cipher = decryption.cipher(seg)
    out.requests += 1
    out.bytes_read += seg.index_size_in_bytes
    index = fetch_index(storage, keys, seg, cipher=cipher)
    out.problems += _index_against_metadata(index.record_count, index.max_timestamp, seg)
    infos = index.blocks
    if blocks == "none" or not infos:
        return
    if blocks == "all":
        runs = [list(range(len(infos)))]
        out.requests += len(chunk_runs(infos, CHUNK_BYTES))
    else:
        runs = [[n] for n in sample(len(infos), sample_blocks)]
        out.requests += len(runs)
    rows, largest = 0, -1
    for run in runs:
        chosen = [infos[n] for n in run]
        out.bytes_read += sum(b.length for b in chosen)
        columns = read_block_range_columns(
            storage,
            seg.data_object_key,
            str(seg.segment_id),
            chosen,
            run[0],
            chunk_bytes=CHUNK_BYTES,
            cipher=cipher,
        )
        for number, info, cols in zip(run, chosen, columns, strict=True):
            out.blocks_checked += 1
            top = max(cols.timestamps, default=-1)
            rows += len(cols)
            largest = max(largest, top)
            block_problem = _block_against_index(number, info, len(cols), top, seg)
            if block_problem:
                out.problems.append(block_problem)
    if blocks == "all" and (rows > seg.record_count or largest > seg.max_timestamp_ms):
        out.problems.append(
            Problem(
                "count_mismatch" if rows > seg.record_count else "timestamp_mismatch",
                seg.data_object_key,
                f"the blocks hold {rows} records up to timestamp {largest}; the metadata says "
                f"{seg.record_count} up to {seg.max_timestamp_ms}",
            )
        )


def _index_against_metadata(count: int, max_timestamp: int, seg: RemoteLogSegmentMetadata) -> list[Problem]:
    found = []
    if count != seg.record_count:
        detail = f"the index counts {count} records; the metadata {seg.record_count}"
        found.append(Problem("count_mismatch", seg.index_object_key, detail))
    if max_timestamp != seg.max_timestamp_ms:
        detail = f"the index's largest timestamp is {max_timestamp}; the metadata's {seg.max_timestamp_ms}"
        found.append(Problem("timestamp_mismatch", seg.index_object_key, detail))
    return found


def _block_against_index(
    number: int, info: BlockInfo, rows: int, top: int, seg: RemoteLogSegmentMetadata
) -> Problem | None:
    too_many = rows > info.last_offset - info.first_offset + 1
    if not too_many and top <= info.max_timestamp:
        return None
    return Problem(
        "count_mismatch" if too_many else "timestamp_mismatch",
        seg.data_object_key,
        f"block {number} holds {rows} rows up to timestamp {top}; its index entry says offsets "
        f"{info.first_offset}..{info.last_offset} up to {info.max_timestamp}",
    )
