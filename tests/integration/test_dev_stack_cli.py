"""`processor dev up|status|down` starts, reports and stops exactly its own processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

import boto3
import pytest
from confluent_kafka.admin import AdminClient

from processor.devstack.stack import StackInfo
from tests.support.cli import CliResult, run_cli

pytestmark = pytest.mark.integration


def cli(*args: str) -> CliResult:
    return run_cli({}, *args)


@pytest.mark.parametrize("broker", ["kafka", "tansu"])
def test_dev_up_status_down(tmp_path: Path, broker: str, local_stack: StackInfo) -> None:
    if broker == "kafka" and local_stack.broker != "kafka":
        pytest.skip("Apache Kafka needs Java 17 and Maven")
    d = str(tmp_path / "stack")
    up = cli("dev", "up", "--dir", d, "--json", "--broker", broker)
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    try:
        assert info["running"] is True
        pids = {name: p["pid"] for name, p in info["processes"].items()}
        assert set(pids) == {broker, "weed"}
        assert all(Path(f"/proc/{pid}").exists() for pid in pids.values())
        AdminClient({"bootstrap.servers": info["bootstrap_servers"]}).list_topics(timeout=10)
        s3 = boto3.client(
            "s3",
            endpoint_url=info["s3_endpoint_url"],
            region_name="us-east-1",
            aws_access_key_id=info["env"]["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=info["env"]["AWS_SECRET_ACCESS_KEY"],
        )
        s3.head_bucket(Bucket=info["bucket"])
        status = cli("dev", "status", "--dir", d, "--json")
        assert status.returncode == 0 and json.loads(status.stdout)["running"] is True
        again = cli("dev", "up", "--dir", d)
        assert again.returncode != 0 and "already runs" in again.stderr
    finally:
        down = cli("dev", "down", "--dir", d)
    assert down.returncode == 0 and broker in down.stdout and "weed" in down.stdout
    for pid in pids.values():
        try:
            os.kill(pid, 0)
            alive = Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] != "Z"
        except ProcessLookupError:
            alive = False
        assert not alive, f"pid {pid} still runs"
    after = cli("dev", "status", "--dir", d)
    assert after.returncode == 1


def test_a_port_taken_before_its_server_binds_it_starts_the_stack_again_on_other_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process may take a port between its pick and the server's bind (several stacks
    starting at once): the server exits saying so, and the stack starts again on other ports."""
    import socket

    from processor.devstack import servers, stack

    taken = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    real = servers.free_port
    picks = iter([s.getsockname()[1] for s in taken])  # the first two picks: Kafka's, then S3's
    monkeypatch.setattr(stack, "free_port", lambda: next(picks, None) or real())
    d = tmp_path / "stack"
    try:
        info = stack.start(d, broker="tansu")
        try:
            taken_ports = {s.getsockname()[1] for s in taken}
            assert int(info.bootstrap_servers.rsplit(":", 1)[1]) not in taken_ports
            AdminClient({"bootstrap.servers": info.bootstrap_servers}).list_topics(timeout=10)
            logs = (d / "tansu.log").read_text(errors="replace")
            assert "Address in use" in logs  # the first attempt met the taken port
        finally:
            stack.stop(d)
    finally:
        for s in taken:
            s.close()
