"""Gauges of the offload engine: copy lag per partition (records, seconds, bytes, segments, refreshed
by the engine every ``LAG_INTERVAL_S``) and segments by state (from its status, by the worker's timer)."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterable, Mapping
from typing import Protocol

from processor import metrics
from processor.kafka.partition import TopicPartition
from processor.leader.copy_scheduler import CopyScheduler
from processor.leader.high_watermarks import HighWatermarks
from processor.leader.led_partition import LedPartition, PartitionStatus
from processor.segment.sealed_segment import SealedSegment

LAG_INTERVAL_S = 2.0
FETCH_HIGH_WATERMARK_STALE_S = 15.0  # without HighWatermarks: how long a fetch response's counts


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


def update_lag(
    parts: Iterable[LedPartition], copies: CopyScheduler, high_watermarks: HighWatermarks | None = None
) -> None:
    """Each partition's copy lag.

    In records: the high watermark minus the remote end, the high watermark asked of the broker on
    its own schedule (``high_watermarks``) or seen in a fetch response, the newer of the two that is
    recent; with neither (fetching stalled and the asks failing) the gauge is dropped rather than
    left showing an old number. In seconds: the oldest record held and not remote, and for records
    not fetched yet at least the time since a high watermark first showed them. In bytes and
    segments: what the worker holds and has not copied yet.
    """
    now = time.monotonic()
    for st in parts:
        labels = (st.tp.topic, str(st.tp.partition))
        lane = copies.lane(st.tp)
        pending = list(lane.pending) if lane is not None else []
        held = (st.assembler.size_bytes if st.assembler is not None else 0) + sum(
            s.held_bytes for s in pending
        )
        metrics.COPY_LAG_BYTES.labels(*labels).set(held)
        metrics.COPY_LAG_SEGMENTS.labels(*labels).set(len(pending))
        age = unremote_age_s(st, pending)
        existed = high_watermarks.existed_since(st.tp, st.last_taken + 1) if high_watermarks else None
        if existed is not None:
            age = max(age, now - existed)
        metrics.COPY_LAG_SECONDS.labels(*labels).set(age)
        high = recent_high_watermark(st, high_watermarks, now)
        if high is None:
            st.lag = None
            with contextlib.suppress(KeyError):
                metrics.COPY_LAG_RECORDS.remove(*labels)
            continue
        remote_end = lane.remote_end if lane else st.remote_end
        covered = remote_end + 1 if remote_end is not None else 0
        st.lag = max(0, high - covered)
        metrics.COPY_LAG_RECORDS.labels(*labels).set(st.lag)


def recent_high_watermark(st: LedPartition, high_watermarks: HighWatermarks | None, now: float) -> int | None:
    """The newest recent high watermark of ``st``'s partition: asked, or from a fetch response."""
    stale_after = high_watermarks.stale_after_s if high_watermarks else FETCH_HIGH_WATERMARK_STALE_S
    candidates = []
    if st.high_watermark is not None and now - st.high_watermark_at <= stale_after:
        candidates.append(st.high_watermark)
    asked = high_watermarks.get(st.tp) if high_watermarks else None
    if asked is not None:
        candidates.append(asked.high_watermark)
    return max(candidates) if candidates else None


def drop_partition_gauges(tp: TopicPartition) -> None:
    """The engine stopped leading ``tp``: its per-partition gauges go."""
    for gauge in (
        metrics.REMOTE_END_OFFSET,
        metrics.COPY_LAG_RECORDS,
        metrics.COPY_LAG_SECONDS,
        metrics.COPY_LAG_BYTES,
        metrics.COPY_LAG_SEGMENTS,
    ):
        with contextlib.suppress(KeyError):
            gauge.remove(tp.topic, str(tp.partition))


class EngineStatus(Protocol):
    def status(self) -> Mapping[TopicPartition, PartitionStatus]: ...


def publish_engine_gauges(engine: EngineStatus) -> None:
    """Segments by state, from the engine's status (no engine internals needed)."""
    status = engine.status()
    metrics.SEGMENTS_BY_STATE.labels("open").set(sum(1 for st in status.values() if st.open_bytes > 0))
    metrics.SEGMENTS_BY_STATE.labels("pending").set(sum(st.pending_segments for st in status.values()))
    metrics.SEGMENTS_BY_STATE.labels("copying").set(sum(1 for st in status.values() if st.copying))
