"""Figures, ratios, the printed table and the JSON file."""

from __future__ import annotations

import json
import os
import platform
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path


@dataclass
class Figure:
    section: str
    name: str
    value: float
    unit: str
    baseline_name: str = ""
    baseline: float | None = None
    ratio: float | None = None  # value / baseline, or baseline / value for "lower is better"
    target: str = ""
    met: bool | None = None
    note: str = ""
    broker: str = ""  # the stack's broker the figure was measured on ("kafka" or "tansu")


@dataclass
class Report:
    figures: list[Figure] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    broker: str = ""  # stamped on every figure added while it is set
    load: list[tuple[float, float, float]] = field(default_factory=lambda: [os.getloadavg()])

    def add(self, figure: Figure) -> Figure:
        if not figure.broker:
            figure.broker = self.broker
        self.figures.append(figure)
        print(format_row(figure), flush=True)
        return figure

    def write(self, path: Path) -> None:
        doc = {
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.started)),
            "machine": {
                "python": platform.python_version(),
                "cpu_count": os.cpu_count(),
                "cpu_model": cpu_model(),
                # the load averages (1, 5, 15 min) when the run started and when it ended
                "load": [*self.load, os.getloadavg()],
            },
            "figures": [asdict(f) for f in self.figures],
        }
        path.write_text(json.dumps(doc, indent=2))

    def table(self) -> str:
        head = (
            f"{'section':10} {'broker':6} {'figure':38} {'value':>14} {'baseline':>30} {'ratio':>7}  target"
        )
        return "\n".join([head, "-" * len(head), *(format_row(f) for f in self.figures)])


def _num(v: float, unit: str) -> str:
    if abs(v) >= 1000:
        return f"{v:,.0f} {unit}"
    return f"{v:.3g} {unit}"


def format_row(f: Figure) -> str:
    base = f"{f.baseline_name} {_num(f.baseline, f.unit)}" if f.baseline is not None else ""
    ratio = f"{f.ratio:.2f}" if f.ratio is not None else ""
    verdict = "" if f.met is None else (" ok" if f.met else " MISSED")
    value = _num(f.value, f.unit)
    note = f"  ({f.note})" if f.note else ""
    head = f"{f.section:10} {f.broker:6} {f.name:38}"
    return f"{head} {value:>14} {base:>30} {ratio:>7}  {f.target}{verdict}{note}"


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    k = (len(ordered) - 1) * p / 100
    lo, hi = int(k), min(int(k) + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (k - lo)


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor()
