"""A SCRAM user of the secured local stack with exactly the ACLs a test grants it."""

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
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192)
    for future in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(user, info, password.encode())]
    ).values():
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
