"""The chart's operational values: resources, scheduling, extra volumes, the audit's volume, the
`helm test` hooks, and the chart as a subchart (Helm's `global` values)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.chart import (
    BASE,
    CHART,
    REPOSITORY,
    by_kind,
    named,
    pod_specs,
    render,
    run_helm,
    validate_all,
)

EVERYTHING = [*BASE, "--set", "followers.enabled=true", "--set", "audit.enabled=true"]


def _pod(docs: list[dict[str, Any]], kind: str, suffix: str) -> dict[str, Any]:
    doc = named(docs, kind, suffix)
    if kind == "CronJob":
        spec: dict[str, Any] = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    if kind == "Pod":
        pod: dict[str, Any] = doc["spec"]
        return pod
    template: dict[str, Any] = doc["spec"]["template"]["spec"]
    return template


def test_free_form_resources_replace_the_derived_ones(helm):
    docs = render(
        helm,
        *EVERYTHING,
        "--set", "worker.resources.requests.cpu=1500m",
        "--set", "worker.resources.requests.memory=3Gi",
        "--set", "worker.resources.limits.memory=3Gi",
        "--set", "followers.resources.limits.memory=1Gi",
        "--set", "audit.resources.requests.memory=8Gi",
    )  # fmt: skip
    validate_all(docs)
    worker = _pod(docs, "StatefulSet", "-worker")["containers"][0]["resources"]
    assert worker == {"requests": {"cpu": "1500m", "memory": "3Gi"}, "limits": {"memory": "3Gi"}}
    assert _pod(docs, "Deployment", "-follower")["containers"][0]["resources"] == {
        "limits": {"memory": "1Gi"}
    }
    assert _pod(docs, "CronJob", "-audit")["containers"][0]["resources"] == {"requests": {"memory": "8Gi"}}


def test_scheduling_for_workers_followers_and_the_audit(helm, tmp_path):
    values: dict[str, Any] = {
        "worker": {
            "nodeSelector": {"pool": "archive"},
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "DoNotSchedule",
                }
            ],
        },
        "followers": {
            "tolerations": [
                {"key": "dedicated", "operator": "Equal", "value": "reads", "effect": "NoSchedule"}
            ],
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["reads"]}]}
                        ]
                    }
                }
            },
            "topologySpreadConstraints": [
                {
                    "maxSkew": 2,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"custom": "yes"}},
                }
            ],
        },
        "audit": {"nodeSelector": {"pool": "batch"}, "tolerations": [{"key": "spot", "operator": "Exists"}]},
    }
    file = tmp_path / "scheduling.yaml"
    file.write_text(yaml.safe_dump(values))
    docs = render(helm, *EVERYTHING, "-f", str(file))
    validate_all(docs)
    worker = _pod(docs, "StatefulSet", "-worker")
    assert worker["nodeSelector"] == {"pool": "archive"}
    (spread,) = worker["topologySpreadConstraints"]
    labels = named(docs, "StatefulSet", "-worker")["spec"]["selector"]["matchLabels"]
    assert spread["labelSelector"] == {"matchLabels": labels}  # filled in with the workers' own
    assert "podAntiAffinity" in worker["affinity"]  # the default spread across nodes stays
    follower = _pod(docs, "Deployment", "-follower")
    assert follower["tolerations"] == values["followers"]["tolerations"]
    assert follower["affinity"] == values["followers"]["affinity"]
    assert follower["topologySpreadConstraints"][0]["labelSelector"] == {"matchLabels": {"custom": "yes"}}
    audit = _pod(docs, "CronJob", "-audit")
    assert audit["nodeSelector"] == {"pool": "batch"}
    assert audit["tolerations"] == [{"key": "spot", "operator": "Exists"}]


def test_extra_volumes_in_every_pod(helm, tmp_path):
    values: dict[str, Any] = {
        "extraVolumes": [{"name": "token-provider", "configMap": {"name": "oauth-provider"}}],
        "extraVolumeMounts": [{"name": "token-provider", "mountPath": "/opt/provider", "readOnly": True}],
    }
    file = tmp_path / "volumes.yaml"
    file.write_text(yaml.safe_dump(values))
    docs = render(helm, *EVERYTHING, "-f", str(file))
    validate_all(docs)
    specs = pod_specs(docs)
    assert len(specs) == 5
    for spec in specs:
        assert values["extraVolumes"][0] in spec["volumes"]
        for c in spec["containers"]:
            assert values["extraVolumeMounts"][0] in c["volumeMounts"], c["name"]


def test_audit_findings_on_a_persistent_volume(helm):
    docs = render(
        helm, *EVERYTHING, "--set", "audit.verifyObjects=true", "--set", "audit.persistence.size=20Gi"
    )
    validate_all(docs)
    claim = named(docs, "PersistentVolumeClaim", "-audit")
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert claim["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    audit = _pod(docs, "CronJob", "-audit")
    container = audit["containers"][0]
    assert container["args"] == ["audit", "--once", "--verify-objects"]
    data = next(m for m in container["volumeMounts"] if m["mountPath"] == "/data")
    volume = next(v for v in audit["volumes"] if v["name"] == data["name"])
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    job = named(docs, "CronJob", "-audit")["spec"]["jobTemplate"]["spec"]
    (rule,) = job["podFailurePolicy"]["rules"]
    assert rule["action"] == "FailJob" and rule["onExitCodes"]["values"] == [1, 2]  # findings: no rerun
    assert audit["restartPolicy"] == "Never"


def test_audit_volume_choices(helm):
    existing = render(
        helm,
        *EVERYTHING,
        "--set",
        "audit.persistence.existingClaim=audit-data",
        "--set",
        "audit.mode=deployment",
    )
    validate_all(existing)
    assert not by_kind(existing, "PersistentVolumeClaim")
    audit = _pod(existing, "Deployment", "-audit")
    assert audit["containers"][0]["args"] == ["audit"]
    volume = next(v for v in audit["volumes"] if v["name"] == "data")
    assert volume["persistentVolumeClaim"]["claimName"] == "audit-data"
    scratch = render(helm, *EVERYTHING, "--set", "audit.persistence.enabled=false")
    assert not by_kind(scratch, "PersistentVolumeClaim")
    volume = next(v for v in _pod(scratch, "CronJob", "-audit")["volumes"] if v["name"] == "data")
    assert "emptyDir" in volume


def test_helm_test_hooks_check_readiness_then_verify(helm):
    docs = render(helm, *EVERYTHING, "--set", "worker.replicas=3", "--set", "tests.verifyTopics={orders}")
    ready = named(docs, "Pod", "-test-ready")
    verify = named(docs, "Pod", "-test-verify")
    for pod in (ready, verify):
        assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
        assert pod["spec"]["restartPolicy"] == "Never"
    assert int(ready["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        verify["metadata"]["annotations"]["helm.sh/hook-weight"]
    )
    script = ready["spec"]["containers"][0]["args"][0]
    compile(script, "ready-check", "exec")  # the check is valid Python
    workers = [
        f"http://rel-kafka-tiered-processor-worker-{i}.rel-kafka-tiered-processor-worker.tiered.svc:6066/readyz"
        for i in range(3)
    ]
    follower = "http://rel-kafka-tiered-processor-follower.tiered.svc:6066/readyz"
    for url in [*workers, follower]:
        assert url in script
    container = verify["spec"]["containers"][0]
    assert container["command"] == ["sh", "-ec"]
    assert "for topic in orders; do" in container["args"][0]
    assert 'processor verify --topic "$topic"' in container["args"][0]
    refs = {e["name"] for e in container["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert "PROCESSOR_WEB_TOKEN" in refs
    defaults = render(helm, *BASE)
    assert (
        "for topic in orders payments; do"
        in named(defaults, "Pod", "-test-verify")["spec"]["containers"][0]["args"][0]
    )
    assert not by_kind(render(helm, *BASE, "--set", "tests.enabled=false"), "Pod")


@pytest.fixture
def parent_chart(tmp_path: Path) -> Path:
    parent = tmp_path / "platform"
    (parent / "charts").mkdir(parents=True)
    shutil.copytree(CHART, parent / "charts" / "kafka-tiered-processor")
    (parent / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [{"name": "kafka-tiered-processor", "version": "0.1.0"}],
            }
        )
    )
    (parent / "values.yaml").write_text(
        yaml.safe_dump(
            {
                "global": {"imageRegistry": "registry.example", "storageClass": "fast"},
                "kafka-tiered-processor": {
                    "image": {"repository": REPOSITORY},
                    "config": {"topics": ["orders"]},
                    "credentials": {"webToken": {"existingSecret": "web-token"}},
                },
            }
        )
    )
    return parent


def test_renders_as_a_subchart_with_global_values(helm, parent_chart):
    docs = render(helm, chart=parent_chart)
    validate_all(docs)
    sts = named(docs, "StatefulSet", "-worker")
    assert sts["metadata"]["name"] == "rel-kafka-tiered-processor-worker"
    proc = run_helm(helm, "lint", "--strict", str(parent_chart))
    assert "0 chart(s) failed" in proc.stdout
