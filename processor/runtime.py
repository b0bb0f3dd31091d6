"""Process-wide settings of the data path, applied once by every entry point (worker, CLI, benchmarks)."""

from __future__ import annotations

import gc


def tune_gc() -> None:
    """Collect cycles rarely.

    Each consumed batch creates thousands of short-lived objects (messages, decoded records) that hold
    no reference cycles. With the default threshold (700 allocations) the cyclic collector ran every
    few hundred records and cost a third of the offload rate (128 k -> 175 k records/s measured) and a
    similar share of the follower's apply rate. Objects alive at start-up are frozen out of collection.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 50, 100)
