"""What an operator relies on, against a running worker process on the real stack:

- /livez answers; /readyz turns off (503, reason "storage") within 60 s when S3 becomes unreachable
  (a TCP proxy in front of SeaweedFS is cut) while /livez stays 200, and turns back on when S3
  returns;
- PROCESSOR_WEB_HOST binds only that address; PROCESSOR_WEB_TOKEN guards /fetch and /segments (401
  without the bearer token) while health and metrics stay open;
- the metric catalogue is exported;
- PROCESSOR_LOG_FORMAT=json: every line the process writes is one JSON object, segment copies are
  logged one line each with their fields, and no secret value (a canary token, the S3 secret key)
  appears anywhere in the output;
- ``processor follower`` serves the same read API from the metadata topic.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

import pytest

from processor.devstack.sample_data import produce_samples
from processor.devstack.servers import DEV_SECRET_KEY, free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from tests.integration.tcp_proxy import TcpProxy
from tests.integration.worker_process import WorkerProcess, worker_env

pytestmark = pytest.mark.integration

TOPIC = "ops"
META = "__remote_log_metadata_ops"
TOKEN = "canary-token-5f1c9e"  # a secret: must never appear in the logs


def http_get(url: str, token: str | None = None, timeout: float = 10.0) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def wait_status(url: str, status: int, timeout_s: float, token: str | None = None) -> tuple[float, bytes]:
    """Poll until ``url`` answers ``status``; returns (seconds taken, body)."""
    t0 = time.monotonic()
    last: Any = None
    while time.monotonic() - t0 < timeout_s:
        try:
            code, _h, body = http_get(url, token, timeout=5)
            last = (code, body[:500])
            if code == status:
                return time.monotonic() - t0, body
        except OSError as exc:
            last = exc
        time.sleep(0.5)
    raise AssertionError(f"{url} did not answer {status} within {timeout_s} s; last: {last!r}")


@pytest.fixture(scope="module")
def running(local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("ops")
    s3 = urlparse(local_stack.s3_endpoint_url)
    proxy = TcpProxy(s3.hostname or "127.0.0.1", s3.port or 80).start()
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, 2, 1, {})
    produce_samples(local_stack.bootstrap_servers, TOPIC, 3000, 2, big_every=100_000)
    port = free_port()
    env = worker_env(
        local_stack,
        tmp / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_S3_ENDPOINT_URL=proxy.url,
        PROCESSOR_S3_PREFIX="ops",
        PROCESSOR_SEGMENT_BYTES="262144",  # alone: the block size default adapts
        PROCESSOR_SEGMENT_MS="1s",
        PROCESSOR_BUFFER_BYTES="16MiB",
        PROCESSOR_STORAGE_PROBE_INTERVAL_MS="1s",
        PROCESSOR_LOG_FORMAT="json",
        PROCESSOR_WEB_HOST="127.0.0.1",
        PROCESSOR_WEB_PORT=str(port),
        PROCESSOR_WEB_TOKEN=TOKEN,
    )
    worker = WorkerProcess(env, tmp / "worker.log")
    base = f"http://127.0.0.1:{port}"
    try:
        wait_status(f"{base}/readyz", 200, 120)
        yield {"base": base, "port": port, "proxy": proxy, "worker": worker, "env": env, "tmp": tmp}
    finally:
        worker.stop()
        proxy.close()


FINISHED = "COPY_SEGMENT_FINISHED"


def _segments(base: str, partition: int = 0) -> list[dict[str, Any]]:
    """The listed segments, once ``partition`` has a finished one."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        code, _h, body = http_get(f"{base}/segments?topic={TOPIC}", TOKEN)
        assert code == 200, body
        found = json.loads(body)["segments"]
        if any(s["state"] == FINISHED and s["partition"] == partition for s in found):
            return list(found)
        time.sleep(0.5)
    raise AssertionError(f"no finished segment of partition {partition} listed within 60 s")


def _first_finished(segments: list[dict[str, Any]], partition: int) -> int:
    """The lowest offset served: a segment still being copied is listed too, and not served yet."""
    served = [s for s in segments if s["partition"] == partition and s["state"] == FINISHED]
    return min(int(s["start_offset"]) for s in served)


def test_token_guards_reads_but_not_health_or_metrics(running):
    base = running["base"]
    segments = _segments(base)
    first = _first_finished(segments, 0)
    for path in (f"/segments?topic={TOPIC}", f"/fetch?topic={TOPIC}&partition=0&offset={first}"):
        code, headers, body = http_get(base + path)
        assert code == 401, path
        assert headers.get("WWW-Authenticate", "").startswith("Bearer")
        assert http_get(base + path, "wrong-" + TOKEN)[0] == 401
        assert http_get(base + path, TOKEN[:-1])[0] == 401
    code, _h, body = http_get(f"{base}/fetch?topic={TOPIC}&partition=0&offset={first}&max_records=5", TOKEN)
    assert code == 200
    assert [r["offset"] for r in json.loads(body)["records"]] == list(range(first, first + 5))
    for open_path in ("/livez", "/readyz", "/healthz", "/metrics"):
        assert http_get(base + open_path)[0] == 200, open_path


def test_web_host_binds_only_that_address(running):
    port = running["port"]
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        pass
    with pytest.raises(OSError), socket.create_connection(("127.0.0.2", port), timeout=2):
        pass


def test_metric_catalogue_is_exported(running):
    base = running["base"]
    _segments(base)
    http_get(f"{base}/fetch?topic={TOPIC}&partition=1&timestamp=0&max_records=1", TOKEN)
    deadline = time.monotonic() + 30
    wanted = [
        'processor_s3_requests_total{operation="PutObject"}',
        'processor_s3_requests_total{operation="HeadBucket"}',
        "processor_remote_copy_lag_seconds{",
        "processor_remote_copy_lag_records{",
        'processor_segments{state="pending"}',
        "processor_remote_copy_seconds_bucket",
        "processor_remote_copy_bytes_total",
        "processor_records_copied_total",
        "processor_offload_buffer_bytes",
        "processor_consumption_pauses_total",
        "processor_follower_records_applied_total",
        'processor_follower_lag_records{partition="0"}',
        'processor_remote_fetch_seconds_bucket{by="timestamp"',
        "processor_storage_reachable 1.0",
        "processor_ready 1.0",
    ]
    missing: list[str] = wanted
    while time.monotonic() < deadline:
        text = http_get(f"{base}/metrics")[2].decode()
        missing = [w for w in wanted if w not in text]
        if not missing:
            return
        time.sleep(1)
    raise AssertionError(f"missing from /metrics: {missing}")


def test_follower_command_serves_reads(running, local_stack):
    port = free_port()
    env = {
        **running["env"],
        "PROCESSOR_WEB_PORT": str(port),
        "PROCESSOR_DATA_DIR": str(running["tmp"] / "follower"),
        "PROCESSOR_WORKER_ID": "follower-0",
    }
    log_path = running["tmp"] / "follower.log"
    with log_path.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "processor", "follower"], env=env, stdout=out, stderr=out
        )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_status(f"{base}/readyz", 200, 90)
        assert http_get(f"{base}/livez")[0] == 200
        assert http_get(f"{base}/segments?topic={TOPIC}")[0] == 401
        first = _first_finished(_segments(base, 1), 1)
        code, _h, body = http_get(
            f"{base}/fetch?topic={TOPIC}&partition=1&offset={first}&max_records=3", TOKEN
        )
        assert code == 200, body
        assert [r["offset"] for r in json.loads(body)["records"]] == [first, first + 1, first + 2]
        assert b"processor_follower_records_applied_total" in http_get(f"{base}/metrics")[2]
    finally:
        proc.terminate()
        assert proc.wait(30) == 0, log_path.read_text()
    for line in log_path.read_text().splitlines():
        assert json.loads(line)["level"], line
    assert TOKEN not in log_path.read_text()


def test_readiness_follows_s3_reachability_and_liveness_stays(running):
    base, proxy = running["base"], running["proxy"]
    wait_status(f"{base}/readyz", 200, 30)
    proxy.cut()
    try:
        t0 = time.monotonic()
        while True:
            assert http_get(f"{base}/livez", timeout=5)[0] == 200, "liveness must not depend on S3"
            code, _h, body = http_get(f"{base}/readyz", timeout=5)
            if code == 503:
                break
            assert time.monotonic() - t0 < 60, "readiness did not turn off within 60 s of the S3 outage"
            time.sleep(0.5)
        report = json.loads(body)
        assert report["ready"] is False
        assert any(r.startswith("storage:") for r in report["reasons"]), report
        assert any(p["component"] == "storage" for p in report["problems"])
        assert "processor_storage_reachable 0.0" in http_get(f"{base}/metrics")[2].decode()
        for _ in range(4):  # still alive while S3 stays away
            assert http_get(f"{base}/livez", timeout=5)[0] == 200
            time.sleep(0.5)
    finally:
        proxy.restore()
    _took, body = wait_status(f"{base}/readyz", 200, 60)
    assert json.loads(body)["ready"] is True


def test_json_logs_one_object_per_line_no_secrets(running):
    """Runs last in this module: stops the worker and reads everything it wrote."""
    _segments(running["base"])
    worker: WorkerProcess = running["worker"]
    assert worker.stop() == 0
    text = worker.log()
    assert TOKEN not in text
    assert DEV_SECRET_KEY not in text
    entries = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"worker.log line {n} is not JSON: {line[:300]!r}")
    assert {"ts", "level", "logger", "message"} <= entries[0].keys()
    loggers = {e["logger"] for e in entries}
    assert any(name.startswith(("faust", "mode")) for name in loggers), loggers  # Faust's own lines
    copied = [e for e in entries if e["message"] == "segment copied"]
    assert copied
    for e in copied:
        assert e["topic"] == TOPIC and e["partition"] in (0, 1)
        assert e["start_offset"] <= e["end_offset"]
        assert len(e["segment_id"]) == 36
    storage_lines = [e for e in entries if e.get("component") == "storage"]
    assert storage_lines, "the S3 outage and recovery are logged with their component"
