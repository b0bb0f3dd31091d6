"""The permissions ``processor config --check --connect`` asks the broker about for a worker are the
ones docs/security.md lists for a worker's principal: the table and the check cannot drift apart."""

from __future__ import annotations

import re
from pathlib import Path

from processor.commands.config_cmd import worker_permissions
from processor.config import load_settings
from processor.kafka.permission_check import operation_name

DOC = Path(__file__).parents[2] / "docs" / "security.md"


def documented_rows() -> dict[tuple[str, str], set[str]]:
    """(resource, name) -> operations, from the worker's table ("Kafka ACLs each role needs")."""
    text = DOC.read_text().split("## Kafka ACLs each role needs", 1)[1]
    table = [
        line for line in text.split("\n\n")[2].splitlines() if line.startswith("| ") and "---" not in line
    ]
    rows: dict[tuple[str, str], set[str]] = {}
    for line in table[1:]:
        resource, names, operations, _ = (cell.strip() for cell in line.strip("|").split("|"))
        if "optional" in operations:
            continue
        ops = {op.strip() for op in operations.split(",")}
        for name in re.findall(r"`([^`]+)`", names):
            rows[(resource, name)] = ops
    return rows


def test_the_checked_permissions_are_the_documented_ones(monkeypatch) -> None:
    for name in (
        "PROCESSOR_TOPICS",
        "PROCESSOR_METADATA_TOPIC",
        "PROCESSOR_DELETION_TOPIC",
        "PROCESSOR_APP_ID",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PROCESSOR_TOPICS", "orders")
    settings = load_settings()
    names = {
        "PROCESSOR_TOPICS": "orders",
        "PROCESSOR_METADATA_TOPIC": settings.metadata_topic,
        "PROCESSOR_DELETION_TOPIC": settings.deletion_topic,
        "{PROCESSOR_APP_ID}-__assignor-__leader": f"{settings.app_id}-__assignor-__leader",
        "PROCESSOR_APP_ID": settings.app_id,
    }
    documented = {(resource, names[name]): ops for (resource, name), ops in documented_rows().items()}
    checked = {
        (need.resource, need.name): {operation_name(op) for op in need.operations}
        for need in worker_permissions(settings)
    }
    assert checked == documented
