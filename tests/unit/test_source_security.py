"""Security settings of the batch source become aiokafka client arguments; bad ones are clear errors."""

from __future__ import annotations

import ssl

import pytest

from processor.config import load_settings
from processor.errors import ConfigError
from processor.leader.batch_source import SourceSecurity


def test_plaintext_by_default() -> None:
    assert SourceSecurity().client_kwargs() == {"security_protocol": "PLAINTEXT"}


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_sasl_ssl_passes_credentials_and_a_tls_context(mechanism: str) -> None:
    kwargs = SourceSecurity("SASL_SSL", mechanism, "user", "secret").client_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL"
    assert (kwargs["sasl_mechanism"], kwargs["sasl_plain_username"], kwargs["sasl_plain_password"]) == (
        mechanism,
        "user",
        "secret",
    )
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)


def test_sasl_without_credentials_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="PROCESSOR_SASL_USERNAME"):
        SourceSecurity("SASL_PLAINTEXT", "PLAIN").client_kwargs()


def test_a_missing_ca_file_is_an_error() -> None:
    with pytest.raises(OSError):
        SourceSecurity("SSL", ssl_cafile="/nonexistent/ca.pem").client_kwargs()


def test_settings_validate_the_new_variables() -> None:
    s = load_settings({"PROCESSOR_ARCHIVE_COMPRESSION": "zstd", "PROCESSOR_SASL_MECHANISM": "SCRAM-SHA-512"})
    assert (s.archive_compression, s.sasl_mechanism, s.fetch_concurrency) == ("zstd", "SCRAM-SHA-512", 4)
    with pytest.raises(ConfigError, match="PROCESSOR_ARCHIVE_COMPRESSION"):
        load_settings({"PROCESSOR_ARCHIVE_COMPRESSION": "brotli"})
    with pytest.raises(ConfigError, match="PROCESSOR_SECURITY_PROTOCOL"):
        load_settings({"PROCESSOR_SECURITY_PROTOCOL": "TLS"})
