"""Encryption at rest in the chart (docs/encryption.md): `encryption.*` and `config.s3Sse*`.

Every pod that reads or writes the archive (the worker, the followers, the gateway, the audit and the
`helm test` pod running `processor verify`) gets the same encryption settings as environment
variables, and with a key ring the Secret holding it, mounted read-only at /etc/processor/keyring.
S3 server-side encryption is an S3 setting like the others, in the ConfigMap. The defaults render
none of it. Settings the app would refuse are refused at render time with the value to change.
Every render is validated against the Kubernetes 1.30 schemas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from processor.config import Settings, load_settings
from tests.deploy.chart import (
    ALL_ON,
    BASE,
    CHART,
    by_kind,
    config_map,
    named,
    pod_specs,
    render,
    render_error,
    rendered_setting_names,
    run_helm,
    unknown_settings,
    validate_all,
)

KEYRING_DIR = "/etc/processor/keyring"
KEYRING_SECRET = "processor-keyring"
KMS_KEY = "arn:aws:kms:eu-west-1:111122223333:key/1234abcd-12ab-34cd-56ef-1234567890ab"
PAYMENTS_KEY = "arn:aws:kms:eu-west-1:111122223333:key/5678efgh-12ab-34cd-56ef-1234567890ab"
ORDERS_KEY = "0987dcba-09fe-87dc-65ba-ab0987654321"
SSE_KEY = "arn:aws:kms:eu-west-1:111122223333:key/9999aaaa-12ab-34cd-56ef-1234567890ab"
ENCRYPTION_ENV = {
    "PROCESSOR_ENCRYPTION",
    "PROCESSOR_ENCRYPTION_KEYRING",
    "PROCESSOR_KMS_KEY_ID",
    "PROCESSOR_KMS_TOPIC_KEY_IDS",
}
SSE_ENV = {"PROCESSOR_S3_SSE", "PROCESSOR_S3_SSE_KMS_KEY_ID", "PROCESSOR_S3_SSE_BUCKET_KEY"}
# Every workload that reads or writes the archive; the readiness test pod (HTTP only) is not one.
WORKLOADS = ["worker", "follower", "gateway", "audit", "test-verify"]
EVERY_WORKLOAD = [
    "--set", "followers.enabled=true",
    "--set", "gateway.enabled=true",
    "--set", "audit.enabled=true",
]  # fmt: skip
KEYRING = [
    "--set", "encryption.mode=keyring",
    "--set", f"encryption.keyring.existingSecret={KEYRING_SECRET}",
]  # fmt: skip
KMS = [
    "--set", "encryption.mode=kms",
    "--set", f"encryption.kms.keyId={KMS_KEY}",
    "--set", f"encryption.kms.topicKeyIds.payments={PAYMENTS_KEY}",
    "--set", f"encryption.kms.topicKeyIds.orders={ORDERS_KEY}",
]  # fmt: skip


@pytest.fixture(scope="module")
def keyring_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *BASE, *EVERY_WORKLOAD, *KEYRING)


@pytest.fixture(scope="module")
def kms_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *BASE, *EVERY_WORKLOAD, *KMS)


def _pod(docs: list[dict[str, Any]], workload: str) -> dict[str, Any]:
    """The pod spec of one workload."""
    if workload == "worker":
        doc = named(docs, "StatefulSet", "-worker")
    elif workload == "audit":
        doc = named(docs, "CronJob", "-audit")
        spec: dict[str, Any] = doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        return spec
    elif workload.startswith("test-"):
        pod: dict[str, Any] = named(docs, "Pod", f"-{workload}")["spec"]
        return pod
    else:
        doc = named(docs, "Deployment", f"-{workload}")
    template: dict[str, Any] = doc["spec"]["template"]["spec"]
    return template


def _container(spec: dict[str, Any]) -> dict[str, Any]:
    (container,) = spec["containers"]
    return dict(container)


def _env(container: dict[str, Any]) -> dict[str, str]:
    """The container's plain environment values (not the references)."""
    return {e["name"]: e["value"] for e in container.get("env") or [] if "value" in e}


def _encryption_env(container: dict[str, Any]) -> dict[str, str]:
    return {k: v for k, v in _env(container).items() if k in ENCRYPTION_ENV}


def _keyring_volumes(spec: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in spec.get("volumes") or [] if v.get("secret", {}).get("secretName") == KEYRING_SECRET]


def _keyring_mounts(container: dict[str, Any]) -> list[dict[str, Any]]:
    return [m for m in container.get("volumeMounts") or [] if m["mountPath"] == KEYRING_DIR]


def _settings(docs: list[dict[str, Any]], workload: str) -> Settings:
    """The settings a workload's container starts with: the ConfigMap, then its own env."""
    return load_settings({**config_map(docs), **_env(_container(_pod(docs, workload)))})


@pytest.mark.parametrize("fixture", ["default_docs", "all_docs"])
def test_defaults_render_no_encryption(fixture: str, request: pytest.FixtureRequest) -> None:
    docs: list[dict[str, Any]] = request.getfixturevalue(fixture)
    assert not (set(config_map(docs)) & (ENCRYPTION_ENV | SSE_ENV))
    for spec in pod_specs(docs):
        for container in spec["containers"]:
            names = {e["name"] for e in container.get("env") or []}
            assert not names & (ENCRYPTION_ENV | SSE_ENV), names
            assert not _keyring_mounts(container)
        assert not any(v["name"] == "encryption-keyring" for v in spec.get("volumes") or [])
    settings = load_settings(config_map(docs))
    assert (settings.encryption, settings.s3_sse) == ("none", "none")


def test_defaults_render_no_encryption_with_every_workload(helm: Path) -> None:
    docs = render(helm, *BASE, *EVERY_WORKLOAD)
    for workload in WORKLOADS:
        container = _container(_pod(docs, workload))
        assert not {e["name"] for e in container.get("env") or []} & ENCRYPTION_ENV, workload
        assert not _keyring_volumes(_pod(docs, workload))


def test_keyring_mounts_the_secret_on_every_archive_workload(keyring_docs: list[dict[str, Any]]) -> None:
    assert validate_all(keyring_docs) >= 10
    for workload in WORKLOADS:
        spec = _pod(keyring_docs, workload)
        container = _container(spec)
        (volume,) = _keyring_volumes(spec)
        # the whole Secret, its files the key ring, readable by the owner only (the pods' fsGroup
        # makes them readable by the processor's group, never by others)
        assert volume["secret"] == {"secretName": KEYRING_SECRET, "defaultMode": 0o400}, workload
        (mount,) = _keyring_mounts(container)
        assert mount == {"name": volume["name"], "mountPath": KEYRING_DIR, "readOnly": True}, workload
        assert _encryption_env(container) == {
            "PROCESSOR_ENCRYPTION": "keyring",
            "PROCESSOR_ENCRYPTION_KEYRING": KEYRING_DIR,
        }, workload
        settings = _settings(keyring_docs, workload)
        assert settings.encryption == "keyring"
        assert settings.encryption_keyring == Path(KEYRING_DIR)
    # the readiness pod only calls /readyz: no key ring there
    ready = _pod(keyring_docs, "test-ready")
    assert not _keyring_volumes(ready) and not _keyring_mounts(_container(ready))
    assert not _encryption_env(_container(ready))
    # the key ring is no ConfigMap setting: only the pods holding the mount point at it
    assert not set(config_map(keyring_docs)) & ENCRYPTION_ENV


def test_keyring_settings_are_settings_fields(keyring_docs: list[dict[str, Any]]) -> None:
    names = rendered_setting_names(keyring_docs)
    assert names >= {"PROCESSOR_ENCRYPTION", "PROCESSOR_ENCRYPTION_KEYRING"}
    assert unknown_settings(names) == set()


def test_keyring_volume_sits_beside_the_others(helm: Path) -> None:
    """With Kafka TLS and extra volumes, the key ring is one volume more, not instead of them."""
    docs = render(
        helm,
        *BASE,
        *EVERY_WORKLOAD,
        *KEYRING,
        "--set", "kafka.securityProtocol=SSL",
        "--set", "kafka.tls.caSecret=kafka-ca",
        "--set", "extraVolumes[0].name=hooks",
        "--set", "extraVolumes[0].emptyDir.sizeLimit=1Mi",
        "--set", "extraVolumeMounts[0].name=hooks",
        "--set", "extraVolumeMounts[0].mountPath=/hooks",
    )  # fmt: skip
    validate_all(docs)
    for workload in WORKLOADS:
        spec = _pod(docs, workload)
        mounts = {m["mountPath"] for m in _container(spec)["volumeMounts"]}
        assert {"/etc/processor/kafka/ca", "/hooks", KEYRING_DIR} <= mounts, workload
        names = [v["name"] for v in spec["volumes"]]
        assert len(names) == len(set(names)), workload


def test_kms_renders_the_key_ids(kms_docs: list[dict[str, Any]]) -> None:
    assert validate_all(kms_docs) >= 10
    for workload in WORKLOADS:
        spec = _pod(kms_docs, workload)
        container = _container(spec)
        # key ids and ARNs name keys, they are no secrets: plain values
        assert _encryption_env(container) == {
            "PROCESSOR_ENCRYPTION": "kms",
            "PROCESSOR_KMS_KEY_ID": KMS_KEY,
            "PROCESSOR_KMS_TOPIC_KEY_IDS": f"orders={ORDERS_KEY},payments={PAYMENTS_KEY}",
        }, workload
        assert not _keyring_volumes(spec) and not _keyring_mounts(container)
        settings = _settings(kms_docs, workload)
        assert settings.encryption == "kms"
        assert settings.kms_key_id == KMS_KEY
        assert dict(settings.kms_topic_key_ids) == {"orders": ORDERS_KEY, "payments": PAYMENTS_KEY}
    assert unknown_settings(rendered_setting_names(kms_docs)) == set()


def test_kms_without_topic_keys(helm: Path) -> None:
    docs = render(helm, *BASE, "--set", "encryption.mode=kms", "--set", f"encryption.kms.keyId={KMS_KEY}")
    env = _encryption_env(_container(_pod(docs, "worker")))
    assert env == {"PROCESSOR_ENCRYPTION": "kms", "PROCESSOR_KMS_KEY_ID": KMS_KEY}


def test_keyring_stays_readable_after_moving_to_kms(helm: Path) -> None:
    """Readers unwrap with every provider configured: with mode kms and the key ring's Secret still
    set, segments sealed under the key ring stay readable."""
    docs = render(
        helm, *BASE, *EVERY_WORKLOAD, *KMS, "--set", f"encryption.keyring.existingSecret={KEYRING_SECRET}"
    )
    validate_all(docs)
    for workload in WORKLOADS:
        spec = _pod(docs, workload)
        assert _keyring_volumes(spec) and _keyring_mounts(_container(spec)), workload
        env = _encryption_env(_container(spec))
        assert env["PROCESSOR_ENCRYPTION"] == "kms"
        assert env["PROCESSOR_ENCRYPTION_KEYRING"] == KEYRING_DIR
    # and with encryption turned off for new segments: the key ring only, no mode
    off = render(helm, *BASE, "--set", f"encryption.keyring.existingSecret={KEYRING_SECRET}")
    assert _encryption_env(_container(_pod(off, "worker"))) == {"PROCESSOR_ENCRYPTION_KEYRING": KEYRING_DIR}
    assert _settings(off, "worker").encryption == "none"


def test_sse_s3(helm: Path) -> None:
    docs = render(helm, *BASE, "--set", "config.s3Sse=AES256")
    validate_all(docs)
    config = config_map(docs)
    assert {k: v for k, v in config.items() if k in SSE_ENV} == {"PROCESSOR_S3_SSE": "AES256"}
    assert load_settings(config).s3_sse == "AES256"
    # independent of envelope encryption: no encryption env on the pods
    assert not _encryption_env(_container(_pod(docs, "worker")))


def test_sse_kms(helm: Path) -> None:
    docs = render(
        helm,
        *BASE,
        "--set", "config.s3Sse=aws:kms",
        "--set", f"config.s3SseKmsKeyId={SSE_KEY}",
        "--set", "config.s3SseBucketKey=false",
    )  # fmt: skip
    validate_all(docs)
    config = config_map(docs)
    assert {k: v for k, v in config.items() if k in SSE_ENV} == {
        "PROCESSOR_S3_SSE": "aws:kms",
        "PROCESSOR_S3_SSE_KMS_KEY_ID": SSE_KEY,
        "PROCESSOR_S3_SSE_BUCKET_KEY": "false",
    }
    settings = load_settings(config)
    assert (settings.s3_sse, settings.s3_sse_kms_key_id, settings.s3_sse_bucket_key) == (
        "aws:kms",
        SSE_KEY,
        False,
    )
    # the bucket's default key, with Bucket Keys (the defaults)
    default_key = config_map(render(helm, *BASE, "--set", "config.s3Sse=aws:kms"))
    assert {k: v for k, v in default_key.items() if k in SSE_ENV} == {
        "PROCESSOR_S3_SSE": "aws:kms",
        "PROCESSOR_S3_SSE_BUCKET_KEY": "true",
    }
    assert load_settings(default_key).s3_sse_kms_key_id is None


def test_everything_together_lints(helm: Path) -> None:
    values = [*BASE, *EVERY_WORKLOAD, *KMS, "--set", f"encryption.keyring.existingSecret={KEYRING_SECRET}"]
    values += ["--set", "config.s3Sse=aws:kms", "--set", f"config.s3SseKmsKeyId={SSE_KEY}"]
    proc = run_helm(helm, "lint", "--strict", str(CHART), *values)
    assert "0 chart(s) failed" in proc.stdout
    docs = render(helm, *ALL_ON, *values[len(BASE) :])
    validate_all(docs)
    assert not by_kind(docs, "Secret"), "the chart only references the key ring's Secret"


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (
            ["--set", "encryption.mode=keyring"],
            ["encryption.mode is keyring", "encryption.keyring.existingSecret"],
        ),
        (["--set", "encryption.mode=kms"], ["encryption.mode is kms", "encryption.kms.keyId"]),
        (
            ["--set", "encryption.mode=kms", "--set", "encryption.kms.topicKeyIds.orders=k"],
            ["encryption.mode is kms", "encryption.kms.keyId"],
        ),
        (
            ["--set", f"encryption.kms.keyId={KMS_KEY}"],
            ["encryption.kms.keyId/topicKeyIds are set", "encryption.mode is none", "encryption.mode=kms"],
        ),
        (
            [*KEYRING, "--set", f"encryption.kms.topicKeyIds.orders={ORDERS_KEY}"],
            ["encryption.mode is keyring", "encryption.mode=kms"],
        ),
        (
            ["--set", "config.s3Sse=AES256", "--set", f"config.s3SseKmsKeyId={SSE_KEY}"],
            ["config.s3SseKmsKeyId is set", "config.s3Sse is AES256", "config.s3Sse=aws:kms"],
        ),
    ],
)
def test_combinations_that_cannot_work_fail_naming_the_value(
    helm: Path, values: list[str], says: list[str]
) -> None:
    for args in ([*BASE, *values], [*BASE, *values, "--skip-schema-validation"]):
        error = " ".join(render_error(helm, *args).split())
        for phrase in says:
            assert phrase in error, error


@pytest.mark.parametrize(
    ("values", "path", "says"),
    [
        (["--set", "encryption.mode=vault"], "encryption.mode", 'encryption.mode is "vault"'),
        (["--set", "config.s3Sse=aws:kms:dsse"], "config.s3Sse", 'config.s3Sse is "aws:kms:dsse"'),
        (["--set", "config.s3Sse=aes256"], "config.s3Sse", 'config.s3Sse is "aes256"'),
    ],
)
def test_unknown_modes_fail_naming_the_value(helm: Path, values: list[str], path: str, says: str) -> None:
    assert path in render_error(helm, *BASE, *values)  # the schema's enum
    # the templates refuse them too, with what to use, when the schema is skipped
    assert says in render_error(helm, *BASE, *values, "--skip-schema-validation")


@pytest.mark.parametrize(
    ("values", "says"),
    [
        (["--set", "encryption.keyring.existingSecret=Not_A_Secret"], "encryption.keyring.existingSecret"),
        (["--set", "encryption.kms.topicKeyIds.or/ders=k"], 'Property name of "or/ders"'),
        (["--set", "encryption.kms.topicKeyIds.orders=a\\,b"], "encryption.kms.topicKeyIds.orders"),
        (["--set", "encryption.kms.keyId=with space"], "encryption.kms.keyId"),
        (["--set", "encryption.kms.keyRing=x"], "Additional property keyRing"),
        (["--set", "config.s3SseBucketKey=maybe"], "config.s3SseBucketKey"),
    ],
)
def test_schema_rejects_malformed_encryption_values(helm: Path, values: list[str], says: str) -> None:
    error = render_error(helm, *BASE, "--set", "encryption.mode=kms", *values)
    assert "don't meet the specifications of the schema" in error and says in error, error
