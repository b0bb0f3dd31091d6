"""What ``processor`` commands and a worker say to a user on the real stack, run as a user runs them
(the CLI in-process, tests/support/cli.py; the worker as a child process):

- a misspelt bucket fails ``processor segments`` too, and missing AWS credentials are named as such,
  each in one line with what to set, exit 3;
- botocore's "Found credentials" line does not interrupt a command's output;
- the worker's default text log says which segment was copied (topic, partition, offsets, size), and
  no "Missing sensor state" warning;
- a second worker on the same PROCESSOR_DATA_DIR is refused naming that setting (exit 2);
- a wrong read-API token is told apart from none;
- ``processor fetch`` shows the values, not their length;
- Ctrl-C (SIGINT) stops the worker with exit 130.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin, new_producer
from processor.wiring.data_dir import DataDirLock
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration

TOPIC = "cli-messages"
META = "__remote_log_metadata_cli_messages"
TOKEN = "cli-messages-token"
VALUES = [f'{{"order": {i}, "item": "w\u00e9dget"}}\n' for i in range(20)]


@pytest.fixture(scope="module")
def cli_env(local_stack: StackInfo) -> dict[str, str]:
    """What a user's shell holds to run the CLI against the stack."""
    return {**local_stack.env(), "PROCESSOR_METADATA_TOPIC": META}


@pytest.fixture(scope="module")
def worker(
    local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[WorkerProcess, dict[str, str], str]]:
    """A worker with a read-API token, after it copied the topic's records (default text logs)."""
    tmp = tmp_path_factory.mktemp("cli-messages")
    ensure_topic(new_admin(local_stack.bootstrap_servers, "t"), TOPIC, 1, 1, {})
    producer = new_producer(local_stack.bootstrap_servers, "t")
    for i, value in enumerate(VALUES):
        producer.produce(TOPIC, value=value.encode(), key=f"k{i}".encode(), partition=0)
    producer.flush(30)
    port = free_port()
    env = worker_env(
        local_stack,
        tmp / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_SEGMENT_MS="500ms",
        PROCESSOR_WEB_PORT=str(port),
        PROCESSOR_WEB_TOKEN=TOKEN,
    )
    process = WorkerProcess(env, tmp / "worker.log")
    try:
        deadline = time.monotonic() + 90
        while "segment copied" not in process.log():
            assert process.proc.poll() is None, process.log()[-3000:]
            assert time.monotonic() < deadline, process.log()[-3000:]
            time.sleep(0.3)
        yield process, env, f"http://127.0.0.1:{port}"
    finally:
        process.stop()


def test_a_misspelt_bucket_fails_segments(cli_env: dict[str, str]) -> None:
    result = run_cli({**cli_env, "PROCESSOR_S3_BUCKET": "tiered-storag"}, "segments", "--topic", TOPIC)
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stderr.strip().splitlines() == [
        f"error: S3 bucket 'tiered-storag' does not exist at {cli_env['PROCESSOR_S3_ENDPOINT_URL']} "
        "(PROCESSOR_S3_BUCKET; the bucket must exist)"
    ]


def test_missing_aws_credentials_are_named(cli_env: dict[str, str]) -> None:
    no_credentials = {
        "AWS_ACCESS_KEY_ID": "",
        "AWS_SECRET_ACCESS_KEY": "",
        "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent",
        "AWS_CONFIG_FILE": "/nonexistent",
        "AWS_EC2_METADATA_DISABLED": "true",  # no instance role here: not waited for
    }
    result = run_cli({**cli_env, **no_credentials}, "segments", "--topic", TOPIC)
    assert result.returncode == 3, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: no AWS credentials for S3"), result.stderr
    assert "AWS_ACCESS_KEY_ID" in lines[0] and "unreachable" not in lines[0]


def test_an_unknown_aws_profile_is_named(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "AWS_PROFILE": "no-such-profile", "AWS_CONFIG_FILE": "/nonexistent"}
    result = run_cli(env, "segments", "--topic", TOPIC)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: AWS_PROFILE: "), result.stderr
    assert "no-such-profile" in lines[0]


def test_no_botocore_credentials_line_in_command_output(cli_env: dict[str, str]) -> None:
    env = {**cli_env, "PROCESSOR_TOPICS": TOPIC, "PROCESSOR_WEB_HOST": "127.0.0.1"}
    result = run_cli(env, "config", "--check", "--connect")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "s3: ok" in result.stdout
    assert "botocore" not in result.stdout + result.stderr


def test_text_log_names_the_copied_segment_and_no_sensor_warning(worker) -> None:
    process, _env, _url = worker
    log = process.log()
    copied = [line for line in log.splitlines() if "segment copied" in line]
    assert copied, log[-3000:]
    for field in (f"topic={TOPIC}", "partition=0", "start_offset=0", "end_offset=", "size_bytes="):
        assert field in copied[0], copied[0]
    assert "Missing sensor state" not in log
    assert "botocore.credentials" not in log


def test_a_second_worker_on_the_same_data_dir_names_the_setting(worker) -> None:
    _process, env, _url = worker
    second = {k: v for k, v in env.items() if k.startswith(("PROCESSOR_", "AWS_"))}
    second["PROCESSOR_WEB_PORT"] = str(free_port())
    result = run_cli(second, "worker")
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "PROCESSOR_DATA_DIR" in lines[0], result.stderr
    assert env["PROCESSOR_DATA_DIR"] in lines[0] and "LOCK" not in lines[0]


def test_a_wrong_token_is_told_apart_from_none(worker, cli_env: dict[str, str]) -> None:
    _process, _env, url = worker
    asks = ("offload", "--topic", TOPIC, "--worker-url", url, "--timeout-s", "5")
    wrong = run_cli({**cli_env, "PROCESSOR_WEB_TOKEN": "not-" + TOKEN}, *asks)
    missing = run_cli(cli_env, *asks)
    assert wrong.returncode == missing.returncode == 2
    assert "the bearer token is wrong" in wrong.stderr and "PROCESSOR_WEB_TOKEN" in wrong.stderr
    assert "a bearer token is required" in missing.stderr and "PROCESSOR_WEB_TOKEN" in missing.stderr
    assert "not-" + TOKEN not in wrong.stderr


def test_fetch_shows_the_values(worker, cli_env: dict[str, str]) -> None:
    args = ("fetch", "--topic", TOPIC, "--partition", "0", "--offset", "0", "--max-records", "2")
    result = run_cli(cli_env, *args)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    value = '"{\\"order\\": 0, \\"item\\": \\"w\u00e9dget\\"}\\n"'
    assert lines[0].split("\t")[2:] == ['key="k0"', f"value={value}", "headers=0"]


def test_ctrl_c_stops_the_worker_with_exit_130(worker) -> None:
    """Last in the module: the worker it stops is the module's."""
    process, _env, _url = worker
    process.proc.send_signal(signal.SIGINT)
    assert process.proc.wait(60) == 130, process.log()[-3000:]


def test_data_dir_is_free_again_after_the_worker_stopped(worker) -> None:
    process, env, _url = worker
    assert process.proc.poll() is not None
    DataDirLock(Path(env["PROCESSOR_DATA_DIR"])).release()
