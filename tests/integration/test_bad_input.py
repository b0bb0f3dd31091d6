"""Bad input gets a clear error and no traceback: config, unreachable broker or S3, bad names."""

from __future__ import annotations

import tempfile

import pytest

from processor.devstack import servers
from processor.devstack.stack import StackInfo
from tests.support.cli import CliResult, run_cli


def run_worker(env_overrides: dict[str, str]) -> CliResult:
    """``processor worker`` in this process (tests/support/cli.py): each case fails in the start-up
    checks, before the worker starts anything."""
    env = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1"}
    env["PROCESSOR_WEB_HOST"] = "127.0.0.1"  # the read API may stay open on loopback: no token needed
    with tempfile.TemporaryDirectory(prefix="bad-input-") as data_dir:  # not ./data of the checkout
        return run_cli({**env, "PROCESSOR_DATA_DIR": data_dir, **env_overrides}, "worker")


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"PROCESSOR_TOPICS": "orders", "PROCESSOR_SEGMENT_BYTES": "ten"}, "PROCESSOR_SEGMENT_BYTES"),
        ({"PROCESSOR_TOPICS": "../../etc/passwd"}, "PROCESSOR_TOPICS"),
        ({"PROCESSOR_TOPICS": "orders", "PROCESSOR_S3_PREFIX": "../escape"}, "PROCESSOR_S3_PREFIX"),
        ({}, "PROCESSOR_TOPICS"),
    ],
)
def test_invalid_configuration_names_the_variable(env: dict[str, str], variable: str) -> None:
    result = run_worker(env)
    assert result.returncode == 2
    assert variable in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.usefixtures("unreachable_fails_fast")
def test_unreachable_broker_is_a_clear_error() -> None:
    port = servers.free_port()  # nothing listens there
    result = run_worker({"PROCESSOR_TOPICS": "orders", "PROCESSOR_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"})
    assert result.returncode == 3
    assert f"127.0.0.1:{port}" in result.stderr and "unreachable" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.integration
def test_unreachable_s3_is_a_clear_error(local_stack: StackInfo) -> None:
    port = servers.free_port()
    result = run_worker(
        {
            "PROCESSOR_TOPICS": "orders",
            "PROCESSOR_BOOTSTRAP_SERVERS": local_stack.bootstrap_servers,
            "PROCESSOR_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        }
    )
    assert result.returncode == 3
    assert f"127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


@pytest.mark.integration
def test_missing_bucket_is_a_clear_error(local_stack: StackInfo) -> None:
    result = run_worker(
        {
            "PROCESSOR_TOPICS": "orders",
            "PROCESSOR_BOOTSTRAP_SERVERS": local_stack.bootstrap_servers,
            "PROCESSOR_S3_ENDPOINT_URL": local_stack.s3_endpoint_url,
            "PROCESSOR_S3_BUCKET": "no-such-bucket",
        }
    )
    assert result.returncode == 3
    assert "no-such-bucket" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
