"""A ``processor gateway`` served in a thread of the test process (its own event loop), for tests that
consume through it with real Kafka clients."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from processor.wiring.gateway_server import GatewayServer


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
