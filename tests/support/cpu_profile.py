"""Where the suite's CPU goes: a pytest plugin writing each test's CPU-seconds and wall seconds.

The suite runs on few cores, so its time is bound by CPU more than by waiting; a test's wall time
says little about what it costs the others running beside it. Loaded on demand::

    SUITE_CPU_PROFILE=/tmp/cpu .venv/bin/pytest -p tests.support.cpu_profile -n 3 ...

writes ``/tmp/cpu.<pid>`` per worker, one line per test: CPU-seconds, wall seconds, node id. A test's
CPU is that of the worker's whole process tree around it (the worker, its servers, the workers and
JVMs it starts, and the children each of them waited for), read from /proc (Linux only). A child that
exits without anyone in the tree waiting for it takes its time with it: read the sums per module
rather than single lines. Without the variable, the plugin does nothing. (Not a PROCESSOR_
name: the processor refuses PROCESSOR_ variables it does not read, and the tests' children would.)
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

ENV = "SUITE_CPU_PROFILE"
_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_out: IO[str] | None = None


def _processes() -> dict[int, list[tuple[int, float]]]:
    """Each live process's children with their CPU-seconds, by parent pid."""
    children: dict[int, list[tuple[int, float]]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:  # gone since the listing
            continue
        fields = stat.rsplit(")", 1)[1].split()
        # utime + stime + those of the children it waited for (cutime + cstime): a process the
        # JVM or a worker forked and reaped stays counted in its parent's
        cpu = sum(int(f) for f in fields[11:15]) / _TICKS
        children.setdefault(int(fields[1]), []).append((int(entry), cpu))
    return children


def tree_cpu_seconds() -> float:
    """CPU-seconds of this process, its live descendants and the children it waited for."""
    children = _processes()
    total, todo = 0.0, [os.getpid()]
    while todo:
        for child, cpu in children.get(todo.pop(), []):
            total += cpu
            todo.append(child)
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        usage = resource.getrusage(who)
        total += usage.ru_utime + usage.ru_stime
    return total


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    global _out
    target = os.environ.get(ENV)
    if not target:
        yield
        return
    if _out is None:
        _out = open(f"{target}.{os.getpid()}", "a")  # noqa: SIM115 (open for the session)
    cpu, wall = tree_cpu_seconds(), time.monotonic()
    yield
    _out.write(f"{tree_cpu_seconds() - cpu:.2f}\t{time.monotonic() - wall:.2f}\t{item.nodeid}\n")
    _out.flush()
