"""Runs ``processor worker`` as a real child process against the test stack."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

from processor.devstack import servers, stack
from processor.kafka.partition import TopicPartition
from processor.leader.offload_engine import OffloadEngine

# The shortest session Apache Kafka accepts by default (group.min.session.timeout.ms): a worker killed
# in a test is noticed by its group within 6 s, not the product's default 10 s.
TEST_SESSION_TIMEOUT_MS = "6000"


def worker_env(info: stack.StackInfo, data_dir: Path, topics: str, **extra: str) -> dict[str, str]:
    defaults = {"PROCESSOR_LOG_LEVEL": "info", "PROCESSOR_SESSION_TIMEOUT_MS": TEST_SESSION_TIMEOUT_MS}
    return info.worker_env(data_dir, topics, **{**defaults, **extra})


def wait_engine_offloaded(engine: OffloadEngine, ends: dict[TopicPartition, int], timeout_s: float) -> None:
    """Wait until the in-process engine's finished coverage reaches ``ends`` (or the time is up)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status = engine.status()
        if all((status[tp].remote_end or -1) >= end for tp, end in ends.items()):
            return
        time.sleep(0.2)


class WorkerProcess:
    def __init__(self, env: dict[str, str], log_path: Path) -> None:
        self.log_path = log_path
        with log_path.open("ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "processor", "worker"], env=env, stdout=out, stderr=subprocess.STDOUT
            )

    def stop(self, timeout_s: float = 30.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def start_web_worker(
    info: stack.StackInfo, tmp: Path, topics: str, **extra: str
) -> tuple[WorkerProcess, str]:
    """A worker process with its web server on a free loopback port, small segments that roll fast
    (data in ``tmp``/data, log in ``tmp``/worker.log); returns it and its base URL."""
    port = servers.free_port()
    env = worker_env(
        info,
        tmp / "data",
        topics,
        **{
            "PROCESSOR_SEGMENT_BYTES": "65536",
            "PROCESSOR_SEGMENT_MS": "500ms",
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(port),
            **extra,
        },
    )
    return WorkerProcess(env, tmp / "worker.log"), f"http://127.0.0.1:{port}"
