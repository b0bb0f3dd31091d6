"""How every Kafka client of this package authenticates: one ``KafkaSecurity``, one translation each.

``KafkaSecurity`` holds the protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL), the SASL mechanism
(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER) with its credentials or token provider, and the
TLS material (CA bundle, client certificate and key for mutual TLS, hostname verification, on by
default). It is built from the ``PROCESSOR_*`` settings (:meth:`KafkaSecurity.from_values`) or from
a Spark source's ``kafka.*`` options (:meth:`KafkaSecurity.from_spark_options`), and turned into:

- librdkafka properties (confluent-kafka Consumer, Producer, AdminClient): :meth:`librdkafka_config`;
- aiokafka keyword arguments (the batch source's client): :meth:`aiokafka_kwargs`;
- Faust's ``broker_credentials`` (the consumer group, which runs on aiokafka): :meth:`faust_credentials`.

No client is configured for security anywhere else (:mod:`processor.kafka.clients` builds them).
Secrets are ``SecretStr``: ``repr`` and ``str`` show ``**********``, :meth:`describe` names only the
protocol, mechanism and user, and :meth:`redact` removes every secret value from a text (an error
message from a client library, say) before it is shown.
"""

from __future__ import annotations

import functools
import logging
import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from processor.errors import ConfigError
from processor.kafka.oauth import MSK_IAM, CachedToken, load_hook, msk_iam_source

log = logging.getLogger(__name__)


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"


class SaslMechanism(StrEnum):
    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"
    OAUTHBEARER = "OAUTHBEARER"


# The name users set for each field, for error messages: environment variables, Spark options.
ENV_NAMES: dict[str, str] = {
    "protocol": "PROCESSOR_SECURITY_PROTOCOL",
    "sasl_mechanism": "PROCESSOR_SASL_MECHANISM",
    "sasl_username": "PROCESSOR_SASL_USERNAME",
    "sasl_password": "PROCESSOR_SASL_PASSWORD",
    "ssl_cafile": "PROCESSOR_SSL_CAFILE",
    "ssl_certfile": "PROCESSOR_SSL_CERTFILE",
    "ssl_keyfile": "PROCESSOR_SSL_KEYFILE",
    "ssl_key_password": "PROCESSOR_SSL_KEY_PASSWORD",
    "ssl_check_hostname": "PROCESSOR_SSL_CHECK_HOSTNAME",
    "oauth_token_provider": "PROCESSOR_SASL_OAUTH_TOKEN_PROVIDER",
    "oauth_aws_region": "PROCESSOR_SASL_OAUTH_AWS_REGION",
    "oauth_aws_role_arn": "PROCESSOR_SASL_OAUTH_AWS_ROLE_ARN",
}
SPARK_NAMES: dict[str, str] = {
    "protocol": "kafka.security.protocol",
    "sasl_mechanism": "kafka.sasl.mechanism",
    "sasl_username": "kafka.sasl.username",
    "sasl_password": "kafka.sasl.password",
    "ssl_cafile": "kafka.ssl.ca.location",
    "ssl_certfile": "kafka.ssl.certificate.location",
    "ssl_keyfile": "kafka.ssl.key.location",
    "ssl_key_password": "kafka.ssl.key.password",
    "ssl_check_hostname": "kafka.ssl.endpoint.identification.algorithm",
    "oauth_token_provider": "kafka.sasl.oauth.token.provider",
    "oauth_aws_region": "kafka.sasl.oauth.aws.region",
    "oauth_aws_role_arn": "kafka.sasl.oauth.aws.role.arn",
}
_JAAS = "kafka.sasl.jaas.config"
# Spark/Java option names with no Python meaning: refused with a pointer to the PEM option.
_JAVA_KEYSTORES = {
    "kafka.ssl.truststore.location": "kafka.ssl.ca.location (a PEM CA bundle)",
    "kafka.ssl.truststore.password": "kafka.ssl.ca.location (PEM bundles have no password)",
    "kafka.ssl.keystore.location": "kafka.ssl.certificate.location and kafka.ssl.key.location (PEM)",
    "kafka.ssl.keystore.password": "kafka.ssl.key.password (for an encrypted PEM key)",
}


@dataclass(frozen=True)
class KafkaSecurity:
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    sasl_mechanism: SaslMechanism = SaslMechanism.PLAIN
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None  # None: the system's CA bundle
    ssl_certfile: str | None = None  # client certificate (PEM) for mutual TLS
    ssl_keyfile: str | None = None  # its private key (PEM, optionally encrypted)
    ssl_key_password: SecretStr | None = None
    ssl_check_hostname: bool = True
    oauth_token_provider: str | None = None  # "module:function" or "aws-msk-iam"
    oauth_aws_region: str | None = None
    oauth_aws_role_arn: str | None = None

    # --- building ------------------------------------------------------------------------------

    @classmethod
    def from_values(
        cls, values: Mapping[str, Any], names: Mapping[str, str] = ENV_NAMES, check: bool = True
    ) -> KafkaSecurity:
        """A validated instance from field values (strings accepted); ConfigError naming ``names``.
        ``check=False`` leaves the consistency checks (:meth:`problems`) to the caller."""
        kwargs: dict[str, Any] = {}
        errors: list[str] = []
        for f in fields(cls):
            raw = values.get(f.name)
            if isinstance(raw, SecretStr):
                raw = raw.get_secret_value()
            if raw is None or raw == "":
                continue  # empty is unset
            try:
                kwargs[f.name] = _coerce(f.name, raw)
            except ValueError as exc:
                errors.append(f"{names.get(f.name, f.name)}: {exc}")
        if errors:
            raise ConfigError("invalid Kafka security settings:\n  " + "\n  ".join(errors))
        security = cls(**kwargs)
        if check:
            security.validate(names)
        return security

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> KafkaSecurity:
        """From ``PROCESSOR_*`` variables (the names in ``ENV_NAMES``), validated."""
        return cls.from_values({f: environ[n] for f, n in ENV_NAMES.items() if n in environ})

    @classmethod
    def from_spark_options(
        cls, options: Mapping[str, str], default: KafkaSecurity | None = None
    ) -> KafkaSecurity:
        """From Spark's Kafka source option names (``kafka.security.protocol``, ``kafka.sasl.*``,
        ``kafka.ssl.*``). Without any of them, ``default`` (the process settings) applies whole;
        with any, the options alone decide (no mixing of two credential sources).

        ``kafka.sasl.jaas.config`` gives the PLAIN/SCRAM user and password
        (``...LoginModule required username="u" password="p";``). Java keystores (JKS, PKCS12)
        cannot be read by the Python clients: ``kafka.ssl.truststore.*``/``keystore.*`` are refused
        unless their ``.type`` is PEM, and the error names the PEM option to use instead.
        """
        opts = {k.lower(): v for k, v in options.items()}
        relevant = [k for k in opts if k.startswith(("kafka.security.", "kafka.sasl.", "kafka.ssl."))]
        if not relevant:
            return default if default is not None else cls()
        known = {*SPARK_NAMES.values(), _JAAS, *_JAVA_KEYSTORES}
        known |= {"kafka.ssl.truststore.type", "kafka.ssl.keystore.type"}
        unknown = sorted(set(relevant) - known)
        if unknown:
            raise ConfigError(
                f"unsupported Kafka security option(s) {', '.join(unknown)}; supported: "
                + ", ".join(sorted({*SPARK_NAMES.values(), _JAAS}))
            )
        values: dict[str, Any] = {f: opts[n] for f, n in SPARK_NAMES.items() if n in opts}
        _keystores_as_pem(opts, values)
        if _JAAS in opts:
            _apply_jaas(opts[_JAAS], values)
        if "ssl_check_hostname" in values:
            algorithm = str(values["ssl_check_hostname"]).strip().lower()
            if algorithm not in ("", "https", "none"):
                raise ConfigError(f"{SPARK_NAMES['ssl_check_hostname']}: {algorithm!r} is not https or empty")
            values["ssl_check_hostname"] = algorithm == "https"
        if str(values.get("sasl_mechanism", "")).upper() == "GSSAPI" or (
            "sasl_mechanism" not in values and str(values.get("protocol", "")).upper().startswith("SASL_")
        ):
            raise ConfigError(
                "kafka.sasl.mechanism: GSSAPI (Kafka's default) is not supported; "
                "set PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER"
            )
        return cls.from_values(values, SPARK_NAMES)

    def validate(self, names: Mapping[str, str] = ENV_NAMES) -> None:
        problems = self.problems(names)
        if problems:
            raise ConfigError("invalid Kafka security settings:\n  " + "\n  ".join(problems))

    def problems(self, names: Mapping[str, str] = ENV_NAMES) -> list[str]:
        """Every inconsistency, each naming the setting to change (never a secret's value)."""

        def n(field: str) -> str:
            return names.get(field, field)

        out: list[str] = []
        proto = n("protocol")
        if self.uses_sasl:
            if self.sasl_mechanism is SaslMechanism.OAUTHBEARER:
                if not self.oauth_token_provider:
                    out.append(
                        f"{n('oauth_token_provider')}: OAUTHBEARER needs a token provider "
                        f"('module:function' or '{MSK_IAM}')"
                    )
                elif self.oauth_token_provider == MSK_IAM and not self.oauth_aws_region:
                    out.append(f"{n('oauth_aws_region')}: {MSK_IAM} needs the cluster's AWS region")
            else:
                if not self.sasl_username:
                    out.append(f"{n('sasl_username')}: {self.sasl_mechanism} needs a user name")
                if self.sasl_password is None or not self.sasl_password.get_secret_value():
                    out.append(f"{n('sasl_password')}: {self.sasl_mechanism} needs a password")
        elif self.sasl_username or self.sasl_password or self.oauth_token_provider:
            out.append(
                f"{proto}={self.protocol} does not use SASL, yet SASL credentials are set "
                "(choose SASL_SSL or SASL_PLAINTEXT, or remove them)"
            )
        tls_files = ("ssl_cafile", "ssl_certfile", "ssl_keyfile")
        if not self.uses_tls and any(getattr(self, f) for f in tls_files):
            out.append(
                f"{proto}={self.protocol} does not use TLS, yet TLS files are set (choose SSL or SASL_SSL)"
            )
        if bool(self.ssl_certfile) != bool(self.ssl_keyfile):
            out.append(
                f"{n('ssl_certfile')} and {n('ssl_keyfile')}: mutual TLS needs both the client "
                "certificate and its key"
            )
        if self.ssl_key_password is not None and not self.ssl_keyfile:
            out.append(f"{n('ssl_key_password')} is set without {n('ssl_keyfile')}")
        for f in tls_files:
            path = getattr(self, f)
            if path and not Path(path).is_file():
                out.append(f"{n(f)}: no readable file at {path}")
        return out

    # --- reading -------------------------------------------------------------------------------

    @property
    def uses_tls(self) -> bool:
        return self.protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def uses_sasl(self) -> bool:
        return self.protocol in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)

    @property
    def mutual_tls(self) -> bool:
        return self.uses_tls and bool(self.ssl_certfile)

    def describe(self) -> str:
        """How we authenticate, for messages: "SASL_SSL, SCRAM-SHA-512 as user 'alice'"."""
        parts = [str(self.protocol)]
        if self.uses_sasl:
            if self.sasl_mechanism is SaslMechanism.OAUTHBEARER:
                parts.append(f"OAUTHBEARER via {self.oauth_token_provider}")
            else:
                parts.append(f"{self.sasl_mechanism} as user {self.sasl_username!r}")
        if self.mutual_tls:
            parts.append(f"client certificate {self.ssl_certfile}")
        return ", ".join(parts)

    def _password(self) -> str:
        return self.sasl_password.get_secret_value() if self.sasl_password else ""

    def secrets(self) -> list[str]:
        values = [s.get_secret_value() for s in (self.sasl_password, self.ssl_key_password) if s]
        return [v for v in values if v]

    def redact(self, text: str) -> str:
        """``text`` with every secret value of these settings replaced by ``***``."""
        for secret in sorted(self.secrets(), key=len, reverse=True):
            text = text.replace(secret, "***")
        return text

    def token_provider(self) -> CachedToken | None:
        """The process-wide OAUTHBEARER token cache for these settings (None without OAUTHBEARER)."""
        if not (self.uses_sasl and self.sasl_mechanism is SaslMechanism.OAUTHBEARER):
            return None
        return _token_provider(
            self.oauth_token_provider or "", self.oauth_aws_region, self.oauth_aws_role_arn
        )

    # --- translations --------------------------------------------------------------------------

    def spark_options(self) -> dict[str, str]:
        """The ``kafka.*`` options that :meth:`from_spark_options` reads back as these settings (for a
        Spark source started from another, e.g. the audit's metadata stream). Secrets go under keys
        holding "password", which Spark's default ``spark.redaction.regex`` hides in plans and UI."""
        out = {SPARK_NAMES["protocol"]: str(self.protocol)}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name == "protocol" or value is None:
                continue
            if f.name == "ssl_check_hostname":
                if self.uses_tls:
                    out[SPARK_NAMES[f.name]] = "https" if value else ""
                continue
            if f.name == "sasl_mechanism" and not self.uses_sasl:
                continue
            out[SPARK_NAMES[f.name]] = (
                value.get_secret_value() if isinstance(value, SecretStr) else str(value)
            )
        return out

    def librdkafka_config(self) -> dict[str, Any]:
        """confluent-kafka / librdkafka properties."""
        cfg: dict[str, Any] = {"security.protocol": str(self.protocol)}
        if self.uses_tls:
            # "probe": librdkafka looks for the system CA bundle (the wheels' OpenSSL has no default).
            cfg["ssl.ca.location"] = self.ssl_cafile or "probe"
            cfg["ssl.endpoint.identification.algorithm"] = "https" if self.ssl_check_hostname else "none"
            if self.ssl_certfile and self.ssl_keyfile:
                cfg["ssl.certificate.location"] = self.ssl_certfile
                cfg["ssl.key.location"] = self.ssl_keyfile
                if self.ssl_key_password is not None:
                    cfg["ssl.key.password"] = self.ssl_key_password.get_secret_value()
        if self.uses_sasl:
            cfg["sasl.mechanism"] = str(self.sasl_mechanism)
            provider = self.token_provider()
            if provider is not None:
                cfg["oauth_cb"] = provider.oauth_cb
            else:
                cfg["sasl.username"] = self.sasl_username
                cfg["sasl.password"] = self._password()
        return cfg

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context for aiokafka and Faust (None without TLS)."""
        if not self.uses_tls:
            return None
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ssl_cafile)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"the CA bundle {self.ssl_cafile} cannot be loaded: {exc}") from None
        ctx.check_hostname = self.ssl_check_hostname
        if not self.ssl_check_hostname:
            log.warning("TLS hostname verification is off: any certificate the CA signed is accepted")
        if self.ssl_certfile and self.ssl_keyfile:
            password = self.ssl_key_password.get_secret_value() if self.ssl_key_password else None
            try:
                ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password=password)
            except (OSError, ssl.SSLError) as exc:
                raise ConfigError(
                    f"the client certificate {self.ssl_certfile} or its key {self.ssl_keyfile} cannot be "
                    f"loaded (wrong key password?): {self.redact(str(exc))}"
                ) from None
        return ctx

    def aiokafka_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of aiokafka's clients (AIOKafkaClient, consumer, producer)."""
        kwargs: dict[str, Any] = {"security_protocol": str(self.protocol)}
        context = self.ssl_context()
        if context is not None:
            kwargs["ssl_context"] = context
        if self.uses_sasl:
            kwargs["sasl_mechanism"] = str(self.sasl_mechanism)
            provider = self.token_provider()
            if provider is not None:
                kwargs["sasl_oauth_token_provider"] = provider
            else:
                kwargs["sasl_plain_username"] = self.sasl_username
                kwargs["sasl_plain_password"] = (
                    self.sasl_password.get_secret_value() if self.sasl_password else ""
                )
        return kwargs

    def faust_credentials(self) -> Any:
        """Faust's ``broker_credentials`` (None for PLAINTEXT)."""
        # Deferred: Faust is heavy and only the worker's consumer group needs it (the Spark
        # executors and the CLI import this module too).
        from faust.auth import OAuthCredentials, SASLCredentials, SSLCredentials

        context = self.ssl_context()
        if not self.uses_sasl:
            return SSLCredentials(context) if context is not None else None
        provider = self.token_provider()
        if provider is not None:
            return OAuthCredentials(oauth_cb=provider, ssl_context=context)
        return SASLCredentials(
            username=self.sasl_username,
            password=self._password(),
            ssl_context=context,
            mechanism=str(self.sasl_mechanism),
        )


@dataclass(frozen=True)
class KafkaConnection:
    """Where the Kafka cluster is and how to authenticate to it: what every client is built from."""

    bootstrap_servers: str
    security: KafkaSecurity = KafkaSecurity()

    def describe(self) -> str:
        """ "127.0.0.1:9093 (SASL_SSL, SCRAM-SHA-512 as user 'alice')": never a secret."""
        return f"{self.bootstrap_servers} ({self.security.describe()})"


@functools.cache
def _token_provider(path: str, region: str | None, role_arn: str | None) -> CachedToken:
    if path == MSK_IAM:
        return CachedToken(msk_iam_source(region or "", role_arn), f"{MSK_IAM} ({region})")
    return CachedToken(load_hook(path, ENV_NAMES["oauth_token_provider"]), path)


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _coerce(name: str, raw: Any) -> Any:
    if name == "protocol":
        return _enum(SecurityProtocol, raw)
    if name == "sasl_mechanism":
        return _enum(SaslMechanism, raw)
    if name in ("sasl_password", "ssl_key_password"):
        return raw if isinstance(raw, SecretStr) else SecretStr(str(raw))
    if name == "sasl_username":
        return str(raw)  # credentials are taken exactly as given
    if name == "ssl_check_hostname":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in _TRUE | _FALSE:
            return text in _TRUE
        raise ValueError(f"{raw!r} is not true or false")
    return str(raw).strip()


def _enum(kind: type[StrEnum], raw: Any) -> Any:
    text = str(raw).strip().upper()
    try:
        return kind(text)
    except ValueError:
        raise ValueError(f"{raw!r} is not one of {', '.join(m.value for m in kind)}") from None


def _keystores_as_pem(opts: Mapping[str, str], values: dict[str, Any]) -> None:
    """Java trust/key stores of type PEM map onto the PEM options; JKS/PKCS12 are refused."""
    for store, kind in (("truststore", "kafka.ssl.truststore.type"), ("keystore", "kafka.ssl.keystore.type")):
        location = opts.get(f"kafka.ssl.{store}.location")
        password = opts.get(f"kafka.ssl.{store}.password")
        store_type = opts.get(kind, "JKS").strip().upper()
        if location is None and password is None:
            continue
        if store_type != "PEM" or (store == "truststore" and password is not None):
            given = f"kafka.ssl.{store}.location" if location is not None else f"kafka.ssl.{store}.password"
            raise ConfigError(
                f"{given}: a {store_type} {store} is a Java format the Python Kafka clients cannot read; "
                f"use {_JAVA_KEYSTORES[given]}"
            )
        if store == "truststore":
            values.setdefault("ssl_cafile", location)
        else:  # a PEM keystore holds the key and the certificate chain in one file
            values.setdefault("ssl_certfile", location)
            values.setdefault("ssl_keyfile", location)
            if password is not None:
                values.setdefault("ssl_key_password", password)


_JAAS_MODULE = re.compile(r"^\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'([\w.]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|(\S+))')
_JAAS_FAMILY = {
    "PlainLoginModule": {"PLAIN"},
    "ScramLoginModule": {"SCRAM-SHA-256", "SCRAM-SHA-512"},
    "OAuthBearerLoginModule": {"OAUTHBEARER"},
}


def _apply_jaas(text: str, values: dict[str, Any]) -> None:
    """``username``/``password`` from a JAAS line; its login module must fit the mechanism."""
    match = _JAAS_MODULE.match(text)
    if match is None:
        raise ConfigError(
            f'{_JAAS}: not a JAAS line (\'<LoginModule> required username="..." password="...";\')'
        )
    module = match.group(1).rsplit(".", 1)[-1]
    allowed = _JAAS_FAMILY.get(module)
    if allowed is None:
        raise ConfigError(
            f"{_JAAS}: login module {module} is not supported (PlainLoginModule, ScramLoginModule, "
            "OAuthBearerLoginModule)"
        )
    mechanism = str(values.get("sasl_mechanism", "")).strip().upper()
    if mechanism and mechanism not in allowed:
        raise ConfigError(f"{_JAAS}: {module} does not fit kafka.sasl.mechanism={mechanism}")
    for key, quoted, bare in _JAAS_OPTION.findall(match.group(3)):
        value = re.sub(r"\\(.)", r"\1", quoted) if quoted or not bare else bare
        if key == "username":
            values.setdefault("sasl_username", value)
        elif key == "password":
            values.setdefault("sasl_password", value)
