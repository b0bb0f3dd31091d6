"""Every metric the processor exports is in the metrics table of docs/operations.md, named the
Prometheus way."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import REGISTRY

import processor.metrics  # noqa: F401 - registers the catalogue

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def _exported() -> dict[str, str]:
    return {f.name: f.type for f in REGISTRY.collect() if f.name.startswith("processor_")}


def test_names_follow_prometheus_conventions() -> None:
    for name, kind in _exported().items():
        assert re.fullmatch(r"processor_[a-z0-9_]+", name), name
        if kind == "counter":
            assert not name.endswith("_total"), name  # the client adds _total to the samples
        if kind == "histogram":
            assert name.endswith("_seconds"), name  # durations in base units
        assert not re.search(r"_(ms|milliseconds|kb|mb|mib)(_|$)", name), name


def test_every_metric_is_in_the_docs_table() -> None:
    text = OPERATIONS.read_text()
    section = text[text.index("\n## Metrics\n") : text.index("\n## Alerts")]
    documented = set(re.findall(r"`(processor_[a-z0-9_]+)", section))
    suffix = {"counter": "_total", "info": "_info"}
    exported = {n + suffix.get(kind, "") for n, kind in _exported().items()}
    assert exported - documented == set(), "metrics missing from the docs/operations.md table"
    assert documented - exported == set(), "docs/operations.md documents metrics that do not exist"
