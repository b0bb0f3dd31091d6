"""Every metric the processor exports is in the README's table, named the Prometheus way."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import REGISTRY

import processor.metrics  # noqa: F401 - registers the catalogue

README = Path(__file__).resolve().parents[2] / "README.md"


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


def test_every_metric_is_in_the_readme_table() -> None:
    text = README.read_text()
    section = text[text.index("### Metrics") : text.index("### Alerts")]
    documented = set(re.findall(r"`(processor_[a-z0-9_]+)", section))
    suffix = {"counter": "_total", "info": "_info"}
    exported = {n + suffix.get(kind, "") for n, kind in _exported().items()}
    assert exported - documented == set(), "metrics missing from the README table"
    assert documented - exported == set(), "README documents metrics that do not exist"
