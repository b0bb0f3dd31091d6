"""Runs ``processor worker`` as a real child process against the test stack."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from processor.devstack import stack


def worker_env(info: stack.StackInfo, data_dir: Path, topics: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
    env.update(info.env())
    env.update(
        {
            "PROCESSOR_TOPICS": topics,
            "PROCESSOR_DATA_DIR": str(data_dir),
            "PROCESSOR_WEB_PORT": str(stack.free_port()),
            "PROCESSOR_LOG_LEVEL": "info",
        }
    )
    env.update(extra)
    return env


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
