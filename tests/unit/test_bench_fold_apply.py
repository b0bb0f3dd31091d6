"""The in-process apply benchmark (``python -m benchmarks.fold_apply``) runs end to end at a tiny
size and prints its figures. Never a timing: speed is judged by the benchmark, not by tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.timeout(300)
def test_the_apply_benchmark_applies_every_record_and_reports_apply_and_decode(tmp_path: Path) -> None:
    profile = tmp_path / "apply.prof"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.fold_apply",
            "--records",
            "2000",
            "--rounds",
            "1",
            "--profile",
            str(profile),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stderr  # the benchmark asserts every record was accepted
    lines = proc.stdout.splitlines()
    assert any(line.startswith("apply:") and "rec/CPU-s" in line for line in lines), proc.stdout
    assert any(line.startswith("decode:") and "rec/CPU-s" in line for line in lines), proc.stdout
    assert "2,000 records" in proc.stdout
    assert profile.stat().st_size > 0
