"""With S3 stalled, the offload buffer never holds more than its bound; consumption pauses, then resumes."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from processor import metrics
from processor.config import load_settings
from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.topic_io import ensure_metadata_topic
from processor.wiring.leader import build_engine
from processor.wiring.storage import build_storage
from tests.integration.worker_process import wait_engine_offloaded

pytestmark = pytest.mark.integration

TOPIC = "bound-test"
PARTITIONS = 4
BOUND = 4 * 1024 * 1024


def test_buffer_bound_holds_while_s3_is_stalled(local_stack: StackInfo, tmp_path: Path) -> None:
    weed_pid = local_stack.pids.get("weed")
    if not weed_pid:
        pytest.skip("needs the embedded SeaweedFS process to stall it")
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, PARTITIONS, 1, {})
    produced = produce_samples(local_stack.bootstrap_servers, TOPIC, 24_000, PARTITIONS, big_every=0)
    total_bytes = sum(len(r.value or b"") + len(r.key or b"") for r in produced)
    assert total_bytes > 3 * BOUND  # the input is much larger than the bound
    settings = load_settings(
        {
            "PROCESSOR_BOOTSTRAP_SERVERS": local_stack.bootstrap_servers,
            "PROCESSOR_TOPICS": TOPIC,
            "PROCESSOR_METADATA_TOPIC": "__remote_log_metadata_bound",
            "PROCESSOR_S3_ENDPOINT_URL": local_stack.s3_endpoint_url,
            "PROCESSOR_S3_BUCKET": local_stack.bucket,
            "PROCESSOR_S3_REGION": "us-east-1",
            "PROCESSOR_S3_PREFIX": "bound",
            "PROCESSOR_SEGMENT_BYTES": str(1024 * 1024),
            "PROCESSOR_BLOCK_BYTES": str(64 * 1024),
            "PROCESSOR_BUFFER_BYTES": str(BOUND),
            "PROCESSOR_DATA_DIR": str(tmp_path),
        }
    )
    meta_parts = ensure_metadata_topic(settings.bootstrap_servers, settings.metadata_topic, 2, 1)
    storage = build_storage(settings)
    engine = build_engine(settings, storage, meta_parts)
    samples: list[int] = []
    sampling = threading.Event()

    def sample() -> None:
        while not sampling.is_set():
            samples.append(engine.buffer.used)
            time.sleep(0.002)

    sampler = threading.Thread(target=sample, daemon=True)
    os.kill(weed_pid, signal.SIGSTOP)
    try:
        sampler.start()
        engine.start()
        engine.assign({TopicPartition(TOPIC, p): 1 for p in range(PARTITIONS)})
        deadline = time.monotonic() + 60
        while not engine.paused and time.monotonic() < deadline:
            time.sleep(0.05)
        assert engine.paused, "consumption never paused although S3 is stalled"
        taken_at_pause = metrics.RECORDS_TAKEN._value.get()
        time.sleep(2.5)  # the fault goes on: a window in which nothing may be taken while paused
        assert engine.paused
        assert metrics.RECORDS_TAKEN._value.get() == taken_at_pause, "records were taken while paused"
        # the stall is visible: every partition lags (nothing is in a finished segment yet)
        assert all((s.lag or 0) > 0 for s in engine.status().values()), engine.status()
    finally:
        os.kill(weed_pid, signal.SIGCONT)
    try:
        expected = {p: sum(1 for r in produced if r.partition == p) - 1 for p in range(PARTITIONS)}
        wait_engine_offloaded(engine, {TopicPartition(TOPIC, p): e for p, e in expected.items()}, 180)
        status = engine.status()
        assert all(status[TopicPartition(TOPIC, p)].remote_end == end for p, end in expected.items()), status
        assert not engine.paused, "consumption did not resume once uploads freed space"
        assert engine.pause_count >= 1
        deadline = time.monotonic() + 10
        while any(s.lag for s in engine.status().values()) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert all(s.lag == 0 for s in engine.status().values()), engine.status()
    finally:
        sampling.set()
        engine.stop()
        storage.close()
    assert max(samples) <= BOUND
    assert engine.buffer.peak <= BOUND
    assert engine.buffer.peak > BOUND // 2  # the bound was actually reached for
    assert engine.buffer.used == 0
