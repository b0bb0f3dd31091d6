"""The chart's alerts: every rule is checked by promtool, fires on the series it is about (promtool's
rule unit tests, one case per alert), keeps `namespace` in every aggregation, names only metrics
that exist, and names a runbook page that exists in docs/runbooks/.

promtool comes from Debian's ``promtool`` package (tests/deploy/debian_tools.py).
"""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import BASE, PROMETHEUS_RULE, by_kind, render
from tests.deploy.debian_tools import promtool
from tests.deploy.k8s_tools import ROOT, ToolUnavailable

RUNBOOKS = ROOT / "docs" / "runbooks"
RUNBOOK_SECTIONS = ("## What it means", "## How to check", "## What to do")
NS = "tiered"
FULL = "rel-kafka-tiered-processor"
WORKER = f'namespace="{NS}", job="{FULL}-worker", pod="{FULL}-worker-0"'
# Metrics the alerts take from kube-state-metrics, the kubelet and Prometheus itself.
EXTERNAL_METRICS = {
    "up",
    "kube_pod_container_status_restarts_total",
    "kubelet_volume_stats_available_bytes",
    "kubelet_volume_stats_capacity_bytes",
    "kube_job_failed",
    "kube_job_created",
    "kube_cronjob_status_last_successful_time",
    "kube_cronjob_created",
}
PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "bool",
    "offset", "sum", "max", "min", "avg", "count", "rate", "increase", "deriv", "absent", "time",
    "predict_linear", "humanizeDuration", "printf",
}  # fmt: skip


@pytest.fixture(scope="module")
def rules(helm) -> list[dict[str, Any]]:
    docs = render(
        helm,
        *BASE,
        "--namespace", NS,
        "--set", "audit.enabled=true",
        *PROMETHEUS_RULE,
    )  # fmt: skip
    (rule,) = by_kind(docs, "PrometheusRule")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


@pytest.fixture(scope="module")
def tool() -> Path:
    try:
        return promtool()
    except ToolUnavailable as exc:
        pytest.skip(f"promtool cannot be fetched here: {exc}")


def _alerts(groups: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["alert"]: r for g in groups for r in g["rules"]}


def test_the_alert_catalogue(rules):
    assert set(_alerts(rules)) == {
        "TieredStorageCopyLagGrowing",
        "TieredStorageCopiesFailing",
        "TieredStorageBufferFull",
        "TieredStorageDataLoss",
        "TieredStorageSourceFetchErrors",
        "TieredStorageStorageUnreachable",
        "TieredStorageDeletionsFailing",
        "TieredStorageFollowerBehind",
        "TieredStorageTargetAbsent",
        "TieredStorageTargetDown",
        "TieredStoragePodNotReady",
        "TieredStoragePodRestarting",
        "TieredStorageDataVolumeFillingUp",
        "TieredStorageDataVolumeAlmostFull",
        "TieredStorageAuditFailed",
        "TieredStorageAuditNotClean",
    }


def test_audit_alerts_only_with_the_audit_cronjob(helm):
    docs = render(helm, *BASE, *PROMETHEUS_RULE)
    assert not any(
        name.startswith("TieredStorageAudit")
        for name in _alerts(by_kind(docs, "PrometheusRule")[0]["spec"]["groups"])
    )


def test_every_alert_names_its_runbook(rules):
    """By default (runbookBaseUrl empty) the `runbook` annotation says how to print the page from the
    chart's runbooks ConfigMap; test_helm_runbooks.py checks the command and runbook_url."""
    for name, rule in _alerts(rules).items():
        assert set(rule) <= {"alert", "expr", "for", "labels", "annotations"}
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert set(rule["annotations"]) == {"summary", "description", "runbook"}, name
        assert f"{{.data.{name}\\.md}}" in rule["annotations"]["runbook"], name
        page = (RUNBOOKS / f"{name}.md").read_text()
        assert page.startswith(f"# {name}\n"), name
        for section in RUNBOOK_SECTIONS:
            assert section in page, f"{name}.md lacks {section!r}"
    pages = {p.stem for p in RUNBOOKS.glob("TieredStorage*.md")}
    assert pages == set(_alerts(rules)), "one runbook page per alert, no page without its alert"


def test_every_aggregation_keeps_namespace(rules):
    for name, rule in _alerts(rules).items():
        expr = rule["expr"]
        assert "without" not in expr, name
        aggregations = re.findall(r"\b(sum|max|min|avg|count)\s*(by\s*\(([^)]*)\))?\s*\(", expr)
        assert aggregations or expr.startswith("absent("), name
        for op, by, labels in aggregations:
            assert by, f"{name}: {op}(...) without by (namespace, ...)"
            assert "namespace" in [label.strip() for label in labels.split(",")], f"{name}: {op} {by}"
        for on in re.findall(r"\bon\s*\(([^)]*)\)", expr):
            assert "namespace" in on, f"{name}: on({on})"


def test_alerts_name_only_metrics_that_exist(rules):
    from prometheus_client import REGISTRY

    import processor.metrics  # noqa: F401 - registers the catalogue

    exported = {family.name for family in REGISTRY.collect()}
    for name, rule in _alerts(rules).items():
        expr = re.sub(r'"[^"]*"', '""', rule["expr"])  # label values are no metric names
        expr = re.sub(r"\{[^}]*\}|\[[^]]*\]", "", expr)  # matchers, ranges
        expr = re.sub(
            r"\b(by|on|ignoring|without|group_left|group_right)\s*\([^)]*\)", "", expr
        )  # label lists
        words = set(re.findall(r"\b([a-z_][a-z0-9_]*)\b", expr)) - PROMQL_WORDS
        for metric in words:
            if metric.startswith("processor_"):
                assert metric.removesuffix("_total") in exported, f"{name} uses unknown metric {metric}"
            else:
                assert metric in EXTERNAL_METRICS, (
                    f"{name} uses {metric}, neither ours nor a known exporter's"
                )


def _promtool(tool: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(tool), *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=False
    )


def test_promtool_checks_the_rules(rules, tool, tmp_path):
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": rules}))
    proc = _promtool(tool, "check", "rules", "rules.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS: 16 rules found" in proc.stdout


def _case(alert: str, series: dict[str, str], eval_time: str, firing: list[dict[str, str]]) -> dict[str, Any]:
    return {
        "interval": "1m",
        "input_series": [{"series": s, "values": v} for s, v in series.items()],
        "alert_rule_test": [
            {
                "eval_time": eval_time,
                "alertname": alert,
                "exp_alerts": [{"exp_labels": labels} for labels in firing],
            }
        ],
    }


def _labels(severity: str = "warning", **labels: str) -> dict[str, str]:
    return {"severity": severity, "namespace": NS, **labels}


POD = {"pod": f"{FULL}-worker-0"}
PVC_WORKER = f'namespace="{NS}", persistentvolumeclaim="data-{FULL}-worker-0"'
PVC_AUDIT = f'namespace="{NS}", persistentvolumeclaim="{FULL}-audit"'
RESTARTS = (
    f'kube_pod_container_status_restarts_total{{namespace="{NS}", pod="{FULL}-worker-0", container="w"}}'
)
PART = {"topic": "orders", "partition": "0"}
JOB_NEW = f"{FULL}-audit-29000060"
JOB_OLD = f"{FULL}-audit-29000000"
AUDIT_JOBS = f'namespace="{NS}", job="kube-state-metrics"'
CASES = [
    _case(
        "TieredStorageCopyLagGrowing",
        {
            f'processor_remote_copy_lag_seconds{{{WORKER}, topic="orders", partition="0"}}': "0+60x40",
            # old, not growing: quiet
            f'processor_remote_copy_lag_seconds{{{WORKER}, topic="orders", partition="1"}}': "1000x40",
        },
        "30m",
        [_labels(**PART)],
    ),
    _case(
        "TieredStorageCopiesFailing",
        {f"processor_remote_copy_errors_total{{{WORKER}}}": "0+1x30"},
        "20m",
        [_labels(**POD)],
    ),
    _case(
        "TieredStorageBufferFull",
        {f"processor_consumption_paused{{{WORKER}}}": "1x30"},
        "20m",
        [_labels(**POD)],
    ),
    _case(
        "TieredStorageDataLoss",
        {f'processor_offsets_lost_total{{{WORKER}, topic="orders", partition="0"}}': "0 0 0 5 5 5"},
        "5m",
        [_labels("critical", **PART)],
    ),
    _case(
        "TieredStorageSourceFetchErrors",
        {f'processor_source_fetch_errors_total{{{WORKER}, error="KafkaConnectionError"}}': "0+2x30"},
        "20m",
        [_labels(error="KafkaConnectionError", **POD)],
    ),
    _case(
        "TieredStorageStorageUnreachable",
        {f"processor_storage_reachable{{{WORKER}}}": "1 0x20"},
        "10m",
        [_labels(**POD)],
    ),
    _case(
        "TieredStorageDeletionsFailing",
        {f"processor_remote_delete_failures_total{{{WORKER}}}": "0+1x60"},
        "50m",
        [_labels(**POD)],
    ),
    _case(
        "TieredStorageFollowerBehind",
        {f'processor_follower_lag_records{{{WORKER}, partition="0"}}': "20000x30"},
        "20m",
        [_labels(**POD)],
    ),
    _case(
        "TieredStorageTargetAbsent",
        {f'up{{namespace="{NS}", job="{FULL}-follower", pod="{FULL}-follower-x"}}': "1x30"},
        "15m",
        [_labels(job=f"{FULL}-worker")],
    ),
    _case(
        "TieredStorageTargetDown",
        {f"up{{{WORKER}}}": "1 0x10"},
        "10m",
        [_labels(job=f"{FULL}-worker", **POD)],
    ),
    _case("TieredStoragePodNotReady", {f"processor_ready{{{WORKER}}}": "0x20"}, "15m", [_labels(**POD)]),
    _case(
        "TieredStoragePodRestarting",
        {RESTARTS: "0+1x30"},
        "10m",
        [_labels(**POD)],
    ),
    _case(
        "TieredStorageDataVolumeFillingUp",
        {
            f"kubelet_volume_stats_capacity_bytes{{{PVC_WORKER}}}": "1000x400",
            f"kubelet_volume_stats_available_bytes{{{PVC_WORKER}}}": "500-1x400",
        },
        "330m",
        [_labels(persistentvolumeclaim=f"data-{FULL}-worker-0")],
    ),
    _case(
        "TieredStorageDataVolumeAlmostFull",
        {
            f"kubelet_volume_stats_capacity_bytes{{{PVC_AUDIT}}}": "1000x20",
            f"kubelet_volume_stats_available_bytes{{{PVC_AUDIT}}}": "50x20",
        },
        "10m",
        [_labels("critical", persistentvolumeclaim=f"{FULL}-audit")],
    ),
    _case(
        "TieredStorageAuditFailed",
        {
            f'kube_job_failed{{{AUDIT_JOBS}, job_name="{JOB_OLD}", condition="true"}}': "0x10",
            f'kube_job_created{{{AUDIT_JOBS}, job_name="{JOB_OLD}"}}': "500x10",
            f'kube_job_failed{{{AUDIT_JOBS}, job_name="{JOB_NEW}", condition="true"}}': "0 1x9",
            f'kube_job_created{{{AUDIT_JOBS}, job_name="{JOB_NEW}"}}': "1000x10",
        },
        "5m",
        [_labels(job_name=JOB_NEW)],
    ),
    # the older run failed, the newer one did not: nothing to say
    _case(
        "TieredStorageAuditFailed",
        {
            f'kube_job_failed{{{AUDIT_JOBS}, job_name="{JOB_OLD}", condition="true"}}': "1x10",
            f'kube_job_created{{{AUDIT_JOBS}, job_name="{JOB_OLD}"}}': "500x10",
            f'kube_job_failed{{{AUDIT_JOBS}, job_name="{JOB_NEW}", condition="true"}}': "0x10",
            f'kube_job_created{{{AUDIT_JOBS}, job_name="{JOB_NEW}"}}': "1000x10",
        },
        "5m",
        [],
    ),
    _case(
        "TieredStorageAuditNotClean",
        {f'kube_cronjob_status_last_successful_time{{{AUDIT_JOBS}, cronjob="{FULL}-audit"}}': "0x500"},
        "7h",
        [_labels(cronjob=f"{FULL}-audit")],
    ),
    # never succeeded at all: counted from the CronJob's creation
    _case(
        "TieredStorageAuditNotClean",
        {f'kube_cronjob_created{{{AUDIT_JOBS}, cronjob="{FULL}-audit"}}': "0x500"},
        "7h",
        [_labels(cronjob=f"{FULL}-audit")],
    ),
    # a clean run an hour ago: quiet
    _case(
        "TieredStorageAuditNotClean",
        {f'kube_cronjob_status_last_successful_time{{{AUDIT_JOBS}, cronjob="{FULL}-audit"}}': "21600x500"},
        "7h",
        [],
    ),
]


def test_every_alert_fires_on_its_series(rules, tool, tmp_path):
    """promtool's rule unit tests: each alert fires with the expected labels on the series it
    watches (and the negative cases stay quiet). Annotations are left out here: promtool compares
    them verbatim; test_promtool_checks_the_rules parses their templates."""
    groups = copy.deepcopy(rules)
    for group in groups:
        for rule in group["rules"]:
            rule.pop("annotations", None)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
    cases = copy.deepcopy(CASES)
    assert {case["alert_rule_test"][0]["alertname"] for case in cases} == set(_alerts(rules))
    for case in cases:  # before each fires: quiet
        case["alert_rule_test"].insert(0, {**case["alert_rule_test"][0], "eval_time": "0m", "exp_alerts": []})
    tests = {"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": cases}
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    proc = _promtool(tool, "test", "rules", "tests.yaml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
