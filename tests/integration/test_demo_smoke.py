"""`make demo` runs `processor demo`: smoke-test it end to end at a small size (its own stack)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration


def test_demo_offloads_and_reads_every_record_back(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "processor", "demo", "--dir", str(tmp_path / "demo"), "--records", "2000"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "all records are in finished segments" in proc.stdout
    assert "read back 2000 records from S3 through the remote reader: every one byte-exact" in proc.stdout
