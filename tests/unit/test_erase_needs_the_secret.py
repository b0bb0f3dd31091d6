"""``processor erase`` refuses to run without PROCESSOR_ERASURE_SECRET, as docs/retention-and-deletion.md
says, and so does its dry run: before it reaches Kafka or the bucket, naming the setting (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from processor.commands import erase as erase_cmd
from tests.support.cli import run_cli

ENV = {"PROCESSOR_TOPICS": "orders"}


@pytest.mark.parametrize("dry_run", [True, False])
def test_erase_and_its_dry_run_refuse_without_the_secret_before_any_connection(
    dry_run: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    def connect(*args: object) -> None:
        raise AssertionError("reached Kafka and the bucket without the erasure secret")

    monkeypatch.setattr(erase_cmd, "open_context", connect)
    result = run_cli(ENV, "erase", "--topic", "orders", "--key", "alice", *(["--dry-run"] if dry_run else []))
    assert result.returncode == 2, result.stderr
    assert "PROCESSOR_ERASURE_SECRET is not set" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_docs_say_what_the_dry_run_does() -> None:
    docs = (Path(__file__).parents[2] / "docs" / "retention-and-deletion.md").read_text()
    said = " ".join(docs.split())
    assert "`processor erase` refuses to run without the secret, and so does its `--dry-run`" in said
