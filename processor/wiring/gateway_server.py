"""``processor gateway``: the composition root of the Kafka-protocol gateway.

It follows the metadata topic into its RocksDB cache (as ``processor follower`` does), reads the
archive through a remote reader over it, listens for Kafka clients (processor/gateway/listeners.py)
and serves health and metrics on the web port.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import errno
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

from aiohttp import web

from processor.config import Settings
from processor.errors import ConfigError
from processor.gateway.listeners import Gateway
from processor.gateway.protocol import warm_up
from processor.reader.block_cache import BlockCache
from processor.reader.remote_reader import RemoteReader
from processor.web.servers import follower_web_app
from processor.wiring.follower import Follower, build_follower, build_reader
from processor.wiring.gateway import build_gateway, client_tls, gateway_ports
from processor.wiring.startup import check_shared, read_api_token

log = logging.getLogger("processor.gateway")
ARCHIVE_READ_THREADS = 32


@dataclass
class GatewayServer:
    settings: Settings
    follower: Follower
    reader: RemoteReader
    gateway: Gateway
    web_app: web.Application
    # set once every listener is open (an embedding waits on it; serve raises instead when one fails)
    listening: threading.Event = field(default_factory=threading.Event)

    @classmethod
    def build(cls, settings: Settings) -> GatewayServer:
        gateway_ports(settings)  # a setting clients could not use fails before anything connects
        client_tls(settings)
        token = read_api_token(settings)
        started = check_shared(settings, read_threads=ARCHIVE_READ_THREADS)
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        follower = build_follower(settings, started.metadata_partitions, storage=started.storage)
        cache = (
            BlockCache(settings.data_dir / "block-cache", settings.gateway_cache_bytes)
            if settings.gateway_cache_bytes > 0
            else None
        )
        reader = build_reader(settings, started.storage, follower.rlmm, block_cache=cache)
        materializer = follower.materializer

        def follower_failure() -> str | None:
            return (
                None if materializer.failure is None else f"metadata follower failed: {materializer.failure}"
            )

        web_app = follower_web_app({"follower": follower_failure}, reader, token=token)
        return cls(settings, follower, reader, build_gateway(settings, reader), web_app)

    async def serve(self, stop: asyncio.Event) -> None:
        warm_up()  # the protocol's schemas, before any client waits on them
        # Archive reads run in threads (boto3 blocks): enough of them for every partition of a
        # fetch and the read-ahead at once (the default pool has min(32, CPUs + 4)).
        asyncio.get_running_loop().set_default_executor(
            concurrent.futures.ThreadPoolExecutor(ARCHIVE_READ_THREADS, thread_name_prefix="gateway-read")
        )
        runner = web.AppRunner(self.web_app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.settings.web_host, self.settings.web_port)
        settings = self.settings
        try:
            # a start that fails half way (a broker's port in use after the first one bound) closes
            # what it opened: a listener nobody serves would leave clients waiting on their requests
            with port_in_use_is_said("PROCESSOR_WEB_PORT", settings.web_host, settings.web_port):
                await site.start()
            ports = f"{settings.gateway_port} (or a broker's port after it: PROCESSOR_GATEWAY_NODE_IDS)"
            with port_in_use_is_said("PROCESSOR_GATEWAY_PORT", settings.gateway_host, ports):
                await self.gateway.start()
            log.info(
                "gateway serving Kafka clients on %s:%d (archive reads: %s)",
                self.gateway.ports.host,
                self.gateway.ports.port,
                self.settings.gateway_archive_reads,
            )
            self.listening.set()
            await stop.wait()
        finally:
            await self.gateway.close()
            await runner.cleanup()

    def run(self) -> int:
        # The metadata first: a gateway that listened before its follower caught up would leave
        # archived offsets to the brokers, which (below their log start) answer OFFSET_OUT_OF_RANGE,
        # and a client resets past the archive.
        log.info("gateway: reading the metadata topic before listening")
        self.follower.materializer.catch_up()
        self.follower.materializer.start()
        try:
            asyncio.run(self.serve(asyncio.Event()))
        finally:
            self.close()
        return 0

    def close(self) -> None:
        self.follower.close()
        self.reader.storage.close()
        if self.reader.block_cache is not None:
            self.reader.block_cache.close()


@contextlib.contextmanager
def port_in_use_is_said(setting: str, host: str, port: object) -> Iterator[None]:
    """A port another process holds is one line naming the setting (exit 2), not a traceback."""
    try:
        yield
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        raise ConfigError(
            f"{setting}: {host}:{port} is in use by another process (a worker, follower or gateway on "
            f"this host?): give this one a port of its own"
        ) from None
