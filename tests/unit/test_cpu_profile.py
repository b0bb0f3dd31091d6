"""The suite's CPU profile plugin counts a test's children, waited for or still running."""

from __future__ import annotations

import subprocess
import sys

from tests.support.cpu_profile import tree_cpu_seconds

BURN = (  # half a second of CPU, then a line
    "import time\nt = time.process_time()\n"
    "while time.process_time() - t < 0.5: pass\n"
    "print('done', flush=True)\n"
)


def test_a_child_waited_for_is_counted() -> None:
    before = tree_cpu_seconds()
    subprocess.run([sys.executable, "-c", BURN], check=True, capture_output=True)
    assert tree_cpu_seconds() - before >= 0.45


def test_a_running_child_is_counted() -> None:
    before = tree_cpu_seconds()
    child = subprocess.Popen(
        [sys.executable, "-c", BURN + "import sys\nsys.stdin.read()\n"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"done"
        assert tree_cpu_seconds() - before >= 0.45  # its burn, counted while it still runs
    finally:
        child.communicate(b"")


def test_a_grandchild_its_parent_waited_for_is_counted() -> None:
    before = tree_cpu_seconds()
    parent = (
        "import subprocess, sys\n"
        f"subprocess.run([sys.executable, '-c', {BURN!r}], check=True, capture_output=True)\n"
        "print('done', flush=True)\n"
        "sys.stdin.read()\n"
    )
    child = subprocess.Popen([sys.executable, "-c", parent], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == b"done"
        assert tree_cpu_seconds() - before >= 0.45  # in the running child's count of what it reaped
    finally:
        child.communicate(b"")
