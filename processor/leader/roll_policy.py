"""When an open segment rolls (PIP-76: by size or by time, decoupled from the source's own segments)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class RollReason(StrEnum):
    SIZE = "size"  # reached PROCESSOR_SEGMENT_BYTES
    TIME = (
        "time"  # its first record was taken PROCESSOR_SEGMENT_MS ago (wall clock: idle partitions roll too)
    )
    BUFFER = "buffer"  # the offload buffer is full and nothing else can free it
    REQUESTED = "requested"  # an operator or a test asked for it


@dataclass(frozen=True, slots=True)
class RollPolicy:
    segment_bytes: int
    segment_ms: int

    def check(self, size_bytes: int, opened_at_ms: float, now_ms: float) -> RollReason | None:
        if size_bytes >= self.segment_bytes:
            return RollReason.SIZE
        if size_bytes > 0 and now_ms - opened_at_ms >= self.segment_ms:
            return RollReason.TIME
        return None
