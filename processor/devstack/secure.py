"""The secured local stack's Kafka side: what ``processor dev up --secure`` runs, and the settings to use it.

Two Kafka listeners, each a Tansu broker on a private loopback port behind the TLS/SASL gateway
(:mod:`processor.devstack.kafka_gateway`), each broker advertising its gateway's address so that no
client reaches it in plaintext:

- ``sasl_ssl``: TLS (server certificate from a throwaway CA) and SASL, with one user (PLAIN,
  SCRAM-SHA-256 or SCRAM-SHA-512 accepted) and one OAUTHBEARER token;
- ``mtls``: TLS with a client certificate required (mutual TLS), no SASL.

They are two separate Kafka clusters (Tansu advertises one address per broker): a worker uses one
of them. The certificates come from :mod:`processor.devstack.certs`; the password holds a quote and
a backslash on purpose, so that every layer that carries it (environment, JAAS line, librdkafka,
aiokafka, logs) is exercised with characters that need escaping.
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from processor.devstack.pki_files import DevPki
from processor.kafka_security import KafkaConnection, KafkaSecurity

DEV_USER = "processor"
SCRAM_MECHANISM = "SCRAM-SHA-512"
GATEWAY_CONFIG = "gateway.json"


@dataclass(frozen=True)
class SecureListener:
    name: str  # "sasl_ssl" or "mtls"
    internal: str  # the broker's own host:port (loopback, plaintext; only the gateway dials it)
    bootstrap_servers: str  # the gateway's host:port, advertised by the broker


@dataclass(frozen=True)
class SecureKafka:
    """Everything a client needs to reach the two secured listeners (secrets included: dev only)."""

    sasl_ssl: SecureListener
    mtls: SecureListener
    pki: DevPki
    username: str
    password: str
    oauth_token: str

    def sasl_ssl_env(self, mechanism: str = SCRAM_MECHANISM) -> dict[str, str]:
        """PROCESSOR_* variables for the SASL_SSL listener (user name and password)."""
        return {
            "PROCESSOR_BOOTSTRAP_SERVERS": self.sasl_ssl.bootstrap_servers,
            "PROCESSOR_SECURITY_PROTOCOL": "SASL_SSL",
            "PROCESSOR_SASL_MECHANISM": mechanism,
            "PROCESSOR_SASL_USERNAME": self.username,
            "PROCESSOR_SASL_PASSWORD": self.password,
            "PROCESSOR_SSL_CAFILE": self.pki.ca_file,
        }

    def mtls_env(self) -> dict[str, str]:
        """PROCESSOR_* variables for the mutual-TLS listener (client certificate and its key)."""
        return {
            "PROCESSOR_BOOTSTRAP_SERVERS": self.mtls.bootstrap_servers,
            "PROCESSOR_SECURITY_PROTOCOL": "SSL",
            "PROCESSOR_SSL_CAFILE": self.pki.ca_file,
            "PROCESSOR_SSL_CERTFILE": self.pki.client_cert,
            "PROCESSOR_SSL_KEYFILE": self.pki.client_key,
            "PROCESSOR_SSL_KEY_PASSWORD": self.pki.client_key_password,
        }

    def sasl_ssl_kafka(self) -> KafkaConnection:
        return KafkaConnection(self.sasl_ssl.bootstrap_servers, KafkaSecurity.from_env(self.sasl_ssl_env()))

    def mtls_kafka(self) -> KafkaConnection:
        return KafkaConnection(self.mtls.bootstrap_servers, KafkaSecurity.from_env(self.mtls_env()))

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SecureKafka:
        return cls(
            sasl_ssl=SecureListener(**data["sasl_ssl"]),
            mtls=SecureListener(**data["mtls"]),
            pki=DevPki(**data["pki"]),
            username=data["username"],
            password=data["password"],
            oauth_token=data["oauth_token"],
        )


def plan(root: Path, free_port: Callable[[], int]) -> SecureKafka:
    """Fresh certificates, credentials and ports for a secured stack in ``root`` (nothing started)."""
    # the ``cryptography`` package only when certificates are made (an install without the [local]
    # extra runs every command but ``dev up --secure``)
    from processor.devstack.certs import make_dev_pki

    pki = make_dev_pki(root / "pki", client_key_password=secrets.token_urlsafe(12))

    def listener(name: str) -> SecureListener:
        return SecureListener(name, f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}")

    return SecureKafka(
        sasl_ssl=listener("sasl_ssl"),
        mtls=listener("mtls"),
        pki=pki,
        username=DEV_USER,
        password=f'dev"pw\\{secrets.token_urlsafe(12)}',
        oauth_token=secrets.token_urlsafe(24),
    )


def write_gateway_config(root: Path, secure: SecureKafka) -> Path:
    """The gateway's configuration file (mode 0600: it holds the dev password)."""
    pki = secure.pki
    config = {
        "listeners": [
            {
                "listen": secure.sasl_ssl.bootstrap_servers,
                "upstream": secure.sasl_ssl.internal,
                "tls": {"cert": pki.broker_cert, "key": pki.broker_key},
                "sasl": {"users": {secure.username: secure.password}, "oauth_tokens": [secure.oauth_token]},
            },
            {
                "listen": secure.mtls.bootstrap_servers,
                "upstream": secure.mtls.internal,
                "tls": {
                    "cert": pki.broker_cert,
                    "key": pki.broker_key,
                    "ca": pki.ca_file,
                    "require_client_cert": True,
                },
                "sasl": None,
            },
        ]
    }
    path = root / GATEWAY_CONFIG
    path.touch(mode=0o600)
    path.write_text(json.dumps(config, indent=2))
    return path


SASL_VARIABLES = ("PROCESSOR_SASL_MECHANISM", "PROCESSOR_SASL_USERNAME", "PROCESSOR_SASL_PASSWORD")


def exports(env: dict[str, str], unset: tuple[str, ...] = ()) -> list[str]:
    """``export NAME=value`` lines, quoted for a POSIX shell (after an ``unset`` of ``unset``)."""
    lines = [f"unset {' '.join(unset)}"] if unset else []
    return lines + [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
