"""`make demo` runs `processor demo`: smoke-test the entry point end to end at a small size, as a child
process, on the session stack (``--stack``: topics of its own, the stack left running)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from processor.devstack import stack
from processor.devstack.stack import StackInfo

pytestmark = pytest.mark.integration


def test_demo_offloads_and_reads_every_record_back(local_stack: StackInfo, tmp_path: Path) -> None:
    attach = stack.load(local_stack.dir) is not None  # not with testcontainers: then a stack of its own
    where = ["--stack", local_stack.dir] if attach else ["--dir", str(tmp_path / "demo")]
    proc = subprocess.run(
        [sys.executable, "-m", "processor", "demo", *where, "--records", "2000"],
        capture_output=True,
        text=True,
        timeout=110,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "all records are in finished segments" in proc.stdout
    assert "read back 2000 records from S3 through the remote reader: every one byte-exact" in proc.stdout
    if attach:
        assert stack.status(local_stack.dir)["running"], "the demo stopped a stack it did not start"
