"""The Grafana dashboard shipped in the chart: valid JSON, every query names only metrics that
processor/metrics.py defines (read from the module, not from a copied list) with labels they carry,
and the chart ships it, opt-in, as a ConfigMap with the sidecar's label."""

from __future__ import annotations

import json
import re
import subprocess
from typing import Any

import pytest
from prometheus_client.metrics import MetricWrapperBase

from tests.deploy.chart import BASE, CHART, by_kind, named, render, validate_all

DASHBOARD = CHART / "dashboards" / "kafka-tiered-processor.json"
# Labels Prometheus attaches to every scraped series (the Prometheus Operator's target labels).
TARGET_LABELS = {"namespace", "pod", "job", "instance", "service", "container", "endpoint"}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool", "offset",
    "sum", "max", "min", "avg", "count", "rate", "increase", "irate", "histogram_quantile", "vector",
    "label_values", "le",
}  # fmt: skip


def exported_series() -> dict[str, set[str]]:
    """Series name -> label names, for every metric object defined in processor/metrics.py."""
    import processor.metrics as catalogue

    series: dict[str, set[str]] = {}
    for value in vars(catalogue).values():
        if not isinstance(value, MetricWrapperBase):
            continue
        name, kind, labels = value._name, value._type, set(value._labelnames)
        if kind == "counter":
            series[f"{name}_total"] = labels
        elif kind == "histogram":
            for suffix in ("_bucket", "_sum", "_count"):
                series[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
        elif kind == "info":  # its labels are the info's keys, set once at import
            series[f"{name}_info"] = labels | set(next(iter(value.collect())).samples[0].labels)
        else:
            series[name] = labels
    assert len(series) > 20, "the catalogue was read"
    return series


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _queries(dashboard: dict[str, Any]) -> list[tuple[str, str]]:
    found = [(p["title"], t["expr"]) for p in dashboard["panels"] for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            found.append((f"${variable['name']}", variable["query"]["query"]))
    return found


def test_dashboard_is_grafana_json(dashboard):
    assert dashboard["uid"] == "kafka-tiered-processor"
    assert {"title", "panels", "templating", "schemaVersion", "time"} <= set(dashboard)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "pod"} <= variables
    for panel in dashboard["panels"]:
        assert {"h", "w", "x", "y"} <= set(panel["gridPos"])
        if panel["type"] == "row":
            continue
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            assert 'namespace="$namespace"' in target["expr"], (panel["title"], target["expr"])


def test_queries_name_only_exported_metrics_and_their_labels(dashboard):
    series = exported_series()
    used: set[str] = set()
    for title, expr in _queries(dashboard):
        names = set()
        for metric, matchers in re.findall(
            r"\b([a-z_][a-z0-9_]*)\s*(\{[^}]*\})?", re.sub(r'"[^"]*"', '""', expr)
        ):
            if metric in PROMQL_WORDS or not metric.startswith("processor_"):
                continue
            assert metric in series, f"{title}: {metric} is not a metric of processor/metrics.py"
            names.add(metric)
            for label in re.findall(r"([a-z_]+)\s*=~?", matchers):
                assert label in series[metric] | TARGET_LABELS, f"{title}: {metric} has no label {label}"
        grouped = {
            label.strip() for group in re.findall(r"\bby\s*\(([^)]*)\)", expr) for label in group.split(",")
        }
        carried = set().union(*(series[n] for n in names)) | TARGET_LABELS if names else TARGET_LABELS
        assert grouped <= carried, f"{title}: groups by {grouped - carried}, which its metrics do not carry"
        assert names or "vector(" in expr, f"{title}: no processor metric in {expr}"
        used |= names
    assert len(used) >= 20, "the dashboard covers the catalogue"


def test_chart_ships_the_dashboard_opt_in(helm):
    assert not [
        d for d in by_kind(render(helm, *BASE), "ConfigMap") if d["metadata"]["name"].endswith("-dashboard")
    ]
    docs = render(
        helm,
        *BASE,
        "--set", "monitoring.grafanaDashboard.enabled=true",
        "--set", "monitoring.grafanaDashboard.annotations.grafana_folder=Kafka",
    )  # fmt: skip
    validate_all(docs)
    config = named(docs, "ConfigMap", "-dashboard")
    assert config["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config["metadata"]["annotations"] == {"grafana_folder": "Kafka"}
    assert json.loads(config["data"]["kafka-tiered-processor.json"]) == json.loads(DASHBOARD.read_text())
    other = render(
        helm,
        *BASE,
        "--set", "monitoring.grafanaDashboard.enabled=true",
        "--set", "monitoring.grafanaDashboard.namespace=monitoring",
        "--set", "monitoring.grafanaDashboard.labels.grafana_dashboard=kafka",
    )  # fmt: skip
    config = named(other, "ConfigMap", "-dashboard")
    assert config["metadata"]["namespace"] == "monitoring"
    assert config["metadata"]["labels"]["grafana_dashboard"] == "kafka"


def test_queries_parse_as_promql(dashboard, tmp_path):
    """promtool parses every panel query (as a recording rule, Grafana's variables filled in)."""
    from tests.deploy.debian_tools import promtool
    from tests.deploy.k8s_tools import ToolUnavailable

    try:
        tool = promtool()
    except ToolUnavailable as exc:
        pytest.skip(f"promtool cannot be fetched here: {exc}")
    rules = [
        {"record": f"dashboard:query_{i}", "expr": expr.replace("$namespace", "tiered").replace("$pod", ".*")}
        for i, (title, expr) in enumerate(_queries(dashboard))
        if not title.startswith("$")  # label_values() of a variable is Grafana's, not PromQL
    ]
    (tmp_path / "queries.yaml").write_text(json.dumps({"groups": [{"name": "dashboard", "rules": rules}]}))
    proc = subprocess.run(
        [str(tool), "check", "rules", "queries.yaml"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(rules)} rules found" in proc.stdout
