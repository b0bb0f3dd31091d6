"""A ``processor gateway`` served in a thread of the test process (its own event loop), for tests that
consume through it with real Kafka clients."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from processor.config import Settings
from processor.wiring.gateway_server import GatewayServer

if TYPE_CHECKING:
    from processor.devstack.stack import StackInfo


def _serve(server: GatewayServer, box: list[Any], failure: list[BaseException]) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        box.extend([asyncio.get_running_loop(), stop])
        await server.serve(stop)

    try:
        asyncio.run(main())
    except BaseException as exc:  # a start that failed (a port in use): the test says it, not a hang
        failure.append(exc)


@contextmanager
def gateway_running(server: GatewayServer) -> Iterator[GatewayServer]:
    """Catch the server's follower up, serve until the block ends, then stop and close it. A gateway
    that fails to start (or stops early) fails the test with its own error."""
    server.follower.materializer.catch_up()
    server.follower.materializer.start()
    box, failure = list[Any](), list[BaseException]()
    thread = threading.Thread(target=_serve, args=(server, box, failure), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.listening.wait(0.05):
            if not thread.is_alive():
                raise AssertionError(f"the gateway did not start: {failure[0] if failure else '?'}")
            assert time.monotonic() < deadline, "the gateway did not start in 60 s"
        yield server
        if failure:
            raise AssertionError(f"the gateway stopped while the test ran: {failure[0]}") from failure[0]
    finally:
        if box and thread.is_alive():
            loop, stop = box
            loop.call_soon_threadsafe(stop.set)
        thread.join(30)
        server.close()


def free_port_run(count: int) -> int:
    """A free loopback port with the ``count - 1`` after it free as well: the gateway listens on its
    port and one port per broker after it (PROCESSOR_GATEWAY_NODE_IDS)."""
    from processor.devstack.servers import free_port  # the local stack's: only where one runs

    while True:
        port = free_port()
        if port + count > 65536:
            continue
        try:
            for p in range(port, port + count):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return port


@dataclass(frozen=True)
class LoopbackGateway:
    settings: Settings
    bootstrap: str  # where clients connect
    web: str  # its health and metrics


def loopback_gateway(stack_env: dict[str, str], data_dir: Path, **overrides: str) -> LoopbackGateway:
    """The settings of a gateway over the archive ``stack_env`` names (its Kafka, S3 and PROCESSOR_*
    choices), on free loopback ports, with a data directory of its own; ``overrides`` last."""
    from processor.config import load_settings
    from processor.devstack.servers import free_port  # the local stack's: only where one runs

    port, web = free_port_run(4), free_port()
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
    from processor.devstack.servers import free_port  # the local stack's: only where one runs

    secured = stack.secured
    assert secured is not None, "the secured stack"
    port, web = free_port_run(4), free_port()
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


def consume_archive(
    archive_env: dict[str, str], data_dir: Path, topic: str, count: int, group: str, timeout_s: float = 120
) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of up to ``count`` records of ``topic``'s partition 0 from its first
    offset, read by an unmodified confluent-kafka consumer through a gateway on ``archive_env``'s
    archive (CRCs checked), in the order the consumer gets them."""
    from confluent_kafka import Consumer
    from confluent_kafka import TopicPartition as KafkaTP

    gateway = loopback_gateway(archive_env, data_dir)
    got: list[tuple[int, bytes | None, bytes | None]] = []
    with gateway_running(GatewayServer.build(gateway.settings)):
        consumer = Consumer(
            {"bootstrap.servers": gateway.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
             "enable.auto.commit": False, "check.crcs": True}
        )  # fmt: skip
        try:
            consumer.assign([KafkaTP(topic, 0, 0)])
            deadline = time.monotonic() + timeout_s
            while len(got) < count and time.monotonic() < deadline:
                for msg in consumer.consume(1000, 0.5):
                    assert msg.error() is None, msg.error()
                    got.append((msg.offset() or 0, msg.key(), msg.value()))
        finally:
            consumer.close()
    return got
