"""``processor config --check --connect`` asks the broker what the worker's principal may do, on the
secured stack (SCRAM, Apache Kafka's StandardAuthorizer, nothing allowed unless granted): with the
ACLs docs/security.md lists for a worker but Write on the metadata topic, it names that permission,
the topic and the user, and exits 3 (the worker would stop within seconds of its start); missing
Read on the consumer group and everything on the Faust assignor topic, it names each; with every
one, it exits 0."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from tests.integration.test_least_privilege import _documented
from tests.support.cli import CliResult, run_cli
from tests.support.kafka_acls import Grant, user_with_exactly

pytestmark = pytest.mark.integration

USER, PASSWORD = "check-acls", "check-acls-pw"
TOPIC, META, APP = "check-orders", "__remote_log_metadata_check", "check-app"


def check(secured_stack: StackInfo, tmp: Path, grants: list[Grant]) -> CliResult:
    user_with_exactly(secured_stack, USER, PASSWORD, grants)
    env = {
        **secured_stack.env(),
        "PROCESSOR_SASL_USERNAME": USER,
        "PROCESSOR_SASL_PASSWORD": PASSWORD,
        "PROCESSOR_TOPICS": TOPIC,
        "PROCESSOR_METADATA_TOPIC": META,
        "PROCESSOR_DELETION_TOPIC": f"{META}-deletions",
        "PROCESSOR_APP_ID": APP,
        "PROCESSOR_WEB_HOST": "127.0.0.1",
        "PROCESSOR_DATA_DIR": str(tmp),
    }
    return run_cli(env, "config", "--check", "--connect")


def test_the_check_names_each_permission_the_workers_principal_lacks(
    secured_stack: StackInfo, tmp_path: Path
) -> None:
    admin = new_admin(secured_stack.kafka, "check-acls")  # the dev user, allowed everything
    ensure_topic(admin, TOPIC, 1, 1, {})
    ensure_topic(admin, META, 1, 1, {})  # exists: its authorized operations are asked
    documented = _documented(TOPIC, META, APP)
    without_write = [
        (kind, name, pattern, [op for op in ops if not (name == META and op == "WRITE")])
        for kind, name, pattern, ops in documented
    ]

    refused = check(secured_stack, tmp_path, without_write)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    errors = [line for line in refused.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, refused.stderr
    assert f"lacks Write on topic {META} (PROCESSOR_METADATA_TOPIC" in errors[0]
    assert f"user '{USER}'" in errors[0] and "docs/security.md" in errors[0]

    no_group_no_assignor = [g for g in documented if g[0] != "GROUP" and "__assignor" not in g[1]]
    refused = check(secured_stack, tmp_path, no_group_no_assignor)
    assert refused.returncode == 3, refused.stdout + refused.stderr
    assert f"lacks Create, Describe, Read, Write on topic {APP}-__assignor-__leader" in refused.stderr
    assert f"lacks Read on group {APP} (PROCESSOR_APP_ID" in refused.stderr
    assert len([line for line in refused.stderr.splitlines() if line.startswith("error:")]) == 2

    granted = check(secured_stack, tmp_path, documented)
    assert granted.returncode == 0, granted.stdout + granted.stderr
    assert "kafka ACLs: ok" in granted.stdout
