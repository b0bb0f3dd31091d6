"""The secured local stack's Kafka side: what ``processor dev up --secure`` runs, and the settings to use it.

One Apache Kafka broker (:mod:`processor.devstack.apache_kafka`) with two listeners for clients:

- ``sasl_ssl``: TLS (server certificate from a throwaway CA) and SASL, with one user (PLAIN,
  SCRAM-SHA-256 or SCRAM-SHA-512 accepted) and one OAUTHBEARER token (an unsigned JWT for Kafka's
  unsecured validator);
- ``mtls``: TLS with a client certificate required (mutual TLS), no SASL.

Both reach the same cluster, with the StandardAuthorizer and ACLs on: the dev user (``processor``,
also the client certificate's name) is allowed everything, nobody else anything. The certificates
come from :mod:`processor.devstack.certs`; the password holds a quote and a backslash on purpose, so
that every layer that carries it (environment, JAAS line, librdkafka, aiokafka, logs) is exercised
with characters that need escaping.
"""

from __future__ import annotations

import base64
import json
import secrets
import shlex
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from processor.devstack.pki_files import DevPki
from processor.kafka.security import KafkaConnection, KafkaSecurity

DEV_USER = "processor"
SCRAM_MECHANISM = "SCRAM-SHA-512"


def unsecured_jws(subject: str, lifetime_s: int = 10 * 365 * 24 * 3600) -> str:
    """An unsigned JWT (``alg: none``) for Kafka's unsecured OAUTHBEARER validator."""

    def part(data: dict[str, object]) -> str:
        return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + lifetime_s})}."


@dataclass(frozen=True)
class SecureListener:
    name: str  # "sasl_ssl" or "mtls"
    bootstrap_servers: str  # host:port of the broker's listener


@dataclass(frozen=True)
class SecureKafka:
    """Everything a client needs to reach the two secured listeners (secrets included: dev only)."""

    sasl_ssl: SecureListener
    mtls: SecureListener
    pki: DevPki
    username: str
    password: str
    oauth_token: str
    admin_password: str  # the PLAIN super user that sets the stack up (users, ACLs)

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

    def admin_env(self) -> dict[str, str]:
        """PROCESSOR_* variables of the stack's super user (PLAIN on the SASL_SSL listener)."""
        return {
            **self.sasl_ssl_env("PLAIN"),
            "PROCESSOR_SASL_USERNAME": "admin",
            "PROCESSOR_SASL_PASSWORD": self.admin_password,
        }

    def admin_kafka(self) -> KafkaConnection:
        return KafkaConnection(self.sasl_ssl.bootstrap_servers, KafkaSecurity.from_env(self.admin_env()))

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
            admin_password=data["admin_password"],
        )


def plan(root: Path, sasl_ssl_port: int, mtls_port: int) -> SecureKafka:
    """Fresh certificates, credentials and ports for a secured stack in ``root`` (nothing started)."""
    # the ``cryptography`` package only when certificates are made (an install without the [local]
    # extra runs every command but ``dev up --secure``)
    from processor.devstack.certs import make_dev_pki

    pki = make_dev_pki(root / "pki", client_key_password=secrets.token_urlsafe(12))

    return SecureKafka(
        sasl_ssl=SecureListener("sasl_ssl", f"127.0.0.1:{sasl_ssl_port}"),
        mtls=SecureListener("mtls", f"127.0.0.1:{mtls_port}"),
        pki=pki,
        username=DEV_USER,
        password=f'dev"pw\\{secrets.token_urlsafe(12)}',
        oauth_token=unsecured_jws(DEV_USER),
        admin_password=secrets.token_urlsafe(18),
    )


SASL_VARIABLES = ("PROCESSOR_SASL_MECHANISM", "PROCESSOR_SASL_USERNAME", "PROCESSOR_SASL_PASSWORD")


def exports(env: dict[str, str], unset: tuple[str, ...] = ()) -> list[str]:
    """``export NAME=value`` lines, quoted for a POSIX shell (after an ``unset`` of ``unset``)."""
    lines = [f"unset {' '.join(unset)}"] if unset else []
    return lines + [f"export {name}={shlex.quote(value)}" for name, value in env.items()]
