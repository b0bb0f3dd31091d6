"""CPU time of the processes behind a figure (the broker, the S3 server, a gateway or a worker, and the
benchmark's own consumer), read from ``/proc/<pid>/stat``: user plus system time of every thread of
the process, in clock ticks (10 ms)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Mapping
from pathlib import Path

from processor.devstack import stack

CONSUMER = "consumer"  # this process: the confluent-kafka consumer being measured runs in it
ORDER = ("broker", "S3 server", "gateway", "worker", CONSUMER)  # how the figures list them
_HZ = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU-seconds ``pid`` has used so far (0.0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = stat.rsplit(")", 1)[1].split()  # after the command name: field 3 (state) is fields[0]
    return (int(fields[11]) + int(fields[12])) / _HZ  # fields 14 (utime) and 15 (stime)


def stack_pids(info: stack.StackInfo) -> dict[str, int]:
    """The stack's servers by the names the figures use: ``broker`` and ``S3 server``."""
    pids = {"broker": info.pids.get(info.broker)}
    pids["S3 server"] = info.pids.get("weed")
    return {name: pid for name, pid in pids.items() if pid}


def snapshot(pids: Mapping[str, int]) -> dict[str, float]:
    """CPU-seconds used so far by each named process, and by this one under :data:`CONSUMER`."""
    out = {name: cpu_seconds(pid) for name, pid in pids.items()}
    out[CONSUMER] = time.process_time()
    return out


def used(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {name: after[name] - before.get(name, 0.0) for name in after}


def per_gb(cpu: Mapping[str, float], payload_bytes: int) -> dict[str, float]:
    gb = payload_bytes / 1e9
    return {name: seconds / gb for name, seconds in cpu.items()}


def median_each(samples: list[dict[str, float]]) -> dict[str, float]:
    """The median of each process's figure over runs (a process absent from a run counts as 0)."""
    names = sorted({name for sample in samples for name in sample}, key=_rank)
    return {name: statistics.median(s.get(name, 0.0) for s in samples) for name in names}


def servers(cpu: Mapping[str, float]) -> float:
    """What the servers spent: everything but the benchmark's own consumer."""
    return sum(seconds for name, seconds in cpu.items() if name != CONSUMER)


def breakdown(cpu: Mapping[str, float]) -> str:
    return ", ".join(f"{name} {cpu[name]:.2f}" for name in sorted(cpu, key=_rank))


def _rank(name: str) -> int:
    return ORDER.index(name) if name in ORDER else len(ORDER)
