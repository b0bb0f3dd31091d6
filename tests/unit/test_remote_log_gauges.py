"""Remote log size and delete lag gauges, set by the retention pass of the partitions a worker leads."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import REGISTRY

from processor.lifecycle.retention_config import RetentionConfig
from processor.lifecycle.retention_policy import RetentionLimits
from processor.lifecycle.retention_service import RetentionService, StateView
from tests.unit.test_segment_deleter import TP, FailingDeletes, Journal, claimed, copy_segments, deleter_for


def _gauge(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, labels)


def test_size_and_delete_lag_follow_the_passes(tmp_path: Path) -> None:
    storage = FailingDeletes(tmp_path)
    segs = copy_segments(storage, 3)
    state, epoch = claimed(segs)
    journal = Journal()
    total = sum(s.segment_size_in_bytes for s in segs)
    kept = RetentionService(
        RetentionConfig(RetentionLimits(), ()),
        StateView(state.partitions),
        deleter_for(storage, journal),
        None,
        clock_ms=lambda: 10_000,
    )
    kept.run_pass({TP: epoch})  # unlimited retention: all served, nothing to delete
    assert _gauge("processor_remote_log_size_bytes", topic="orders") == total
    assert _gauge("processor_remote_log_segments", topic="orders") == 3
    assert _gauge("processor_remote_delete_lag_segments", topic="orders", partition="0") == 0

    service = RetentionService(
        RetentionConfig(RetentionLimits(), (("orders", "bytes", 0),)),  # orders: keep nothing
        StateView(state.partitions),
        deleter_for(storage, journal),
        None,
        clock_ms=lambda: 10_000,
    )
    storage.fail = True
    service.run_pass({TP: epoch})  # every deletion fails: all three wait
    assert _gauge("processor_remote_delete_lag_segments", topic="orders", partition="0") == 3
    assert _gauge("processor_remote_delete_lag_bytes", topic="orders", partition="0") == total
    storage.fail = False
    service.run_pass({TP: epoch})
    assert _gauge("processor_remote_delete_lag_segments", topic="orders", partition="0") == 0
    assert _gauge("processor_remote_log_segments", topic="orders") == 0
    service.run_pass({})  # no longer the leader: this worker's figures of orders are dropped
    assert _gauge("processor_remote_log_segments", topic="orders") is None
    assert _gauge("processor_remote_delete_lag_segments", topic="orders", partition="0") is None
