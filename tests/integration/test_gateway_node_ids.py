"""``processor gateway`` in front of the local stack's broker with PROCESSOR_GATEWAY_NODE_IDS not
holding the broker's node id (as the default 0-63 does not hold Tansu's 111): it refuses to start,
exit code 2 and one line naming the setting and the range to set, instead of running and handing
clients the broker's own address; a port held by another process is one line naming its setting,
and a start that fails half way closes the ports it opened."""

from __future__ import annotations

import pytest

from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.clients import new_admin
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration


def test_the_gateway_refuses_to_start_when_a_broker_is_outside_its_node_ids(
    local_stack: StackInfo, tmp_path
) -> None:
    brokers = new_admin(local_stack.bootstrap_servers, "t").list_topics(timeout=15).brokers
    node = max(int(n) for n in brokers)
    outside = f"{node + 1}-{node + 1}"  # a range that holds no broker of the stack
    env = {
        **local_stack.env(),
        "PROCESSOR_METADATA_TOPIC": "__remote_log_metadata_gw_ids",
        "PROCESSOR_DATA_DIR": str(tmp_path / "data"),
        "PROCESSOR_S3_REGION": "us-east-1",
        "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
        "PROCESSOR_GATEWAY_PORT": str(free_port()),
        "PROCESSOR_GATEWAY_NODE_IDS": outside,
        "PROCESSOR_WEB_HOST": "127.0.0.1",
        "PROCESSOR_WEB_PORT": str(free_port()),
        "PROCESSOR_WEB_AUTH": "none",
    }
    result = run_cli(env, "gateway")
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "PROCESSOR_GATEWAY_NODE_IDS" in line]
    assert len(lines) == 1, result.stderr
    assert f"PROCESSOR_GATEWAY_NODE_IDS={outside} does not hold the node id of broker {node} (" in lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("setting", ["PROCESSOR_WEB_PORT", "PROCESSOR_GATEWAY_PORT"])
def test_a_port_held_by_another_process_is_one_line_naming_its_setting(
    local_stack: StackInfo, tmp_path, setting: str
) -> None:
    """A gateway started beside a worker on the same web port (both default to 6066) said "address
    already in use" in a 32-line traceback that never named PROCESSOR_WEB_PORT."""
    import socket

    held = socket.create_server(("127.0.0.1", 0))
    try:
        env = {
            **local_stack.env(),
            "PROCESSOR_METADATA_TOPIC": "__remote_log_metadata_gw_ports",
            "PROCESSOR_DATA_DIR": str(tmp_path / "data"),
            "PROCESSOR_S3_REGION": "us-east-1",
            "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
            "PROCESSOR_GATEWAY_PORT": str(free_port()),
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(free_port()),
            "PROCESSOR_WEB_AUTH": "none",
            setting: str(held.getsockname()[1]),
        }
        result = run_cli(env, "gateway")
    finally:
        held.close()
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if setting in line]
    assert len(lines) == 1 and "is in use by another process" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_start_that_fails_at_a_brokers_port_closes_the_ports_it_opened(
    local_stack: StackInfo, tmp_path
) -> None:
    """The gateway bound its own port, then failed on a broker's port after it (held by another
    process) and left its own port listening with nobody serving it: clients hung on their first
    request instead of being refused."""
    import asyncio
    import socket

    from processor.errors import ConfigError
    from processor.wiring.gateway_server import GatewayServer
    from tests.support.gateway_thread import loopback_gateway

    brokers = new_admin(local_stack.bootstrap_servers, "t").list_topics(timeout=15).brokers
    node = min(int(n) for n in brokers)
    gateway = loopback_gateway(
        {**local_stack.env(), "PROCESSOR_METADATA_TOPIC": "__remote_log_metadata_gw_half"},
        tmp_path,
        PROCESSOR_GATEWAY_NODE_IDS=f"{node}-{node + 3}",
        PROCESSOR_WEB_AUTH="none",
    )
    port = gateway.settings.gateway_port
    held = socket.create_server(("127.0.0.1", port + 1))  # the port of the stack's first broker
    server = GatewayServer.build(gateway.settings)
    try:
        server.follower.materializer.catch_up()
        with pytest.raises(ConfigError, match="PROCESSOR_GATEWAY_PORT"):
            asyncio.run(server.serve(asyncio.Event()))
        assert not server.listening.is_set()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=5).close()
    finally:
        held.close()
        server.close()
