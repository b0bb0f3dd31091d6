"""A ``processor gateway`` served in a thread of the test process (its own event loop), for tests that
consume through it with real Kafka clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from processor.config import Settings
from processor.wiring.gateway_server import GatewayServer

if TYPE_CHECKING:
    from processor.devstack.stack import StackInfo


def _serve(server: GatewayServer, ready: threading.Event, stop_box: list[Any]) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        stop_box.extend([asyncio.get_running_loop(), stop])
        task = asyncio.create_task(server.serve(stop))
        while not server.gateway.servers:
            await asyncio.sleep(0.01)
        ready.set()
        await task

    asyncio.run(main())


@contextmanager
def gateway_running(server: GatewayServer) -> Iterator[GatewayServer]:
    """Catch the server's follower up, serve until the block ends, then stop and close it."""
    server.follower.materializer.catch_up()
    server.follower.materializer.start()
    ready, box = threading.Event(), list[Any]()
    thread = threading.Thread(target=_serve, args=(server, ready, box), daemon=True)
    thread.start()
    try:
        assert ready.wait(60), "gateway did not start"
        yield server
    finally:
        if box:
            loop, stop = box
            loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        server.close()


@dataclass(frozen=True)
class LoopbackGateway:
    settings: Settings
    bootstrap: str  # where clients connect
    web: str  # its health and metrics


def loopback_gateway(stack_env: dict[str, str], data_dir: Path, **overrides: str) -> LoopbackGateway:
    """The settings of a gateway over the archive ``stack_env`` names (its Kafka, S3 and PROCESSOR_*
    choices), on free loopback ports, with a data directory of its own; ``overrides`` last."""
    from processor.config import load_settings
    from processor.devstack.stack import free_port  # the local stack's: only where one runs

    port, web = free_port(), free_port()
    settings = load_settings(
        {
            **stack_env,
            "PROCESSOR_S3_REGION": "us-east-1",
            "PROCESSOR_DATA_DIR": str(data_dir),
            "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
            "PROCESSOR_GATEWAY_PORT": str(port),
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(web),
            **overrides,
        }
    )
    return LoopbackGateway(settings, f"127.0.0.1:{port}", f"http://127.0.0.1:{web}")


def tls_gateway_env(stack: StackInfo, data_dir: Path) -> tuple[dict[str, str], int, int]:
    """A ``processor gateway`` process's own settings on the secured local stack: free loopback
    ports, its data directory, the stack's node ids, archived reads, TLS towards clients with the
    broker's certificate (valid for 127.0.0.1); (settings, gateway port, web port). The caller adds
    the principal and the cluster's settings."""
    from processor.devstack.stack import free_port  # the local stack's: only where one runs

    secured = stack.secured
    assert secured is not None, "the secured stack"
    port, web = free_port(), free_port()
    env = {
        "PROCESSOR_DATA_DIR": str(data_dir),
        "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
        "PROCESSOR_GATEWAY_PORT": str(port),
        "PROCESSOR_GATEWAY_NODE_IDS": stack.gateway_node_ids,
        "PROCESSOR_GATEWAY_ARCHIVE_READS": "archived",
        "PROCESSOR_GATEWAY_TLS_CERTFILE": secured.pki.broker_cert,
        "PROCESSOR_GATEWAY_TLS_KEYFILE": secured.pki.broker_key,
        "PROCESSOR_WEB_HOST": "127.0.0.1",
        "PROCESSOR_WEB_PORT": str(web),
    }
    return env, port, web
