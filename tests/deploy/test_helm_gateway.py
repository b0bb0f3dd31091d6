"""The chart's gateway (templates/gateway.yaml): `processor gateway` as a Deployment behind a Service
that opens the bootstrap port and one port per broker node id, its NetworkPolicy, PDB and metrics.

The ports are checked against the program's own mapping (processor/gateway/listeners.py
``gateway_ports`` from the rendered settings), so the chart and `processor gateway` agree on where the
broker with node id n is reached. Every render is validated against the Kubernetes 1.30 schemas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from processor.config import load_settings
from processor.wiring.gateway import gateway_ports
from tests.deploy.chart import (
    ALL_ON,
    BASE,
    CHART,
    SERVICE_MONITOR,
    by_kind,
    config_map,
    named,
    render,
    render_error,
    rendered_setting_names,
    run_helm,
    unknown_settings,
    validate_all,
)
from tests.deploy.test_helm_monitoring import _notes

FULLNAME = "rel-kafka-tiered-processor"
SERVICE_DNS = f"{FULLNAME}-gateway.tiered.svc"
GATEWAY = ["--set", "gateway.enabled=true"]
WEB_PORT = 6066
DEFAULT_KAFKA_PORTS = list(range(19092, 19092 + 1 + 64))  # bootstrap, then node ids 0..63
LB_TYPE = "networking.gke.io/load-balancer-type"
GATEWAY_ENV = {
    "PROCESSOR_GATEWAY_HOST",
    "PROCESSOR_GATEWAY_PORT",
    "PROCESSOR_GATEWAY_ADVERTISED_HOST",
    "PROCESSOR_GATEWAY_NODE_IDS",
    "PROCESSOR_GATEWAY_ARCHIVE_READS",
}


@pytest.fixture(scope="module")
def gateway_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *BASE, *GATEWAY)


def _deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return named(docs, "Deployment", "-gateway")


def _container(docs: list[dict[str, Any]]) -> dict[str, Any]:
    containers: list[dict[str, Any]] = _deployment(docs)["spec"]["template"]["spec"]["containers"]
    (container,) = containers
    assert container["name"] == "gateway"
    return container


def _env(docs: list[dict[str, Any]]) -> dict[str, str]:
    """The container's plain environment values (not the secret references)."""
    return {e["name"]: e["value"] for e in _container(docs)["env"] if "value" in e}


def _service(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return named(docs, "Service", "-gateway")


def _kafka_ports(service: dict[str, Any]) -> list[int]:
    return [p["port"] for p in service["spec"]["ports"] if p["name"] != "http"]


def _gateway_policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return named(docs, "NetworkPolicy", "-gateway")


def _is_gateway(doc: dict[str, Any]) -> bool:
    labels = doc["metadata"].get("labels", {})
    component = labels.get("app.kubernetes.io/component")
    return bool(component == "gateway" or doc["metadata"]["name"].endswith("-gateway"))


def test_disabled_by_default(default_docs: list[dict[str, Any]]) -> None:
    assert not [d for d in default_docs if _is_gateway(d)]
    assert not by_kind(default_docs, "Deployment")
    assert len(by_kind(default_docs, "NetworkPolicy")) == 1  # the web port's, as before
    ready = named(default_docs, "Pod", "-test-ready")["spec"]["containers"][0]["args"][0]
    assert "-gateway" not in ready


def test_enabled_renders_the_gateway_objects(gateway_docs: list[dict[str, Any]]) -> None:
    gateway = sorted((d["kind"], d["metadata"]["name"]) for d in gateway_docs if _is_gateway(d))
    name = f"{FULLNAME}-gateway"
    assert gateway == [
        ("Deployment", name),
        ("NetworkPolicy", name),
        ("PodDisruptionBudget", name),
        ("Service", name),
    ]
    assert validate_all(gateway_docs) >= 10


def test_deployment_runs_processor_gateway(gateway_docs: list[dict[str, Any]]) -> None:
    deployment = _deployment(gateway_docs)
    assert deployment["spec"]["replicas"] == 2
    spec = deployment["spec"]["template"]["spec"]
    container = _container(gateway_docs)
    assert container["args"] == ["gateway"]  # the image's entrypoint is `processor`
    worker_spec = by_kind(gateway_docs, "StatefulSet")[0]["spec"]["template"]["spec"]
    worker = worker_spec["containers"][0]
    # the same image, settings, identity and hardening as the worker and the followers
    assert container["image"] == worker["image"]
    assert container["envFrom"] == worker["envFrom"] == [{"configMapRef": {"name": FULLNAME}}]
    assert spec["serviceAccountName"] == worker_spec["serviceAccountName"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["securityContext"] == worker_spec["securityContext"]
    assert container["securityContext"] == worker["securityContext"]
    assert _env(gateway_docs) == {
        "PROCESSOR_GATEWAY_HOST": "0.0.0.0",
        "PROCESSOR_GATEWAY_PORT": "19092",
        "PROCESSOR_GATEWAY_ADVERTISED_HOST": SERVICE_DNS,
        "PROCESSOR_GATEWAY_NODE_IDS": "0-63",
        "PROCESSOR_GATEWAY_ARCHIVE_READS": "below-log-start",
        "PROCESSOR_GATEWAY_CACHE_BYTES": "2GiB",
    }
    refs = {e["name"]: e["valueFrom"] for e in container["env"] if "valueFrom" in e}
    assert refs["PROCESSOR_WORKER_ID"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert refs["PROCESSOR_WEB_TOKEN"] == {"secretKeyRef": {"name": "web-token", "key": "token"}}
    # health and metrics on the web port, probed as the followers are
    assert config_map(gateway_docs)["PROCESSOR_WEB_PORT"] == str(WEB_PORT)
    http = next(p for p in container["ports"] if p["name"] == "http")
    assert http["containerPort"] == WEB_PORT
    probes = {"startupProbe": "/livez", "livenessProbe": "/livez", "readinessProbe": "/readyz"}
    for probe, path in probes.items():
        assert container[probe]["httpGet"] == {"path": path, "port": "http"}
    # the metadata cache on an emptyDir, a writable /tmp under the read-only root
    volumes = {v["name"]: v for v in spec["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    assert "emptyDir" in volumes[mounts["/data"]] and "emptyDir" in volumes[mounts["/tmp"]]
    assert container["resources"]["requests"] == {"cpu": "250m", "memory": "512Mi"}


def test_settings_are_real_and_give_the_ports_the_service_opens(gateway_docs: list[dict[str, Any]]) -> None:
    """The rendered variables are Settings fields, load, and `processor gateway` maps node ids to
    exactly the ports the container and the Service open."""
    assert rendered_setting_names(gateway_docs) >= GATEWAY_ENV
    assert unknown_settings(rendered_setting_names(gateway_docs)) == set()
    settings = load_settings({**config_map(gateway_docs), **_env(gateway_docs)})
    ports = gateway_ports(settings)  # raises on settings the gateway would refuse
    assert ports.host == SERVICE_DNS
    assert settings.gateway_archive_reads == "below-log-start"
    expected = [ports.port] + [ports.node_port(n) for n in range(64)]
    assert expected == DEFAULT_KAFKA_PORTS
    assert settings.web_port == WEB_PORT


def test_service_exposes_the_bootstrap_port_and_64_node_ports(gateway_docs: list[dict[str, Any]]) -> None:
    service = _service(gateway_docs)
    assert service["spec"]["type"] == "ClusterIP"
    assert "annotations" not in service["metadata"]
    selector = service["spec"]["selector"]
    pod_labels = _deployment(gateway_docs)["spec"]["template"]["metadata"]["labels"]
    assert selector["app.kubernetes.io/component"] == "gateway"
    assert selector.items() <= pod_labels.items()
    ports = service["spec"]["ports"]
    assert ports[0] == {"name": "http", "port": WEB_PORT, "targetPort": "http", "protocol": "TCP"}
    assert _kafka_ports(service) == DEFAULT_KAFKA_PORTS
    assert len(DEFAULT_KAFKA_PORTS) == 65
    assert ports[1]["name"] == "kafka"
    assert [p["name"] for p in ports[2:]] == [f"node-{n}" for n in range(64)]
    for p in ports[1:]:
        assert p["targetPort"] == p["port"]  # clients dial the advertised port: no translation
    container_ports = [p["containerPort"] for p in _container(gateway_docs)["ports"]]
    assert container_ports == [WEB_PORT, *DEFAULT_KAFKA_PORTS]


def test_node_ids_set_the_ports(helm: Path) -> None:
    docs = render(helm, *BASE, *GATEWAY, "--set", "gateway.nodeIds=100-102")
    validate_all(docs)
    assert _kafka_ports(_service(docs)) == [19092, 19093, 19094, 19095]
    names = [p["name"] for p in _service(docs)["spec"]["ports"]]
    assert names == ["http", "kafka", "node-100", "node-101", "node-102"]
    assert [p["containerPort"] for p in _container(docs)["ports"]] == [WEB_PORT, 19092, 19093, 19094, 19095]
    assert _env(docs)["PROCESSOR_GATEWAY_NODE_IDS"] == "100-102"
    ports = gateway_ports(load_settings({**config_map(docs), **_env(docs)}))
    assert [ports.node_port(n) for n in (99, 100, 101, 102, 103)] == [None, 19093, 19094, 19095, None]
    (rule,) = _gateway_policy(docs)["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [19092, 19093, 19094, 19095]


def test_port_moves_every_kafka_port(helm: Path) -> None:
    docs = render(helm, *BASE, *GATEWAY, "--set", "gateway.port=29092", "--set", "gateway.nodeIds=1-3")
    assert _kafka_ports(_service(docs)) == [29092, 29093, 29094, 29095]
    assert _env(docs)["PROCESSOR_GATEWAY_PORT"] == "29092"


def test_one_hundred_node_ids_is_the_most(helm: Path) -> None:
    docs = render(helm, *BASE, *GATEWAY, "--set", "gateway.nodeIds=1000-1099")
    validate_all(docs)
    assert _kafka_ports(_service(docs)) == list(range(19092, 19092 + 101))


def test_advertised_host_defaults_to_the_service_dns_name(
    helm: Path, gateway_docs: list[dict[str, Any]]
) -> None:
    service = _service(gateway_docs)
    assert f"{service['metadata']['name']}.tiered.svc" == SERVICE_DNS
    assert _env(gateway_docs)["PROCESSOR_GATEWAY_ADVERTISED_HOST"] == SERVICE_DNS
    other = render(helm, *BASE, *GATEWAY, "--namespace", "kafka-archive", "--set", "fullnameOverride=archive")
    assert _env(other)["PROCESSOR_GATEWAY_ADVERTISED_HOST"] == "archive-gateway.kafka-archive.svc"


def test_advertised_host_can_be_overridden(helm: Path) -> None:
    docs = render(helm, *BASE, *GATEWAY, "--set", "gateway.advertisedHost=kafka-archive.example.com")
    assert _env(docs)["PROCESSOR_GATEWAY_ADVERTISED_HOST"] == "kafka-archive.example.com"
    settings = load_settings({**config_map(docs), **_env(docs)})
    assert gateway_ports(settings).host == "kafka-archive.example.com"
    bad = ["--set", "gateway.advertisedHost=not a host"]
    assert "advertisedHost" in render_error(helm, *BASE, *GATEWAY, *bad)


def test_archive_reads(helm: Path) -> None:
    docs = render(helm, *BASE, *GATEWAY, "--set", "gateway.archiveReads=archived")
    assert _env(docs)["PROCESSOR_GATEWAY_ARCHIVE_READS"] == "archived"
    assert load_settings({**config_map(docs), **_env(docs)}).gateway_archive_reads == "archived"


def test_block_cache_size(helm: Path) -> None:
    docs = render(helm, *BASE, *GATEWAY)
    assert load_settings({**config_map(docs), **_env(docs)}).gateway_cache_bytes == 2 * 1024**3
    docs = render(helm, *BASE, *GATEWAY, "--set", "gateway.blockCacheBytes=0")
    assert load_settings({**config_map(docs), **_env(docs)}).gateway_cache_bytes == 0
    assert "blockCacheBytes" in render_error(helm, *BASE, *GATEWAY, "--set", "gateway.blockCacheBytes=lots")


def test_bad_archive_reads_fails_naming_the_value(helm: Path) -> None:
    bad = [*BASE, *GATEWAY, "--set", "gateway.archiveReads=everything"]
    assert "gateway.archiveReads" in render_error(helm, *bad)  # the schema
    # the templates refuse it too, with what to use, when the schema is skipped
    error = render_error(helm, *bad, "--skip-schema-validation")
    assert 'gateway.archiveReads is "everything"' in error
    assert "below-log-start" in error and "archived" in error


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (["--set", "gateway.nodeIds=0-100"], ['gateway.nodeIds is "0-100"', "101 node ids, at most 100"]),
        (["--set", "gateway.nodeIds=0-1000000"], ['gateway.nodeIds is "0-1000000"', "at most 100"]),
        (["--set", "gateway.nodeIds=7-3"], ['gateway.nodeIds is "7-3"', "first must not exceed last"]),
        (["--set", "gateway.port=65500"], ["gateway.port 65500", "past 65535"]),
        (["--set", "worker.webPort=19100"], ["worker.webPort 19100", "gateway.port"]),
    ],
)
def test_impossible_port_layouts_fail_naming_the_value(
    helm: Path, values: list[str], says: list[str]
) -> None:
    for args in ([*BASE, *GATEWAY, *values], [*BASE, *GATEWAY, *values, "--skip-schema-validation"]):
        error = " ".join(render_error(helm, *args).split())
        for phrase in says:
            assert phrase in error, error


@pytest.mark.parametrize("node_ids", ["abc", "0-63-1", "-5", "0..63", ""])
def test_malformed_node_ids_fail_naming_the_value(helm: Path, node_ids: str) -> None:
    bad = [*BASE, *GATEWAY, "--set-string", f"gateway.nodeIds={node_ids}"]
    assert "gateway.nodeIds" in render_error(helm, *bad)  # the schema's pattern
    error = render_error(helm, *bad, "--skip-schema-validation")
    assert f'gateway.nodeIds is "{node_ids}"' in error and "first-last" in error


def test_the_port_checks_apply_only_when_the_gateway_is_enabled(helm: Path) -> None:
    docs = render(helm, *BASE, "--set", "worker.webPort=19100")
    assert not [d for d in docs if _is_gateway(d)]


def test_service_type_and_annotations(helm: Path) -> None:
    docs = render(
        helm,
        *BASE,
        *GATEWAY,
        "--set", "gateway.service.type=LoadBalancer",
        "--set", "gateway.service.annotations.networking\\.gke\\.io/load-balancer-type=Internal",
        "--set", "gateway.advertisedHost=gateway.kafka.example.internal",
    )  # fmt: skip
    validate_all(docs)
    service = _service(docs)
    assert service["spec"]["type"] == "LoadBalancer"
    assert service["metadata"]["annotations"] == {LB_TYPE: "Internal"}
    # NodePort would hand out node ports the clients are never told about
    node_port = ["--set", "gateway.service.type=NodePort"]
    assert "gateway.service.type" in render_error(helm, *BASE, *GATEWAY, *node_port)


def test_kafka_security_reaches_the_gateway(helm: Path) -> None:
    """SASL_SSL with a private CA and mutual TLS: the gateway gets the same Secret references and
    mounts as the followers."""
    docs = render(
        helm,
        *BASE,
        *GATEWAY,
        "--set", "followers.enabled=true",
        "--set", "kafka.securityProtocol=SASL_SSL",
        "--set", "kafka.sasl.mechanism=SCRAM-SHA-512",
        "--set", "kafka.sasl.existingSecret=kafka-sasl",
        "--set", "kafka.tls.caSecret=kafka-ca",
        "--set", "kafka.tls.clientCertSecret=kafka-client",
        "--set", "credentials.s3.existingSecret=s3-creds",
        "--set", "extraVolumes[0].name=hooks",
        "--set", "extraVolumes[0].emptyDir.sizeLimit=1Mi",
        "--set", "extraVolumeMounts[0].name=hooks",
        "--set", "extraVolumeMounts[0].mountPath=/hooks",
    )  # fmt: skip
    validate_all(docs)
    follower_spec = named(docs, "Deployment", "-follower")["spec"]["template"]["spec"]
    gateway_spec = _deployment(docs)["spec"]["template"]["spec"]
    follower, gateway = follower_spec["containers"][0], gateway_spec["containers"][0]

    def secret_env(c: dict[str, Any]) -> list[dict[str, Any]]:
        return [e for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})]

    assert secret_env(gateway) == secret_env(follower)
    assert {e["name"] for e in secret_env(gateway)} == {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "PROCESSOR_WEB_TOKEN",
        "PROCESSOR_SASL_USERNAME",
        "PROCESSOR_SASL_PASSWORD",
    }
    assert gateway["volumeMounts"] == follower["volumeMounts"]
    assert gateway_spec["volumes"] == follower_spec["volumes"]
    assert {"/etc/processor/kafka/ca", "/etc/processor/kafka/client", "/hooks"} <= {
        m["mountPath"] for m in gateway["volumeMounts"]
    }


def test_resources_and_scheduling(helm: Path) -> None:
    docs = render(
        helm,
        *BASE,
        *GATEWAY,
        "--set", "gateway.replicas=3",
        "--set", "gateway.resources.requests.cpu=1",
        "--set", "gateway.resources.limits.memory=1Gi",
        "--set", "gateway.nodeSelector.pool=edge",
        "--set", "gateway.topologySpreadConstraints[0].maxSkew=1",
        "--set", "gateway.topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "--set", "gateway.topologySpreadConstraints[0].whenUnsatisfiable=ScheduleAnyway",
        "--set", "gateway.podAnnotations.team=data",
        "--set", "gateway.pdb.maxUnavailable=50%",
    )  # fmt: skip
    validate_all(docs)
    deployment = _deployment(docs)
    assert deployment["spec"]["replicas"] == 3
    template = deployment["spec"]["template"]
    assert template["metadata"]["annotations"]["team"] == "data"
    assert "checksum/config" in template["metadata"]["annotations"]
    assert template["spec"]["nodeSelector"] == {"pool": "edge"}
    (spread,) = template["spec"]["topologySpreadConstraints"]
    assert spread["labelSelector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert _container(docs)["resources"] == {"requests": {"cpu": 1}, "limits": {"memory": "1Gi"}}
    pdb = named(docs, "PodDisruptionBudget", "-gateway")
    assert pdb["spec"]["maxUnavailable"] == "50%"
    assert pdb["spec"]["selector"] == deployment["spec"]["selector"]


def test_network_policy_allows_the_kafka_ports(gateway_docs: list[dict[str, Any]]) -> None:
    policy = _gateway_policy(gateway_docs)
    assert policy["spec"]["policyTypes"] == ["Ingress"]  # egress stays open, as for the followers
    selected = policy["spec"]["podSelector"]["matchLabels"]
    pod_labels = _deployment(gateway_docs)["spec"]["template"]["metadata"]["labels"]
    assert selected.items() <= pod_labels.items()
    assert selected["app.kubernetes.io/component"] == "gateway"  # the Kafka ports of the gateway only
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": p, "protocol": "TCP"} for p in DEFAULT_KAFKA_PORTS]
    assert [p["port"] for p in rule["ports"]] == _kafka_ports(_service(gateway_docs))
    release = {"app.kubernetes.io/name": "kafka-tiered-processor", "app.kubernetes.io/instance": "rel"}
    # the read API's clients (readApi.fromSameNamespace by default) and the release's own pods
    assert rule["from"] == [{"podSelector": {"matchLabels": release}}, {"podSelector": {}}]
    # the release-wide policy still admits the web port (health, metrics) of the gateway's pods
    (web,) = [p for p in by_kind(gateway_docs, "NetworkPolicy") if p is not policy]
    assert web["spec"]["podSelector"]["matchLabels"].items() <= pod_labels.items()
    assert web["spec"]["ingress"][0]["ports"] == [{"port": "http", "protocol": "TCP"}]


def test_network_policy_clients_follow_the_read_api_values(helm: Path) -> None:
    docs = render(
        helm,
        *BASE,
        *GATEWAY,
        "--set", "gateway.nodeIds=1-3",
        "--set", "networkPolicy.readApi.fromSameNamespace=false",
        "--set", "networkPolicy.readApi.fromPods[0].app=orders-reader",
        "--set", "networkPolicy.readApi.fromNamespaces[0].team=analytics",
        "--set", "networkPolicy.gateway.fromCidrs[0]=10.20.0.0/16",
    )  # fmt: skip
    validate_all(docs)
    (rule,) = _gateway_policy(docs)["spec"]["ingress"]
    assert [p["port"] for p in rule["ports"]] == [19092, 19093, 19094, 19095]
    peers = rule["from"]
    assert {"podSelector": {}} not in peers
    assert {"podSelector": {"matchLabels": {"app": "orders-reader"}}} in peers
    assert {"namespaceSelector": {"matchLabels": {"team": "analytics"}}} in peers
    assert {"ipBlock": {"cidr": "10.20.0.0/16"}} in peers
    assert len(peers) == 4  # and the release's own pods
    not_a_cidr = ["--set", "networkPolicy.gateway.fromCidrs[0]=anywhere"]
    assert "fromCidrs" in render_error(helm, *BASE, *GATEWAY, *not_a_cidr)


def test_network_policy_off(helm: Path) -> None:
    docs = render(helm, *BASE, *GATEWAY, "--set", "networkPolicy.enabled=false")
    assert not by_kind(docs, "NetworkPolicy")
    assert _deployment(docs)


def test_metrics_are_scraped_like_the_followers(helm: Path) -> None:
    docs = render(helm, *BASE, *GATEWAY, "--set", "followers.enabled=true", *SERVICE_MONITOR)
    validate_all(docs)
    (monitor,) = by_kind(docs, "ServiceMonitor")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert [e["port"] for e in monitor["spec"]["endpoints"]] == ["http"]
    for suffix in ("-follower", "-gateway"):
        service = named(docs, "Service", suffix)
        assert selector.items() <= service["metadata"]["labels"].items(), suffix
        assert service["spec"]["ports"][0]["name"] == "http", suffix


def test_helm_test_waits_for_the_gateway(gateway_docs: list[dict[str, Any]]) -> None:
    script = named(gateway_docs, "Pod", "-test-ready")["spec"]["containers"][0]["args"][0]
    assert f"http://{SERVICE_DNS}:{WEB_PORT}/readyz" in script
    compile(script, "ready-check", "exec")


def test_lint_and_validate_with_every_component(helm: Path) -> None:
    for values in ([*BASE, *GATEWAY], [*ALL_ON, *GATEWAY]):
        assert "0 chart(s) failed" in run_helm(helm, "lint", "--strict", str(CHART), *values).stdout
    docs = render(helm, *ALL_ON, *GATEWAY)
    assert _deployment(docs) and validate_all(docs) >= 12
    assert len(by_kind(docs, "PodDisruptionBudget")) == 3  # workers, followers, gateway


def test_notes_give_the_bootstrap_address(helm: Path, tmp_path: Path) -> None:
    notes = _notes(helm, tmp_path, *BASE, *GATEWAY, "--set", "gateway.nodeIds=100-102")
    assert f"Gateway:  bootstrap.servers={SERVICE_DNS}:19092" in notes
    assert "broker node ids 100-102 on ports 19093-19095" in notes
    overridden = _notes(
        helm, tmp_path / "b", *BASE, *GATEWAY, "--set", "gateway.advertisedHost=kafka-archive.example.com"
    )
    assert "bootstrap.servers=kafka-archive.example.com:19092" in overridden
    assert "Gateway:" not in _notes(helm, tmp_path / "c", *BASE)
