"""How much the leader fetches at once, from the offload buffer's bound."""

from __future__ import annotations

from processor.config import Settings
from processor.leader.batch_source import FetchOptions

MiB = 1024 * 1024


def fetch_options(settings: Settings) -> FetchOptions:
    """Fetched bytes outside the offload buffer: at most ``fetch_concurrency`` responses, each bounded
    by a quarter of the buffer shared among them (between 1 and 32 MiB; 4 MiB at most a partition)."""
    request_max = max(1 * MiB, min(32 * MiB, settings.buffer_bytes // 4 // settings.fetch_concurrency))
    return FetchOptions(
        partition_max_bytes=min(4 * MiB, request_max),
        request_max_bytes=request_max,
        concurrency=settings.fetch_concurrency,
    )
