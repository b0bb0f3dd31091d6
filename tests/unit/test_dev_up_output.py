"""What ``processor dev up`` prints: one line per service, its name, its address and what runs it,
the addresses in one column, never run into the name before them ("Kafka (Apache Kafka):127...")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from processor.devstack import stack
from tests.support.cli import run_cli


@pytest.mark.parametrize(("broker", "name"), [(stack.KAFKA, "Apache Kafka"), ("tansu", "Tansu")])
def test_dev_up_names_the_broker_beside_its_address(
    broker: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def start(stack_dir: Path, **kwargs: object) -> stack.StackInfo:
        return stack.StackInfo(
            str(stack_dir), "127.0.0.1:19092", "http://127.0.0.1:18333", "tiered", broker=broker
        )

    monkeypatch.setattr(stack, "start", start)
    result = run_cli({}, "dev", "up", "--dir", str(tmp_path), "--broker", broker)
    assert result.returncode == 0, result.stderr
    services = [
        line for line in result.stdout.splitlines() if line.startswith("  ") and not line.startswith("   ")
    ]
    kafka, s3 = services[0], services[1]
    assert kafka == f"  Kafka:             127.0.0.1:19092  ({name})"
    assert s3.startswith("  S3 (SeaweedFS):    http://127.0.0.1:18333")
    for line in (kafka, s3):  # every label ends with a colon and a space before its address
        assert re.match(r"  [^:]+: +\S", line), line
    assert kafka.index("127.0.0.1") == s3.index("http://")
