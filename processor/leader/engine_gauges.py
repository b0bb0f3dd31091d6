"""Gauges of the offload engine, from its status (no engine internals needed)."""

from __future__ import annotations

from processor import metrics
from processor.leader.offload_engine import OffloadEngine


def publish_engine_gauges(engine: OffloadEngine) -> None:
    """Segments by state, from the engine's status."""
    status = engine.status()
    metrics.SEGMENTS_BY_STATE.labels("open").set(sum(1 for st in status.values() if st.open_bytes > 0))
    metrics.SEGMENTS_BY_STATE.labels("pending").set(sum(st.pending_segments for st in status.values()))
    metrics.SEGMENTS_BY_STATE.labels("copying").set(sum(1 for st in status.values() if st.copying))
