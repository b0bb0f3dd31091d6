"""Readiness when the data path fails but the probes pass, on the real stack.

A worker writes to SeaweedFS through the S3 fault proxy. The proxy then answers every PutObject
with 403 AccessDenied while HeadBucket (the storage probe) still succeeds: the copy is blocked, the
worker turns unready with the data path's finding, and stays unready across many storage probe
rounds (each of which passes). When PutObject is allowed again, the next copy succeeds and
readiness returns.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from processor.devstack.sample_data import produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from tests.integration.test_operability import http_get, wait_status
from tests.integration.worker_process import start_web_worker
from tests.support.fault_proxy import FaultProxy, error_rule

pytestmark = pytest.mark.integration

TOPIC = "ready-dp"
META = "__remote_log_metadata_ready_dp"
PROBE_ROUNDS = 5  # storage probe rounds that must pass while the pod stays unready


def _head_buckets(base: str) -> float:
    for line in http_get(f"{base}/metrics")[2].decode().splitlines():
        if line.startswith('processor_s3_requests_total{operation="HeadBucket"}'):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _readyz(base: str) -> tuple[int, dict[str, Any]]:
    code, _h, body = http_get(f"{base}/readyz", timeout=5)
    return code, json.loads(body)


def test_a_denied_put_keeps_the_pod_unready_while_head_bucket_succeeds(
    local_stack: StackInfo, fault_proxy: FaultProxy, tmp_path
):
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, 1, 1, {})
    worker, base = start_web_worker(
        local_stack,
        tmp_path,
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_S3_ENDPOINT_URL=fault_proxy.endpoint_url,
        PROCESSOR_S3_PREFIX="ready-dp",
        PROCESSOR_STORAGE_PROBE_INTERVAL_MS="500",
        PROCESSOR_COPY_RETRY_BACKOFF_MAX_MS="1s",
    )
    try:
        wait_status(f"{base}/readyz", 200, 120)
        denied = fault_proxy.add_rule(error_rule({"put"}, status=403, code="AccessDenied"))
        produce_samples(local_stack.bootstrap_servers, TOPIC, 500, 1, big_every=100_000)
        _took, body = wait_status(f"{base}/readyz", 503, 60)
        report = json.loads(body)
        assert any(
            p["component"] == "storage" and p["source"] == "data_path" and "AccessDenied" in p["reason"]
            for p in report["problems"]
        ), report
        assert denied.applied >= 1
        # HeadBucket keeps succeeding: the probe passes round after round, the finding stays
        start = _head_buckets(base)
        deadline = time.monotonic() + 60
        while _head_buckets(base) < start + PROBE_ROUNDS:
            code, report = _readyz(base)
            assert code == 503, f"ready again while PutObject is still denied: {report}"
            assert time.monotonic() < deadline, "the storage probe stopped running"
            time.sleep(0.2)
        code, report = _readyz(base)
        assert code == 503 and not any(p["source"] == "probe" for p in report["problems"]), report
        assert "processor_storage_reachable 1.0" in http_get(f"{base}/metrics")[2].decode()
        # PutObject allowed again: the blocked copy is retried, succeeds, and clears its finding
        fault_proxy.clear_rules()
        _took, body = wait_status(f"{base}/readyz", 200, 90)
        assert json.loads(body)["ready"] is True
    finally:
        worker.stop()
