"""Every benchmark phase runs end to end at a tiny size, so the harness cannot silently break.

Asserts that each section completes and prints its figures; never a timing (speed is judged by
``make bench``, not by tests). The harness runs as a child process (its entry point is what is
smoke-tested) on the session stack (``--stack``), not on one of its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from processor.devstack import stack
from processor.devstack.stack import StackInfo

pytestmark = pytest.mark.integration


# Longer than the default 120 s: worker runs (each a process start, a group join and a stop; the
# encryption and erase sections add two each, 60 s more allowed for each; the workers section one
# worker on 20 partitions, 120 s more), a restore and a Spark JVM, all inside one child process.
@pytest.mark.timeout(540)
def test_every_bench_section_completes_and_reports_its_figures(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    out = tmp_path / "bench.json"
    attach = ["--stack", local_stack.dir] if stack.load(local_stack.dir) is not None else []
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--gib",
            "0.002",
            "--small-values-gib",
            "0.0005",
            "--reads",
            "5",
            "--follower-records",
            "2000",
            "--scale-partitions",
            "3",
            "--scale-segments",
            "20",
            "--snapshot-partitions",
            "30",
            "--snapshot-segments",
            "5",
            "--restore-records",
            "2000",
            "--rebuild-segments",
            "20",
            "--erase-gib",
            "0.002",
            "--smoke",
            "--out",
            str(out),
            *attach,
        ],
        capture_output=True,
        text=True,
        timeout=520,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    figures = json.loads(out.read_text())["figures"]
    sections = {f["section"] for f in figures}
    from benchmarks.__main__ import SECTIONS

    assert sections == set(SECTIONS), sections
    assert all(isinstance(f["value"], int | float) for f in figures)
