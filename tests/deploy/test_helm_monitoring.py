"""Monitoring's install choices: which Prometheus picks up the ServiceMonitor and the PrometheusRule
(their labels), and who may scrape through the NetworkPolicy (networkPolicy.metrics).

Neither has a default that works: a default kube-prometheus-stack selects only objects labelled
`release: <its release name>`, and no scraper namespace can be assumed. So enabling them without the
choice stops the render with a message naming the value (templates/_helpers.tpl "ktp.validate"),
instead of installing monitoring that is silently never scraped. NOTES.txt says what was chosen.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.deploy.chart import (
    ALL_ON,
    BASE,
    CHART,
    PROMETHEUS_RELEASE,
    PROMETHEUS_RULE,
    SCRAPER_NAMESPACE,
    SERVICE_MONITOR,
    by_kind,
    render,
    render_error,
    run_helm,
    validate_all,
)

TYPICAL = "release: <your kube-prometheus-stack release>"
SCRAPERS = ["--set", f"networkPolicy.metrics.namespace={SCRAPER_NAMESPACE}"]


def _namespace_peers(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The NetworkPolicy's peers that admit other namespaces (the metrics scrapers here)."""
    (policy,) = by_kind(docs, "NetworkPolicy")
    (rule,) = policy["spec"]["ingress"]
    return [peer for peer in rule["from"] if "namespaceSelector" in peer]


def _one_line(error: str) -> str:
    return " ".join(error.split())


def test_service_monitor_without_labels_fails_naming_the_value(helm):
    error = _one_line(render_error(helm, *BASE, *SCRAPERS, "--set", "monitoring.serviceMonitor.enabled=true"))
    assert "monitoring.serviceMonitor.labels is empty" in error
    assert TYPICAL in error
    assert "--set monitoring.serviceMonitor.labels.release=" in error


def test_prometheus_rule_without_labels_fails_naming_the_value(helm):
    error = _one_line(render_error(helm, *BASE, "--set", "monitoring.prometheusRule.enabled=true"))
    assert "monitoring.prometheusRule.labels is empty" in error
    assert TYPICAL in error
    assert "--set monitoring.prometheusRule.labels.release=" in error


def test_labels_are_carried_by_the_monitoring_objects(helm, all_docs):
    for kind in ("ServiceMonitor", "PrometheusRule"):
        (obj,) = by_kind(all_docs, kind)
        labels = obj["metadata"]["labels"]
        assert labels["release"] == PROMETHEUS_RELEASE, kind
        assert labels["app.kubernetes.io/instance"] == "rel", kind  # the chart's own labels stay
    docs = render(
        helm,
        *BASE,
        *SCRAPERS,
        "--set", "monitoring.serviceMonitor.enabled=true",
        "--set", "monitoring.serviceMonitor.labels.release=prom-a",
        "--set", "monitoring.serviceMonitor.labels.team=data",
        "--set", "monitoring.prometheusRule.enabled=true",
        "--set", "monitoring.prometheusRule.labels.release=prom-b",
    )  # fmt: skip
    (sm,) = by_kind(docs, "ServiceMonitor")
    (rule,) = by_kind(docs, "PrometheusRule")
    assert {"release": "prom-a", "team": "data"}.items() <= sm["metadata"]["labels"].items()
    assert rule["metadata"]["labels"]["release"] == "prom-b"
    assert "team" not in rule["metadata"]["labels"]


def test_each_object_needs_only_its_own_labels(helm):
    """A PrometheusRule alone needs no ServiceMonitor choices, nor a scraper namespace."""
    docs = render(helm, *BASE, *PROMETHEUS_RULE)
    assert by_kind(docs, "PrometheusRule") and not by_kind(docs, "ServiceMonitor")
    assert _namespace_peers(docs) == []


def test_network_policy_without_scraper_namespace_fails(helm):
    labelled = [
        "--set", "monitoring.serviceMonitor.enabled=true",
        "--set", "monitoring.serviceMonitor.labels.release=kps",
    ]  # fmt: skip
    error = _one_line(render_error(helm, *BASE, *labelled))
    assert "admits no metrics scraper" in error
    assert "networkPolicy.metrics.namespace" in error and "networkPolicy.metrics.fromNamespaces" in error
    assert "no namespace is assumed" in error
    # without the policy there is nothing to admit through
    docs = render(helm, *BASE, *labelled, "--set", "networkPolicy.enabled=false")
    assert by_kind(docs, "ServiceMonitor") and not by_kind(docs, "NetworkPolicy")


def test_no_scraper_namespace_is_assumed(default_docs):
    assert _namespace_peers(default_docs) == []


def test_network_policy_admits_exactly_the_scraper_namespace(helm):
    docs = render(helm, *BASE, *SERVICE_MONITOR)
    validate_all(docs)
    assert _namespace_peers(docs) == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": SCRAPER_NAMESPACE}}}
    ]


def test_network_policy_scrapers_by_namespace_labels(helm):
    """fromNamespaces (label selectors) is the other way to name the scrapers; podLabels narrows both."""
    docs = render(
        helm,
        *BASE,
        "--set", "monitoring.serviceMonitor.enabled=true",
        "--set", "monitoring.serviceMonitor.labels.release=kps",
        "--set", "networkPolicy.metrics.fromNamespaces[0].team=observability",
        "--set", "networkPolicy.metrics.podLabels.app\\.kubernetes\\.io/name=prometheus",
    )  # fmt: skip
    validate_all(docs)
    assert _namespace_peers(docs) == [
        {
            "namespaceSelector": {"matchLabels": {"team": "observability"}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ]


def test_all_features_ci_values_make_the_choices(helm):
    docs = render(helm, "-f", str(CHART / "ci" / "all-features-values.yaml"))
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert by_kind(docs, kind)[0]["metadata"]["labels"]["release"]
    assert _namespace_peers(docs)


def test_lint_mode_only_logs_the_missing_choices(helm):
    """As for the other install-time requirements, `helm lint` renders in lint mode and only logs them."""
    values = [*BASE, "--set", "monitoring.serviceMonitor.enabled=true"]
    proc = run_helm(helm, "lint", "--strict", str(CHART), *values)
    assert "0 chart(s) failed" in proc.stdout


def _notes(helm: Path, tmp_path: Path, *values: str) -> str:
    """NOTES.txt as `helm install` prints it: `helm template` skips NOTES.txt, so a copy of the chart
    renders it through tpl into a manifest."""
    chart = tmp_path / "kafka-tiered-processor"
    shutil.copytree(CHART, chart)
    (chart / "notes.src").write_text((CHART / "templates" / "NOTES.txt").read_text())
    notes_yaml = 'notes: {{ tpl (.Files.Get "notes.src") . | toJson }}\n'
    (chart / "templates" / "notes.yaml").write_text(notes_yaml)
    only = ["--show-only", "templates/notes.yaml"]
    out = run_helm(helm, "template", "rel", str(chart), "--namespace", "tiered", *values, *only).stdout
    notes: str = yaml.safe_load(out)["notes"]
    return notes


def test_notes_say_where_metrics_are_scraped_and_the_labels(helm, tmp_path):
    notes = _notes(helm, tmp_path, *ALL_ON)
    name = "rel-kafka-tiered-processor"
    assert f"ServiceMonitor {name}: /metrics on port http" in notes
    assert f"{name}-worker, {name}-follower in namespace tiered" in notes
    assert f"its labels: release={PROMETHEUS_RELEASE} (your Prometheus's serviceMonitorSelector" in notes
    assert f"PrometheusRule {name}, its labels: release={PROMETHEUS_RELEASE}" in notes
    scrapers = f"admits scrapers from namespaces matching kubernetes.io/metadata.name={SCRAPER_NAMESPACE}"
    assert scrapers in notes


def test_notes_without_monitoring(helm, tmp_path):
    notes = _notes(helm, tmp_path, *BASE)
    assert "no ServiceMonitor (monitoring.serviceMonitor.enabled=false)" in notes
    assert "admits no metrics scraper" in notes
    assert "PrometheusRule" not in notes
