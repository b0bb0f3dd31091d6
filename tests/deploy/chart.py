"""Rendering the Helm chart for the deploy tests: helm from k8s_tools, manifests as dicts."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate

from processor.config import ENV_PREFIX, Settings
from tests.deploy.k8s_tools import ROOT

CHART = ROOT / "helm" / "kafka-tiered-processor"
K8S_VERSION = "1.30.0"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
TOPICS = ["--set", "config.topics={orders,payments}"]
# No image is published: image.repository is required (the user's own build, pushed).
REPOSITORY = "registry.example.com/my-team/kafka-tiered-processor"
IMAGE = ["--set", f"image.repository={REPOSITORY}"]
# The smallest values that render: the image, source topics and the read API's token (closed by default).
BASE = [*IMAGE, *TOPICS, "--set", "credentials.webToken.existingSecret=web-token"]
# Monitoring's install choices, which have no defaults: the labels the Prometheus selects the
# ServiceMonitor and the PrometheusRule by (a kube-prometheus-stack's `release: <its release>`), and the
# namespace the NetworkPolicy (on by default) admits scrapers from.
PROMETHEUS_RELEASE = "kube-prometheus-stack"
SCRAPER_NAMESPACE = "observability"
SERVICE_MONITOR = [
    "--set", "monitoring.serviceMonitor.enabled=true",
    "--set", f"monitoring.serviceMonitor.labels.release={PROMETHEUS_RELEASE}",
    "--set", f"networkPolicy.metrics.namespace={SCRAPER_NAMESPACE}",
]  # fmt: skip
PROMETHEUS_RULE = [
    "--set", "monitoring.prometheusRule.enabled=true",
    "--set", f"monitoring.prometheusRule.labels.release={PROMETHEUS_RELEASE}",
]  # fmt: skip
ALL_ON = [
    *BASE,
    "--set", "followers.enabled=true",
    "--set", "audit.enabled=true",
    *SERVICE_MONITOR,
    *PROMETHEUS_RULE,
    "--set", "credentials.s3.existingSecret=s3-creds",
    "--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/r",
]  # fmt: skip
# Settings the security branch adds to processor/config/settings.py (the chart renders them already); until
# they are fields there, the checks of rendered names against Settings skip them by name.
SECURITY_SETTINGS = {
    "PROCESSOR_SSL_CERTFILE",
    "PROCESSOR_SSL_KEYFILE",
    "PROCESSOR_SSL_KEY_PASSWORD",
    "PROCESSOR_SSL_CHECK_HOSTNAME",
    "PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER",
    "PROCESSOR_SASL_OAUTH_AWS_REGION",
    "PROCESSOR_SASL_OAUTH_AWS_ROLE_ARN",
    "PROCESSOR_WEB_AUTH",
}
# Environment variables holding secrets: never in the ConfigMap, always a secretKeyRef.
SECRET_NAME = re.compile(r"PASSWORD|SECRET|_TOKEN$|_KEY(_ID)?$")


def run_helm(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def render(helm: Path, *values: str, chart: Path = CHART) -> list[dict[str, Any]]:
    out = run_helm(helm, "template", "rel", str(chart), "--namespace", "tiered", *values).stdout
    return [doc for doc in _load_all(out) if doc]


def render_error(helm: Path, *values: str) -> str:
    """Render that must fail; its error text."""
    proc = run_helm(helm, "template", "rel", str(CHART), "--namespace", "tiered", *values, check=False)
    assert proc.returncode != 0, "the render was expected to fail"
    return proc.stderr


def _load_all(text: str) -> list[Any]:
    import yaml

    return list(yaml.safe_load_all(text))


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def named(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    matches = [d for d in by_kind(docs, kind) if d["metadata"]["name"].endswith(suffix)]
    assert len(matches) == 1, f"one {kind} named *{suffix}, found {len(matches)}"
    return matches[0]


def pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every pod spec: workload templates and the helm test Pods."""
    specs = []
    for d in docs:
        if d["kind"] in {"StatefulSet", "Deployment"}:
            specs.append(d["spec"]["template"]["spec"])
        elif d["kind"] == "CronJob":
            specs.append(d["spec"]["jobTemplate"]["spec"]["template"]["spec"])
        elif d["kind"] == "Pod":
            specs.append(d["spec"])
    return specs


def validate_all(docs: list[dict[str, Any]]) -> int:
    """Validate every non-CRD manifest against the Kubernetes schemas (strict); how many were checked."""
    checked = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        checked += 1
    return checked


def config_map(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The settings ConfigMap's data (not the dashboard's)."""
    data: dict[str, str] = next(
        d for d in by_kind(docs, "ConfigMap") if "PROCESSOR_TOPICS" in d.get("data", {})
    )["data"]
    return data


def rendered_setting_names(docs: list[dict[str, Any]]) -> set[str]:
    names = set(config_map(docs))
    for spec in pod_specs(docs):
        for c in spec["containers"]:
            names |= {e["name"] for e in c.get("env", []) if e["name"].startswith(ENV_PREFIX)}
    return names


def unknown_settings(names: set[str]) -> set[str]:
    """Rendered PROCESSOR_* names that are no Settings field (the security branch's aside)."""
    unknown = {n for n in names if n.removeprefix(ENV_PREFIX).lower() not in Settings.model_fields}
    pending = unknown & SECURITY_SETTINGS
    return unknown - pending
