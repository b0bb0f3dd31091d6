"""Who may do what on a cluster, as its administrator sets it: SCRAM credentials and ACLs (Kafka's
StandardAuthorizer). The local secured stack (processor/devstack/apache_kafka.py) sets its dev user up
with these; production clusters are set up by their operators (docs/security.md lists each role's
ACLs)."""

from __future__ import annotations

from typing import Any

from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

SCRAM_ITERATIONS = 8192


def allow_everything(principal: str) -> list[Any]:
    """ACLs granting ``principal`` (a user name) everything on every topic, group and transactional
    id, and on the cluster."""

    def allow_all(kind: Any, name: str) -> Any:
        return AclBinding(
            kind,
            name,
            ResourcePatternType.LITERAL,
            f"User:{principal}",
            "*",
            AclOperation.ALL,
            AclPermissionType.ALLOW,
        )

    return [
        allow_all(ResourceType.TOPIC, "*"),
        allow_all(ResourceType.GROUP, "*"),
        allow_all(ResourceType.TRANSACTIONAL_ID, "*"),
        allow_all(ResourceType.BROKER, "kafka-cluster"),
    ]


def upsert_scram_credentials(admin: AdminClient, username: str, password: bytes, timeout_s: float) -> None:
    """The user's SCRAM-SHA-512 and SCRAM-SHA-256 credentials, one request each (the controller
    refuses two changes of one user in one request); raises what the broker answers."""
    for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):
        upsert = UserScramCredentialUpsertion(
            username, ScramCredentialInfo(mechanism, SCRAM_ITERATIONS), password
        )
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=timeout_s)


def create_acls(admin: AdminClient, bindings: list[Any], timeout_s: float) -> None:
    """Create ``bindings``; raises what the broker answers for any of them."""
    for future in admin.create_acls(bindings).values():
        future.result(timeout=timeout_s)
