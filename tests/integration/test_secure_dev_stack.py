"""The secured dev stack itself: only TLS reaches the brokers, SASL and mutual TLS are enforced, and a
refusal names the broker and the mechanism, never the secret."""

from __future__ import annotations

import dataclasses

import pytest

from processor.devstack.stack import StackInfo
from processor.errors import ServiceUnavailableError
from processor.kafka.admin import check_broker
from processor.kafka.clients import new_admin
from processor.kafka.security import KafkaConnection, KafkaSecurity

pytestmark = pytest.mark.integration


def sasl(info: StackInfo, **changes: str) -> KafkaConnection:
    secured = info.secured
    assert secured is not None
    values = {**secured.sasl_ssl_env(), **changes}
    return KafkaConnection(info.bootstrap_servers, KafkaSecurity.from_env(values))


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN"])
def test_sasl_ssl_accepts_the_dev_user(secured_stack: StackInfo, mechanism: str) -> None:
    admin = check_broker(sasl(secured_stack, PROCESSOR_SASL_MECHANISM=mechanism))
    brokers = [f"{b.host}:{b.port}" for b in admin.list_topics(timeout=10).brokers.values()]
    assert brokers == [secured_stack.bootstrap_servers]  # the broker advertises the gateway only


def test_a_wrong_password_is_refused_naming_the_mechanism_and_broker(secured_stack: StackInfo) -> None:
    wrong = 'wrong-"canary\\-pw'
    with pytest.raises(ServiceUnavailableError) as err:
        check_broker(sasl(secured_stack, PROCESSOR_SASL_PASSWORD=wrong), timeout_s=5)
    text = str(err.value)
    assert secured_stack.bootstrap_servers in text and "SCRAM-SHA-512" in text and "'processor'" in text
    assert "Authentication failed" in text
    assert "canary" not in text


def test_an_untrusted_certificate_is_refused(secured_stack: StackInfo) -> None:
    assert secured_stack.secured is not None
    other_ca = secured_stack.secured.pki.untrusted_ca_file
    with pytest.raises(ServiceUnavailableError, match="certificate verify failed"):
        check_broker(sasl(secured_stack, PROCESSOR_SSL_CAFILE=other_ca), timeout_s=5)


def test_plaintext_and_tls_without_sasl_cannot_get_in(secured_stack: StackInfo) -> None:
    assert secured_stack.secured is not None
    with pytest.raises(ServiceUnavailableError):
        check_broker(secured_stack.bootstrap_servers, timeout_s=3)
    tls_only = KafkaSecurity.from_values({"protocol": "SSL", "ssl_cafile": secured_stack.secured.pki.ca_file})
    with pytest.raises(ServiceUnavailableError):
        check_broker(KafkaConnection(secured_stack.bootstrap_servers, tls_only), timeout_s=3)


def test_mutual_tls_needs_the_client_certificate(secured_stack: StackInfo) -> None:
    secured = secured_stack.secured
    assert secured is not None
    mtls = secured.mtls_kafka()
    check_broker(mtls)
    no_cert = dataclasses.replace(mtls.security, ssl_certfile=None, ssl_keyfile=None, ssl_key_password=None)
    with pytest.raises(ServiceUnavailableError) as err:
        check_broker(KafkaConnection(mtls.bootstrap_servers, no_cert), timeout_s=5)
    assert secured.mtls.bootstrap_servers in str(err.value)


def test_oauthbearer_token_from_a_hook(secured_stack: StackInfo, monkeypatch: pytest.MonkeyPatch) -> None:
    secured = secured_stack.secured
    assert secured is not None
    monkeypatch.setitem(globals(), "TOKEN", secured.oauth_token)
    security = KafkaSecurity.from_values(
        {
            "protocol": "SASL_SSL",
            "sasl_mechanism": "OAUTHBEARER",
            "oauth_token_provider": f"{__name__}:dev_token",
            "ssl_cafile": secured.pki.ca_file,
        }
    )
    admin = new_admin(KafkaConnection(secured_stack.bootstrap_servers, security), "oauth-test")
    assert admin.list_topics(timeout=10).brokers


TOKEN = ""


def dev_token() -> str:
    return TOKEN
