"""A SCRAM user of the secured local stack with exactly the ACLs a test grants it.

Its credentials are SCRAM-SHA-512 and SCRAM-SHA-256 ones: the stack's PLAIN logins are the broker's
own fixed list (the dev user and the admin), so such a user connecting with PLAIN is refused. A
refused login reaches a confluent-kafka consumer only through its error callback and log (never as a
polled message): a consumer that only looks at what it polls sees no record and no error."""

from __future__ import annotations

from typing import Any

from processor.devstack.stack import StackInfo
from processor.kafka.clients import new_admin

Grant = tuple[str, str, str, list[str]]  # resource type, name, pattern type, operations


def user_with_exactly(secured_stack: StackInfo, user: str, password: str, grants: list[Grant]) -> None:
    """``user`` (SCRAM-SHA-512, ``password``) with exactly ``grants``: its earlier ACLs removed."""
    from confluent_kafka.admin import (  # type: ignore[attr-defined]
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    secured = secured_stack.secured
    assert secured is not None
    admin = new_admin(secured.admin_kafka(), "tests-acls")
    for mechanism in (ScramMechanism.SCRAM_SHA_512, ScramMechanism.SCRAM_SHA_256):  # one a request
        upsert = UserScramCredentialUpsertion(user, ScramCredentialInfo(mechanism, 8192), password.encode())
        for future in admin.alter_user_scram_credentials([upsert]).values():
            future.result(timeout=30)
    anything: Any = None  # a filter's wildcard (the stubs want a name)
    every = AclBindingFilter(
        ResourceType.ANY, anything, ResourcePatternType.ANY, f"User:{user}", anything, AclOperation.ANY,
        AclPermissionType.ANY,
    )  # fmt: skip
    for future in admin.delete_acls([every]).values():
        future.result(timeout=30)
    bindings = [
        AclBinding(
            getattr(ResourceType, kind),
            name,
            getattr(ResourcePatternType, pattern),
            f"User:{user}",
            "*",
            getattr(AclOperation, op),
            AclPermissionType.ALLOW,
        )
        for kind, name, pattern, ops in grants
        for op in ops
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=30)
