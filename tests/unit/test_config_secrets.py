"""``processor config`` never prints a secret: SecretStr settings and URL passwords show ``***``."""

from __future__ import annotations

import json

import pytest

from processor.commands.config_cmd import describe
from processor.config import load_settings
from processor.errors import ConfigError
from processor.logs import MASK, mask_url_password


def test_url_passwords_are_masked() -> None:
    env = {"PROCESSOR_S3_ENDPOINT_URL": "https://minio:canary-url-pw@s3.local:9000/path"}
    report = describe(load_settings(env), env)
    text = json.dumps(report)
    assert "canary-url-pw" not in text
    row = next(r for r in report["settings"] if r["variable"] == "PROCESSOR_S3_ENDPOINT_URL")
    assert row["display"] == f"https://minio:{MASK}@s3.local:9000/path"


def test_urls_without_credentials_are_unchanged() -> None:
    for url in ("http://127.0.0.1:9000", "https://s3.amazonaws.com/a:b", "not a url", "s3://bucket/x@y"):
        assert mask_url_password(url) == url


def test_every_secret_setting_shows_as_stars(tmp_path) -> None:
    key = tmp_path / "client-key.pem"
    cert = tmp_path / "client.pem"
    for path in (key, cert):
        path.write_text("-----BEGIN X-----\n")
    env = {
        "PROCESSOR_SECURITY_PROTOCOL": "SASL_SSL",
        "PROCESSOR_SASL_MECHANISM": "SCRAM-SHA-256",
        "PROCESSOR_SASL_USERNAME": "alice",
        "PROCESSOR_SASL_PASSWORD": 'canary-sasl-"pw\\',
        "PROCESSOR_SSL_CERTFILE": str(cert),
        "PROCESSOR_SSL_KEYFILE": str(key),
        "PROCESSOR_SSL_KEY_PASSWORD": "canary-key-pw",
        "PROCESSOR_WEB_TOKEN": "canary-web-token",
    }
    settings = load_settings(env)
    text = json.dumps(describe(settings, env))
    for canary in ("canary-sasl", "canary-key-pw", "canary-web-token"):
        assert canary not in text
        assert canary not in repr(settings) and canary not in str(settings)
    shown = {r["variable"]: r["display"] for r in describe(settings, env)["settings"]}
    assert shown["PROCESSOR_SASL_PASSWORD"] == shown["PROCESSOR_SSL_KEY_PASSWORD"] == MASK
    assert shown["PROCESSOR_SASL_USERNAME"] == "alice"
    assert settings.kafka.security.librdkafka_config()["sasl.password"] == 'canary-sasl-"pw\\'


def test_an_empty_web_token_is_a_configuration_error() -> None:
    for empty in ("", "   "):
        with pytest.raises(ConfigError, match="PROCESSOR_WEB_TOKEN: is set but empty"):
            load_settings({"PROCESSOR_WEB_TOKEN": empty})
    assert load_settings({"PROCESSOR_WEB_AUTH": "none"}).web_auth == "none"
    with pytest.raises(ConfigError, match="PROCESSOR_WEB_AUTH"):
        load_settings({"PROCESSOR_WEB_AUTH": "off"})


def test_inconsistent_kafka_security_names_the_variables() -> None:
    with pytest.raises(ConfigError, match="PROCESSOR_SASL_PASSWORD: SCRAM-SHA-512 needs a password"):
        load_settings(
            {
                "PROCESSOR_SECURITY_PROTOCOL": "SASL_SSL",
                "PROCESSOR_SASL_MECHANISM": "SCRAM-SHA-512",
                "PROCESSOR_SASL_USERNAME": "u",
            }
        )
    with pytest.raises(ConfigError, match="PROCESSOR_SASL_OAUTH_AWS_REGION"):
        load_settings(
            {
                "PROCESSOR_SECURITY_PROTOCOL": "SASL_SSL",
                "PROCESSOR_SASL_MECHANISM": "OAUTHBEARER",
                "PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER": "aws-msk-iam",
            }
        )


def test_unlimited_settings_show_as_unlimited_not_as_a_negative_size_or_time() -> None:
    env = {"PROCESSOR_TOPICS": "orders", "PROCESSOR_REMOTE_RETENTION_BYTES": "1GiB"}
    shown = {r["variable"]: r for r in describe(load_settings(env), env)["settings"]}
    for variable in (
        "PROCESSOR_REMOTE_RETENTION_MS",
        "PROCESSOR_UPLOAD_BYTES_PER_SECOND",
    ):
        assert (shown[variable]["display"], shown[variable]["value"]) == ("unlimited", -1)
    assert shown["PROCESSOR_REMOTE_RETENTION_BYTES"]["display"] == "1GiB"
