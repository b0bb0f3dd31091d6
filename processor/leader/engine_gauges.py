"""Gauges of the offload engine: offload lag per partition (records and seconds, refreshed by the
engine every ``LAG_INTERVAL_S``) and segments by state (from its status, by the worker's timer)."""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from processor import metrics
from processor.leader.copy_scheduler import CopyScheduler
from processor.leader.led_partition import LedPartition, PartitionStatus
from processor.metadata.model import TopicPartition
from processor.segment.sealed_segment import SealedSegment

LAG_INTERVAL_S = 2.0


def unremote_age_s(st: LedPartition, pending: list[SealedSegment]) -> float:
    """Age of the oldest record of the partition not yet remote: from its timestamp when it sits in
    a sealed segment or a closed block, else since the open segment took its first batch; 0 when
    the worker holds nothing of the partition (the figure operators alert on)."""
    asm = st.assembler
    infos = pending[0].block_infos if pending else (asm.infos if asm is not None else [])
    if infos:
        return max(0.0, time.time() - infos[0].min_timestamp / 1000)
    if asm is not None and not asm.empty:
        return max(0.0, time.monotonic() - st.opened_at_ms / 1000)
    return 0.0


def update_lag(parts: Iterable[LedPartition], copies: CopyScheduler) -> None:
    """Each partition's offload lag, from the high watermark of its last fetch response."""
    for st in parts:
        lane = copies.lane(st.tp)
        pending = list(lane.pending) if lane is not None else []
        metrics.OFFLOAD_LAG_SECONDS.labels(st.tp.topic, str(st.tp.partition)).set(unremote_age_s(st, pending))
        high = st.high_watermark
        if high is None:
            continue
        remote_end = lane.remote_end if lane else st.remote_end
        covered = remote_end + 1 if remote_end is not None else 0
        st.lag = max(0, high - covered)
        metrics.OFFLOAD_LAG.labels(st.tp.topic, str(st.tp.partition)).set(st.lag)


class EngineStatus(Protocol):
    def status(self) -> Mapping[TopicPartition, PartitionStatus]: ...


def publish_engine_gauges(engine: EngineStatus) -> None:
    """Segments by state, from the engine's status (no engine internals needed)."""
    status = engine.status()
    metrics.SEGMENTS_BY_STATE.labels("open").set(sum(1 for st in status.values() if st.open_bytes > 0))
    metrics.SEGMENTS_BY_STATE.labels("pending").set(sum(st.pending_segments for st in status.values()))
    metrics.SEGMENTS_BY_STATE.labels("copying").set(sum(1 for st in status.values() if st.copying))
