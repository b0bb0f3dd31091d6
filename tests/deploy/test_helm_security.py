"""The chart's Kafka security (SASL_SSL, mutual TLS), the read API's auth and the NetworkPolicy.

Every render here is validated against the Kubernetes 1.30 schemas; secrets only ever appear as
references to existing Secrets, and certificate files as Secret volumes mounted where the
PROCESSOR_SSL_* settings point.
"""

from __future__ import annotations

from typing import Any

import pytest

from processor.config import ENV_PREFIX, Settings
from tests.deploy.chart import (
    BASE,
    IMAGE,
    SECRET_NAME,
    SECURITY_SETTINGS,
    by_kind,
    config_map,
    pod_specs,
    render,
    render_error,
    rendered_setting_names,
    unknown_settings,
    validate_all,
)

ALL_COMPONENTS = ["--set", "followers.enabled=true", "--set", "audit.enabled=true"]
SASL_SSL = [
    *BASE,
    *ALL_COMPONENTS,
    "--set", "config.bootstrapServers=pkc-1.eu-west-1.aws.confluent.cloud:9092",
    "--set", "kafka.securityProtocol=SASL_SSL",
    "--set", "kafka.sasl.mechanism=SCRAM-SHA-512",
    "--set", "kafka.sasl.existingSecret=kafka-sasl",
    "--set", "kafka.tls.caSecret=kafka-ca",
]  # fmt: skip
MUTUAL_TLS = [
    *BASE,
    *ALL_COMPONENTS,
    "--set", "kafka.securityProtocol=SSL",
    "--set", "kafka.tls.caSecret=kafka-ca",
    "--set", "kafka.tls.caKey=bundle.pem",
    "--set", "kafka.tls.clientCertSecret=kafka-client",
    "--set", "kafka.tls.keyPasswordSecret=kafka-key-pass",
    "--set", "kafka.tls.checkHostname=false",
]  # fmt: skip


@pytest.fixture(scope="module")
def sasl_docs(helm) -> list[dict[str, Any]]:
    return render(helm, *SASL_SSL)


@pytest.fixture(scope="module")
def mtls_docs(helm) -> list[dict[str, Any]]:
    return render(helm, *MUTUAL_TLS)


def _containers(docs: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(spec, c) for spec in pod_specs(docs) for c in spec["containers"]]


def _secret_refs(container: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {
        e["name"]: (e["valueFrom"]["secretKeyRef"]["name"], e["valueFrom"]["secretKeyRef"]["key"])
        for e in container.get("env", [])
        if "secretKeyRef" in e.get("valueFrom", {})
    }


def _file_source(spec: dict[str, Any], container: dict[str, Any], path: str) -> tuple[str, str]:
    """(Secret name, key) that the file at ``path`` in ``container`` comes from."""
    volumes = {v["name"]: v for v in spec["volumes"]}
    for mount in container["volumeMounts"]:
        prefix = mount["mountPath"].rstrip("/") + "/"
        if path.startswith(prefix):
            assert mount.get("readOnly") is True, mount
            secret = volumes[mount["name"]]["secret"]
            item = next(i for i in secret["items"] if i["path"] == path.removeprefix(prefix))
            return secret["secretName"], item["key"]
    raise AssertionError(f"{path} is not mounted in {container['name']}")


@pytest.mark.parametrize("fixture", ["sasl_docs", "mtls_docs"])
def test_secured_renders_validate_and_lint(fixture, request, helm):
    docs = request.getfixturevalue(fixture)
    assert validate_all(docs) >= 8
    assert not by_kind(docs, "Secret")
    values = SASL_SSL if fixture == "sasl_docs" else MUTUAL_TLS
    from tests.deploy.chart import CHART, run_helm

    assert "0 chart(s) failed" in run_helm(helm, "lint", "--strict", str(CHART), *values).stdout


def test_sasl_ssl_reaches_every_container(sasl_docs):
    config = config_map(sasl_docs)
    assert config["PROCESSOR_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert config["PROCESSOR_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert config["PROCESSOR_SSL_CHECK_HOSTNAME"] == "true"
    assert config["PROCESSOR_SSL_CAFILE"] == "/etc/processor/kafka/ca/ca.crt"
    assert "PROCESSOR_SASL_PASSWORD" not in config and "PROCESSOR_SASL_USERNAME" not in config
    containers = _containers(sasl_docs)
    assert {c["name"] for _, c in containers} == {"worker", "follower", "audit", "ready", "verify"}
    for spec, c in containers:
        if c["name"] == "ready":
            continue  # plain HTTP to the pods' /readyz, no Kafka
        refs = _secret_refs(c)
        assert refs["PROCESSOR_SASL_PASSWORD"] == ("kafka-sasl", "password"), c["name"]
        assert refs["PROCESSOR_SASL_USERNAME"] == ("kafka-sasl", "username"), c["name"]
        assert _file_source(spec, c, config["PROCESSOR_SSL_CAFILE"]) == ("kafka-ca", "ca.crt")


def test_sasl_user_name_as_a_value(helm):
    docs = render(helm, *SASL_SSL, "--set", "kafka.sasl.username=svc-archive")
    assert config_map(docs)["PROCESSOR_SASL_USERNAME"] == "svc-archive"
    worker = by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "PROCESSOR_SASL_USERNAME" not in _secret_refs(worker)


def test_oauthbearer_with_amazon_msk_iam(helm):
    docs = render(
        helm,
        *BASE,
        "--set", "kafka.securityProtocol=SASL_SSL",
        "--set", "kafka.sasl.mechanism=OAUTHBEARER",
        "--set", "kafka.sasl.oauthTokenProvider=aws-msk-iam",
        "--set", "kafka.sasl.oauthAwsRegion=eu-west-1",
        "--set", "kafka.sasl.oauthAwsRoleArn=arn:aws:iam::123456789012:role/msk-archive",
        "--set", "serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn=arn:aws:iam::1:role/r",
    )  # fmt: skip
    config = config_map(docs)
    assert config["PROCESSOR_SASL_MECHANISM"] == "OAUTHBEARER"
    assert config["PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER"] == "aws-msk-iam"
    assert config["PROCESSOR_SASL_OAUTH_AWS_REGION"] == "eu-west-1"
    assert config["PROCESSOR_SASL_OAUTH_AWS_ROLE_ARN"] == "arn:aws:iam::123456789012:role/msk-archive"
    assert "PROCESSOR_SSL_CAFILE" not in config  # the image's system CAs (MSK's public CA)
    worker = by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "PROCESSOR_SASL_PASSWORD" not in _secret_refs(worker)
    validate_all(docs)


def test_oauthbearer_with_a_provider_hook(helm):
    docs = render(
        helm,
        *BASE,
        "--set", "kafka.securityProtocol=SASL_SSL",
        "--set", "kafka.sasl.mechanism=OAUTHBEARER",
        "--set", "kafka.sasl.oauthTokenProvider=tokens.provider:fetch_token",
    )  # fmt: skip
    assert config_map(docs)["PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER"] == "tokens.provider:fetch_token"
    assert "PROCESSOR_SASL_OAUTH_AWS_REGION" not in config_map(docs)


def test_mutual_tls_mounts_certificate_and_key_from_secrets(mtls_docs):
    config = config_map(mtls_docs)
    assert config["PROCESSOR_SECURITY_PROTOCOL"] == "SSL"
    assert config["PROCESSOR_SSL_CHECK_HOSTNAME"] == "false"
    assert "PROCESSOR_SASL_MECHANISM" not in config
    for spec, c in _containers(mtls_docs):
        if c["name"] == "ready":
            continue
        assert _file_source(spec, c, config["PROCESSOR_SSL_CAFILE"]) == ("kafka-ca", "bundle.pem")
        assert _file_source(spec, c, config["PROCESSOR_SSL_CERTFILE"]) == ("kafka-client", "tls.crt")
        assert _file_source(spec, c, config["PROCESSOR_SSL_KEYFILE"]) == ("kafka-client", "tls.key")
        assert _secret_refs(c)["PROCESSOR_SSL_KEY_PASSWORD"] == ("kafka-key-pass", "password")
    for spec in pod_specs(mtls_docs):
        for volume in spec["volumes"]:
            if "secret" in volume:
                assert volume["secret"]["defaultMode"] == 0o440  # readable by the pod's group only


@pytest.mark.parametrize("fixture", ["sasl_docs", "mtls_docs"])
def test_secrets_only_as_references(fixture, request):
    docs = request.getfixturevalue(fixture)
    assert not any(SECRET_NAME.search(name) for name in config_map(docs))
    for _, c in _containers(docs):
        for e in c.get("env", []):
            if SECRET_NAME.search(e["name"]):
                assert "value" not in e and "secretKeyRef" in e["valueFrom"], e


@pytest.mark.parametrize("fixture", ["sasl_docs", "mtls_docs"])
def test_security_settings_are_settings_fields(fixture, request):
    names = rendered_setting_names(request.getfixturevalue(fixture))
    assert unknown_settings(names) == set()
    missing = {
        n
        for n in names & SECURITY_SETTINGS
        if n.removeprefix(ENV_PREFIX).lower() not in Settings.model_fields
    }
    if missing:
        pytest.skip(f"not Settings fields until the security branch lands: {sorted(missing)}")


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (["--set", "credentials.webToken.existingSecret="], "webApi.auth=none"),
        (["--set", "kafka.securityProtocol=SASL_SSL"], "kafka.sasl.existingSecret"),
        (
            ["--set", "kafka.securityProtocol=SASL_SSL", "--set", "kafka.sasl.mechanism=OAUTHBEARER"],
            "kafka.sasl.oauthTokenProvider",
        ),
        (["--set", "kafka.tls.caSecret=kafka-ca"], "use SSL or SASL_SSL"),
        (
            ["--set", "kafka.securityProtocol=SSL", "--set", "kafka.tls.keyPasswordSecret=p"],
            "without kafka.tls.clientCertSecret",
        ),
        (["--set", "kafka.securityProtocol=TLS"], "securityProtocol"),
        (["--set", "kafka.sasl.mechanism=GSSAPI"], "mechanism"),
        (["--set", "kafka.sasl.oauthTokenProvider=not a function"], "oauthTokenProvider"),
        (
            [
                "--set",
                "kafka.securityProtocol=SASL_SSL",
                "--set",
                "kafka.sasl.mechanism=OAUTHBEARER",
                "--set",
                "kafka.sasl.oauthTokenProvider=aws-msk-iam",
            ],
            "kafka.sasl.oauthAwsRegion",
        ),
        (["--set", "webApi.auth=basic"], "auth"),
    ],
)
def test_values_that_do_not_go_together_are_refused(helm, values, says):
    assert says in render_error(helm, *BASE, *values)


def test_read_api_closed_by_default(helm, default_docs):
    assert config_map(default_docs)["PROCESSOR_WEB_AUTH"] == "token"
    error = render_error(helm, "--set", "config.topics={orders}")
    assert "credentials.webToken.existingSecret" in error and "webApi.auth=none" in error
    docs = render(helm, *IMAGE, "--set", "config.topics={orders}", "--set", "webApi.auth=none")
    assert config_map(docs)["PROCESSOR_WEB_AUTH"] == "none"
    worker = by_kind(docs, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "PROCESSOR_WEB_TOKEN" not in _secret_refs(worker)


def _peers(policy: dict[str, Any]) -> list[dict[str, Any]]:
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": "http", "protocol": "TCP"}]
    peers: list[dict[str, Any]] = rule["from"]
    return peers


def test_network_policy_on_by_default(default_docs):
    (policy,) = by_kind(default_docs, "NetworkPolicy")
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    selected = policy["spec"]["podSelector"]["matchLabels"]
    worker = by_kind(default_docs, "StatefulSet")[0]["spec"]["template"]["metadata"]["labels"]
    assert selected.items() <= worker.items()
    assert "app.kubernetes.io/component" not in selected  # every component of the release
    peers = _peers(policy)
    assert {"podSelector": {"matchLabels": selected}} in peers  # the release's own pods
    assert {"podSelector": {}} in peers  # the namespace (readApi.fromSameNamespace)
    # no scraper namespace is assumed (networkPolicy.metrics: tests/deploy/test_helm_monitoring.py)
    assert not any("namespaceSelector" in peer for peer in peers)
    assert len(peers) == 2


def test_network_policy_named_clients_only(helm):
    docs = render(
        helm,
        *BASE,
        "--set", "networkPolicy.readApi.fromSameNamespace=false",
        "--set", "networkPolicy.readApi.fromPods[0].app=orders-reader",
        "--set", "networkPolicy.readApi.fromNamespaces[0].team=analytics",
        "--set", "networkPolicy.metrics.fromNamespaces[0].name=observability",
        "--set", "networkPolicy.metrics.podLabels.app\\.kubernetes\\.io/name=prometheus",
    )  # fmt: skip
    validate_all(docs)
    peers = _peers(by_kind(docs, "NetworkPolicy")[0])
    assert {"podSelector": {}} not in peers
    assert {"podSelector": {"matchLabels": {"app": "orders-reader"}}} in peers
    assert {"namespaceSelector": {"matchLabels": {"team": "analytics"}}} in peers
    assert {
        "namespaceSelector": {"matchLabels": {"name": "observability"}},
        "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
    } in peers
    assert len(peers) == 4


def test_network_policy_off(helm):
    assert not by_kind(render(helm, *BASE, "--set", "networkPolicy.enabled=false"), "NetworkPolicy")
