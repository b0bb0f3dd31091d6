"""Which open segments to roll early while the offload buffer fills. Pure selection."""

from __future__ import annotations

from collections.abc import Iterable

from processor.leader.copy_scheduler import CopyScheduler
from processor.leader.led_partition import LedPartition
from processor.leader.offload_buffer import OffloadBuffer


def segments_to_roll(
    parts: Iterable[LedPartition], copies: CopyScheduler, buffer: OffloadBuffer
) -> list[LedPartition]:
    """Keep uploads flowing while the buffer fills (a backlog: fetching outruns uploads).

    Above a quarter of the bound, an idle copy slot takes the largest open segment of a
    partition with no copy queued or running once it holds a fair share of the bound
    (bound / (4 x copy concurrency)); above half the bound, any open segment. Measured here:
    waiting for half the bound sealed every partition's segment at once, so all uploads ended
    together and the pipeline idled while the buffer refilled (48 MB/s instead of ~100).
    """
    used, bound = buffer.used, buffer.bound
    if used < bound // 4:
        return []
    busy = copies.busy()
    slots = copies.concurrency - busy
    if slots <= 0 and (busy or used < bound // 2):
        return []
    fair_share = 0 if used >= bound // 2 else bound // (4 * copies.concurrency)
    idle = []
    for st in parts:
        lane = copies.lane(st.tp)
        asm = st.assembler
        if asm is None or asm.empty or asm.size_bytes < fair_share:
            continue
        if lane is not None and not lane.pending and not lane.copying:
            idle.append(st)
    idle.sort(key=lambda s: s.assembler.size_bytes if s.assembler else 0, reverse=True)
    return idle[: max(slots, 1)]
