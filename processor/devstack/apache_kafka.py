"""Apache Kafka for the local stack: one KRaft node (combined controller and broker) in one JVM.

The jars come from ``maven/kafka.pom.xml`` (:mod:`processor.devstack.jars`). A start writes
``kafka/server.properties`` and a log4j2 file into the stack's folder, formats a fresh log folder
(``kafka/data``: the stack starts empty each time, as the Tansu one does) and runs
``java kafka.Kafka``; its output goes to ``kafka.log``.

Settings that differ from Kafka's defaults, for a one-node stack on a small machine:

- one replica for the internal topics, and 5 partitions each for consumer offsets and transaction
  state (50 by default: created on first use, they slowed the first group join by seconds);
- ``group.initial.rebalance.delay.ms=0``: a group's first member is answered at once;
- ``log.retention.ms=-1``: records are kept until a topic's own retention says otherwise (Kafka's
  default of 7 days would delete the sample records, stamped in 2023, at once);
- ``log.retention.check.interval.ms=1000`` and ``log.cleaner.backoff.ms=1000``: a topic's own
  ``retention.ms`` / ``retention.bytes`` and compaction act within a second or two (the defaults are
  5 minutes and 15 s), so the moment this project exists for, the broker deleting what was
  archived, happens in a test's time;
- a bounded heap (``-Xmx``) and two network and I/O threads.

Secured (``processor dev up --secure``): the broker's own listeners, a throwaway CA
(:mod:`processor.devstack.certs`) and Kafka's ``StandardAuthorizer`` with ACLs on:

- ``SASL_SSL``: SCRAM-SHA-512, SCRAM-SHA-256, PLAIN and OAUTHBEARER (Kafka's unsecured-JWS
  validator: a token is an unsigned JWT whose ``sub`` is the principal);
- ``MTLS`` (protocol SSL): a client certificate signed by the CA is required; the principal is its
  common name (``ssl.principal.mapping.rules``);
- ``INTERNAL`` and ``CONTROLLER``, mutual TLS too, with the broker's own certificate.

Principals: ``admin`` (PLAIN, a super user, used only to set the stack up), ``broker`` (its own
certificate, a super user), and the dev user (``processor``: SCRAM, PLAIN, the OAUTHBEARER token and
the client certificate's name), allowed everything by ACLs (``DEV_USER_ACLS``). Nobody else is allowed
anything (``allow.everyone.if.no.acl.found=false``).
"""

from __future__ import annotations

import base64
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from processor.devstack import jars
from processor.devstack.secure import SecureKafka
from processor.errors import ServiceUnavailableError

NODE_ID = 1
KAFKA_DIR = "kafka"
LOG_FILE = "kafka.log"
HEAP = os.environ.get("PROCESSOR_DEV_KAFKA_HEAP", "768m")
SUPER_ADMIN = "admin"
BROKER_PRINCIPAL = "broker"
FORMAT_TIMEOUT_S = 120.0

_LOG4J2 = """\
status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = info
rootLogger.appenderRef.out.ref = out
# the per-request and state-change chatter of a broker at INFO is of no use here
logger.state.name = state.change.logger
logger.state.level = warn
logger.request.name = kafka.request.logger
logger.request.level = warn
"""


@dataclass(frozen=True)
class KafkaPorts:
    broker: int  # PLAINTEXT, or SASL_SSL when secured: the stack's bootstrap address
    controller: int
    mtls: int = 0  # secured only
    internal: int = 0  # secured only


def jaas_quote(value: str) -> str:
    """A JAAS option value in double quotes (Kafka parses them with a StreamTokenizer: \\ escapes)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def properties_text(values: dict[str, str]) -> str:
    """A Java properties file: a backslash in a value is an escape there, so it is doubled."""
    escaped = {k: v.replace("\\", "\\\\").replace("\n", "\\n") for k, v in values.items()}
    return "".join(f"{k}={v}\n" for k, v in escaped.items())


def server_properties(data_dir: Path, ports: KafkaPorts, secured: SecureKafka | None) -> str:
    common = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{ports.controller}",
        "controller.listener.names": "CONTROLLER",
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "5",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.ms": "-1",
        "log.retention.check.interval.ms": "1000",
        "log.cleaner.backoff.ms": "1000",
        "num.network.threads": "2",
        "num.io.threads": "2",
        "num.recovery.threads.per.data.dir": "1",
    }
    if secured is None:
        common.update(
            {
                "listeners": f"PLAINTEXT://127.0.0.1:{ports.broker},CONTROLLER://127.0.0.1:{ports.controller}",
                "advertised.listeners": f"PLAINTEXT://127.0.0.1:{ports.broker}",
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name": "PLAINTEXT",
            }
        )
        return properties_text(common)
    pki = secured.pki
    keystore = str(Path(pki.broker_cert).with_name("broker-keystore.pem"))
    plain_users = {SUPER_ADMIN: secured.admin_password, secured.username: secured.password}
    plain_jaas = " ".join(f"user_{name}={jaas_quote(pw)}" for name, pw in plain_users.items())
    common.update(
        {
            "listeners": ",".join(
                [
                    f"SASL_SSL://127.0.0.1:{ports.broker}",
                    f"MTLS://127.0.0.1:{ports.mtls}",
                    f"INTERNAL://127.0.0.1:{ports.internal}",
                    f"CONTROLLER://127.0.0.1:{ports.controller}",
                ]
            ),
            "advertised.listeners": ",".join(
                [
                    f"SASL_SSL://127.0.0.1:{ports.broker}",
                    f"MTLS://127.0.0.1:{ports.mtls}",
                    f"INTERNAL://127.0.0.1:{ports.internal}",
                ]
            ),
            "listener.security.protocol.map": "SASL_SSL:SASL_SSL,MTLS:SSL,INTERNAL:SSL,CONTROLLER:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.type": "PEM",
            "ssl.keystore.location": keystore,
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": pki.ca_file,
            "ssl.client.auth": "required",
            # the principal of a certificate is its common name (CN=processor,O=... -> processor)
            "ssl.principal.mapping.rules": "RULE:^CN=([^,]+).*$/$1/,DEFAULT",
            "listener.name.sasl_ssl.ssl.client.auth": "none",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER",
            "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": (
                f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_jaas};"
            ),
            "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            ),
            "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required;"
            ),
            "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class": (
                "org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                "OAuthBearerUnsecuredValidatorCallbackHandler"
            ),
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:{SUPER_ADMIN};User:{BROKER_PRINCIPAL}",
            "allow.everyone.if.no.acl.found": "false",
        }
    )
    return properties_text(common)


def write_keystore(secured: SecureKafka) -> None:
    """Kafka's PEM keystore: the broker's private key (PKCS#8) followed by its certificate."""
    pki = secured.pki
    path = Path(pki.broker_cert).with_name("broker-keystore.pem")
    path.touch(mode=0o600)
    path.write_text(Path(pki.broker_key).read_text() + Path(pki.broker_cert).read_text())


def cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (it may start with "-":
    passed as ``--cluster-id=ID``, never as an argument of its own)."""
    return base64.urlsafe_b64encode(secrets.token_bytes(16)).rstrip(b"=").decode()


@dataclass(frozen=True)
class PreparedKafka:
    command: list[str]
    properties: Path


def prepare(root: Path, ports: KafkaPorts, secured: SecureKafka | None) -> PreparedKafka:
    """Write the broker's configuration, format a fresh log folder, and return the command to run."""
    jars.resolve("kafka")
    home = root / KAFKA_DIR
    data = home / "data"
    shutil.rmtree(data, ignore_errors=True)
    home.mkdir(parents=True, exist_ok=True)
    if secured is not None:
        write_keystore(secured)
    properties = home / "server.properties"
    properties.touch(mode=0o600)  # it holds the dev passwords when secured
    properties.write_text(server_properties(data, ports, secured))
    (home / "log4j2.properties").write_text(_LOG4J2)
    formatted = subprocess.run(
        [
            *_jvm(home),
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id()}",
            "-c",
            str(properties),
        ],
        capture_output=True,
        text=True,
        timeout=FORMAT_TIMEOUT_S,
        check=False,
    )
    if formatted.returncode != 0:
        raise ServiceUnavailableError(
            f"formatting Kafka's log folder failed (exit {formatted.returncode}): "
            f"{(formatted.stdout + formatted.stderr).strip()[-2000:]}"
        )
    return PreparedKafka(command(root), properties)


def _jvm(home: Path) -> list[str]:
    java = shutil.which("java") or "java"
    log4j = home / "log4j2.properties"
    return [
        java,
        f"-Dlog4j2.configurationFile={log4j}",
        "-Djava.awt.headless=true",
        "-cp",
        jars.classpath("kafka"),
    ]


def command(root: Path) -> list[str]:
    """The command that runs the broker prepared in ``root`` (again, after a stop or a kill: its log
    folder and configuration are kept)."""
    home = root / KAFKA_DIR
    java, *rest = _jvm(home)
    return [java, "-Xms128m", f"-Xmx{HEAP}", *rest, "kafka.Kafka", str(home / "server.properties")]


def dev_user_acls(principal: str) -> list[Any]:
    """The secured stack's grants to its dev user: everything on every topic, group and
    transactional id, and on the cluster (the stack is a developer's; docs/security.md lists what
    each role needs in production)."""
    # deferred, as below: `processor dev status` and `env` load no Kafka client
    from processor.kafka.access_admin import allow_everything

    return allow_everything(principal)


def provision(secured: SecureKafka, timeout_s: float = 30.0) -> None:
    """Set a freshly started secured broker up, as its super user: the dev user's SCRAM credentials
    (SHA-512 and SHA-256) and its ACLs."""
    from processor.kafka.access_admin import create_acls, upsert_scram_credentials
    from processor.kafka.clients import new_admin

    admin = new_admin(secured.admin_kafka(), "devstack-setup", log_level=0)
    upsert_scram_credentials(admin, secured.username, secured.password.encode(), timeout_s)
    create_acls(admin, dev_user_acls(secured.username), timeout_s)
