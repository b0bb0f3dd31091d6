"""A finished, immutable segment ready for upload: its blocks and their index information. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from processor.segment.block_header import BLOCK_FORMAT_VERSION, BlockInfo


@dataclass(slots=True)
class SealedSegment:
    """A finished, immutable segment ready for upload: its blocks and their index information."""

    partition: int
    start_offset: int  # inclusive; may be below the first record's offset (gaps are covered)
    end_offset: int  # inclusive; the last record's offset
    blocks: list[bytes | bytearray]
    block_infos: list[BlockInfo]
    record_count: int
    size_bytes: int  # data object length
    max_timestamp: int
    leader_epochs: list[tuple[int, int]]  # (epoch, first offset of that epoch in the segment)
    format_version: int = BLOCK_FORMAT_VERSION
    held_bytes: int = -1  # bytes the offload buffer counted for it (before archive compression)
    archive_compression: str = "keep"  # PROCESSOR_ARCHIVE_COMPRESSION, applied on the way to S3
    key_filter: bytes | None = None  # the encoded key filter to upload beside it (the copier's)
    # its keys' summaries (n x 2 u64), read before archive compression so that the copier builds
    # the key filter without decompressing the blocks again (key_filter_builder.with_key_summaries)
    key_summaries: np.ndarray | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.held_bytes < 0:
            self.held_bytes = self.size_bytes
