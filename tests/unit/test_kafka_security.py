"""KafkaSecurity: one settings object, validated with named errors, turned into each client's config."""

from __future__ import annotations

import asyncio
import ssl
import sys
from pathlib import Path
from typing import ClassVar

import pytest
from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth
from hypothesis import example, given
from hypothesis import strategies as st

from processor.devstack.certs import DevPki, make_dev_pki
from processor.errors import ConfigError
from processor.kafka.security import KafkaSecurity, SaslMechanism, SecurityProtocol


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> DevPki:
    return make_dev_pki(tmp_path_factory.mktemp("pki"), "key-pw")


def scram(**extra: str) -> KafkaSecurity:
    values = {
        "protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "alice",
        "sasl_password": 'pa"ss\\word',
        **extra,
    }
    return KafkaSecurity.from_values(values)


def test_plaintext_by_default() -> None:
    sec = KafkaSecurity.from_values({})
    assert sec.librdkafka_config() == {"security.protocol": "PLAINTEXT"}
    assert sec.aiokafka_kwargs() == {"security_protocol": "PLAINTEXT"}
    assert sec.faust_credentials() is None
    assert sec.describe() == "PLAINTEXT"


def test_sasl_ssl_scram_for_every_client(pki: DevPki) -> None:
    sec = scram(ssl_cafile=pki.ca_file)
    assert sec.librdkafka_config() == {
        "security.protocol": "SASL_SSL",
        "ssl.ca.location": pki.ca_file,
        "ssl.endpoint.identification.algorithm": "https",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "alice",
        "sasl.password": 'pa"ss\\word',
    }
    kwargs = sec.aiokafka_kwargs()
    assert kwargs["sasl_plain_password"] == 'pa"ss\\word'
    assert isinstance(kwargs["ssl_context"], ssl.SSLContext)
    assert kwargs["ssl_context"].check_hostname and kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    # Faust turns its credentials into the same aiokafka arguments.
    faust_kwargs = dict(credentials_to_aiokafka_auth(sec.faust_credentials()))
    assert faust_kwargs["security_protocol"] == "SASL_SSL"
    assert (faust_kwargs["sasl_mechanism"], faust_kwargs["sasl_plain_username"]) == ("SCRAM-SHA-512", "alice")
    assert isinstance(faust_kwargs["ssl_context"], ssl.SSLContext)


def test_mutual_tls_with_an_encrypted_key(pki: DevPki) -> None:
    sec = KafkaSecurity.from_values(
        {
            "protocol": "SSL",
            "ssl_cafile": pki.ca_file,
            "ssl_certfile": pki.client_cert,
            "ssl_keyfile": pki.client_key,
            "ssl_key_password": pki.client_key_password,
        }
    )
    assert sec.mutual_tls
    cfg = sec.librdkafka_config()
    assert (cfg["ssl.certificate.location"], cfg["ssl.key.location"], cfg["ssl.key.password"]) == (
        pki.client_cert,
        pki.client_key,
        "key-pw",
    )
    assert isinstance(sec.ssl_context(), ssl.SSLContext)
    faust_kwargs = dict(credentials_to_aiokafka_auth(sec.faust_credentials()))
    assert faust_kwargs["security_protocol"] == "SSL"
    wrong = KafkaSecurity.from_values({**_fields(sec), "ssl_key_password": "not-it"})
    with pytest.raises(ConfigError, match="wrong key password") as err:
        wrong.ssl_context()
    assert "not-it" not in str(err.value)


def _fields(sec: KafkaSecurity) -> dict[str, object]:
    return {k: v for k, v in vars(sec).items() if v is not None}


def test_hostname_verification_can_be_turned_off_on_purpose(pki: DevPki) -> None:
    sec = KafkaSecurity.from_values(
        {"protocol": "SSL", "ssl_cafile": pki.ca_file, "ssl_check_hostname": "false"}
    )
    assert sec.librdkafka_config()["ssl.endpoint.identification.algorithm"] == "none"
    context = sec.ssl_context()
    assert context is not None and not context.check_hostname


def test_system_ca_bundle_when_no_ca_file_is_given() -> None:
    assert scram().librdkafka_config()["ssl.ca.location"] == "probe"


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (
            {"protocol": "SASL_SSL", "sasl_mechanism": "PLAIN", "sasl_password": "x"},
            "PROCESSOR_SASL_USERNAME",
        ),
        ({"protocol": "SASL_SSL", "sasl_username": "u"}, "PROCESSOR_SASL_PASSWORD"),
        ({"protocol": "SASL_SSL", "sasl_username": "u", "sasl_password": ""}, "PROCESSOR_SASL_PASSWORD"),
        ({"protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER"}, "PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER"),
        (
            {"protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "oauth_token_provider": "aws-msk-iam"},
            "PROCESSOR_SASL_OAUTH_AWS_REGION",
        ),
        ({"protocol": "PLAINTEXT", "sasl_username": "u"}, "does not use SASL"),
        (
            {"protocol": "SASL_PLAINTEXT", "sasl_username": "u", "sasl_password": "p", "ssl_cafile": "/x"},
            "TLS",
        ),
        ({"protocol": "SSL", "ssl_certfile": __file__}, "PROCESSOR_SSL_KEYFILE"),
        ({"protocol": "SSL", "ssl_cafile": "/nonexistent/ca.pem"}, "PROCESSOR_SSL_CAFILE"),
        ({"protocol": "TLS"}, "PROCESSOR_SECURITY_PROTOCOL"),
        ({"protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "PROCESSOR_SASL_MECHANISM"),
        ({"ssl_check_hostname": "maybe"}, "PROCESSOR_SSL_CHECK_HOSTNAME"),
    ],
)
def test_bad_settings_name_the_variable(values: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        KafkaSecurity.from_values(values)


def test_secrets_never_show() -> None:
    sec = scram()
    assert 'pa"ss\\word' not in repr(sec)
    assert 'pa"ss\\word' not in sec.describe()
    assert sec.describe() == "SASL_SSL, SCRAM-SHA-512 as user 'alice'"
    assert sec.redact('auth failed for pa"ss\\word!') == "auth failed for ***!"


@given(secret=st.text(min_size=1), before=st.text(), after=st.text())
def test_redact_removes_the_secret_wherever_it_stands(secret: str, before: str, after: str) -> None:
    sec = KafkaSecurity.from_values(
        {"protocol": "SASL_PLAINTEXT", "sasl_username": "u", "sasl_password": secret}
    )
    assert secret not in sec.redact(before + secret + after) or secret in "***"


# --- Spark options -----------------------------------------------------------------------------


def jaas(module: str, username: str, password: str) -> str:
    def quote(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    login = f"org.apache.kafka.common.security.{module}"
    return f"{login} required username={quote(username)} password={quote(password)};"


def test_spark_options_with_a_jaas_line(pki: DevPki) -> None:
    sec = KafkaSecurity.from_spark_options(
        {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.sasl.mechanism": "SCRAM-SHA-256",
            "kafka.sasl.jaas.config": jaas("scram.ScramLoginModule", "bob", 'p"w\\1'),
            "kafka.ssl.ca.location": pki.ca_file,
        }
    )
    assert (sec.protocol, sec.sasl_mechanism, sec.sasl_username) == (
        SecurityProtocol.SASL_SSL,
        SaslMechanism.SCRAM_SHA_256,
        "bob",
    )
    assert sec.sasl_password is not None and sec.sasl_password.get_secret_value() == 'p"w\\1'


@example(username=" ", password="p")
@given(
    username=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1),
    password=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1),
)
def test_jaas_credentials_round_trip(username: str, password: str) -> None:
    sec = KafkaSecurity.from_spark_options(
        {
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.jaas.config": jaas("plain.PlainLoginModule", username, password),
        }
    )
    assert sec.sasl_username == username
    assert sec.sasl_password is not None and sec.sasl_password.get_secret_value() == password


def test_spark_defaults_to_the_process_settings_without_security_options() -> None:
    default = scram()
    assert KafkaSecurity.from_spark_options({"kafka.bootstrap.servers": "b:9092"}, default) is default
    assert KafkaSecurity.from_spark_options({}).protocol is SecurityProtocol.PLAINTEXT


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"kafka.ssl.truststore.location": "/etc/kafka/truststore.jks"}, "kafka.ssl.ca.location"),
        (
            {"kafka.ssl.truststore.location": "/t.p12", "kafka.ssl.truststore.type": "PKCS12"},
            "kafka.ssl.ca.location",
        ),
        ({"kafka.ssl.keystore.location": "/k.jks"}, "kafka.ssl.certificate.location"),
        ({"kafka.ssl.truststore.password": "changeit"}, "kafka.ssl.ca.location"),
        ({"kafka.ssl.cipher.suites": "x"}, "unsupported Kafka security option"),
        ({"kafka.security.protocol": "SASL_SSL"}, "GSSAPI"),
        (
            {
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "SCRAM-SHA-512",
                "kafka.sasl.jaas.config": jaas("plain.PlainLoginModule", "u", "p"),
            },
            "does not fit",
        ),
        ({"kafka.sasl.jaas.config": "username=u password=p"}, "not a JAAS line"),
        ({"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}, "kafka.sasl.username"),
    ],
)
def test_spark_options_errors_name_the_option(options: dict[str, str], named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        KafkaSecurity.from_spark_options(options)


def test_spark_pem_stores_and_hostname_option(pki: DevPki) -> None:
    sec = KafkaSecurity.from_spark_options(
        {
            "kafka.security.protocol": "SSL",
            "kafka.ssl.truststore.type": "PEM",
            "kafka.ssl.truststore.location": pki.ca_file,
            "kafka.ssl.certificate.location": pki.client_cert,
            "kafka.ssl.key.location": pki.client_key,
            "kafka.ssl.key.password": pki.client_key_password,
            "kafka.ssl.endpoint.identification.algorithm": "",
        }
    )
    assert (sec.ssl_cafile, sec.ssl_check_hostname, sec.mutual_tls) == (pki.ca_file, False, True)


# --- OAUTHBEARER -------------------------------------------------------------------------------

CALLS: list[str] = []


def stub_token() -> tuple[str, float]:
    CALLS.append("called")
    return "tok-1", 4_000_000_000.0


def failing_token() -> str:
    raise RuntimeError("identity service down")


def oauth(provider: str, **extra: str) -> KafkaSecurity:
    values = {"protocol": "SASL_SSL", "sasl_mechanism": "OAUTHBEARER", "oauth_token_provider": provider}
    return KafkaSecurity.from_values({**values, **extra})


def test_oauth_hook_reaches_every_client() -> None:
    sec = oauth(f"{__name__}:stub_token")
    cfg = sec.librdkafka_config()
    assert cfg["sasl.mechanism"] == "OAUTHBEARER" and "sasl.password" not in cfg
    assert cfg["oauth_cb"]("") == ("tok-1", 4_000_000_000.0)
    provider = sec.aiokafka_kwargs()["sasl_oauth_token_provider"]
    assert asyncio.run(provider.token()) == "tok-1"
    assert (
        dict(credentials_to_aiokafka_auth(sec.faust_credentials()))["sasl_oauth_token_provider"] is provider
    )
    assert len(CALLS) == 1  # cached: one call of the hook for every client of the process


def test_a_failing_hook_names_the_provider() -> None:
    provider = oauth(f"{__name__}.failing_token").token_provider()
    assert provider is not None
    with pytest.raises(Exception, match=r"failing_token failed: RuntimeError: identity service down"):
        provider.current()


@pytest.mark.parametrize("path", ["nomodule_here:fn", f"{__name__}:missing", "justaname"])
def test_a_bad_hook_path_is_a_config_error(path: str) -> None:
    with pytest.raises(ConfigError, match="PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER"):
        oauth(path).token_provider()


class StubSigner:
    calls: ClassVar[list[tuple[str, ...]]] = []

    @classmethod
    def generate_auth_token(cls, region: str) -> tuple[str, int]:
        cls.calls.append((region,))
        return "msk-token", 1_900_000_000_000

    @classmethod
    def generate_auth_token_from_role_arn(cls, region: str, role_arn: str) -> tuple[str, int]:
        cls.calls.append((region, role_arn))
        return "msk-role-token", 1_900_000_000_000


def test_msk_iam_tokens_from_the_signer() -> None:
    from processor.kafka.oauth import CachedToken, msk_iam_source

    token = CachedToken(msk_iam_source("eu-west-1", signer=StubSigner), "msk")
    assert token.current() == ("msk-token", 1_900_000_000.0)
    role = CachedToken(msk_iam_source("eu-west-1", "arn:aws:iam::1:role/r", signer=StubSigner), "msk")
    assert role.current()[0] == "msk-role-token"
    assert StubSigner.calls == [("eu-west-1",), ("eu-west-1", "arn:aws:iam::1:role/r")]


def test_msk_iam_without_the_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", None)
    sec = oauth("aws-msk-iam", oauth_aws_region="us-east-2")
    with pytest.raises(ConfigError, match=r"\[msk\] extra"):
        sec.token_provider()


def test_cached_token_is_renewed_before_it_expires() -> None:
    from processor.kafka.oauth import REFRESH_MARGIN_S, CachedToken

    now = [1000.0]
    answers = iter([("a", 1100.0), ("b", 1300.0)])
    token = CachedToken(lambda: next(answers), "t", clock=lambda: now[0])
    assert token.current()[0] == "a"
    now[0] = 1100.0 - REFRESH_MARGIN_S - 1
    assert token.current()[0] == "a"
    now[0] = 1100.0 - REFRESH_MARGIN_S + 1
    assert token.current()[0] == "b"


def test_a_token_string_alone_gets_a_default_lifetime() -> None:
    from processor.kafka.oauth import DEFAULT_LIFETIME_S, CachedToken

    token = CachedToken(lambda: "bare", "t", clock=lambda: 50.0)
    assert token.current() == ("bare", 50.0 + DEFAULT_LIFETIME_S)


def test_pem_files_exist(pki: DevPki) -> None:
    for path in (pki.ca_file, pki.broker_cert, pki.broker_key, pki.client_cert, pki.client_key):
        assert Path(path).is_file()
    assert b"ENCRYPTED" in Path(pki.client_key).read_bytes()


@given(
    protocol=st.sampled_from(list(SecurityProtocol)),
    mechanism=st.sampled_from([m for m in SaslMechanism if m is not SaslMechanism.OAUTHBEARER]),
    user=st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=20),
    password=st.text(st.characters(codec="utf-8"), min_size=1, max_size=20),
    check_hostname=st.booleans(),
    mutual=st.booleans(),
)
def test_spark_options_round_trip(
    pki: DevPki, protocol, mechanism, user: str, password: str, check_hostname: bool, mutual: bool
) -> None:
    values: dict[str, object] = {"protocol": protocol}
    if protocol in (SecurityProtocol.SASL_SSL, SecurityProtocol.SASL_PLAINTEXT):
        values.update(sasl_mechanism=mechanism, sasl_username=user, sasl_password=password)
    if protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL):
        values.update(ssl_cafile=pki.ca_file, ssl_check_hostname=check_hostname)
        if mutual:
            values.update(ssl_certfile=pki.client_cert, ssl_keyfile=pki.client_key, ssl_key_password="key-pw")
    sec = KafkaSecurity.from_values(values)
    assert KafkaSecurity.from_spark_options(sec.spark_options()) == sec
    secret_keys = {"kafka.sasl.password", "kafka.ssl.key.password"} & set(sec.spark_options())
    assert sorted(sec.spark_options()[k] for k in secret_keys) == sorted(sec.secrets())
