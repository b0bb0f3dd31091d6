"""The gateway's listeners: the bootstrap port and one port per upstream broker, each client connection
paired with a connection to its broker. Security: TLS towards the brokers follows the Kafka security
settings (``PROCESSOR_SECURITY_PROTOCOL`` SSL or SASL_SSL); SASL is passed through: a client
authenticates to the brokers through the gateway with its own identity, and the gateway's own
requests on that connection (ListOffsets for partitions it answers from the archive) go with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from dataclasses import dataclass, field
from typing import Any

from processor import metrics
from processor.errors import ConfigError, OffsetNotInRemoteError
from processor.gateway.address_rewrite import PortMap
from processor.gateway.client_connection import REQUEST_TIMEOUT_S, ClientConnection
from processor.gateway.protocol import Frame
from processor.gateway.state import Archive, GatewayState, Send
from processor.gateway.upstream import Upstream
from processor.kafka.partition import TopicPartition
from processor.reader.remote_reader import RemoteReader

log = logging.getLogger("processor.gateway")
CONNECT_TIMEOUT_S = 10.0


def reader_archive(reader: RemoteReader) -> Archive:
    lookup: Any = reader.lookup

    def first_offset(tp: TopicPartition) -> int | None:
        first: int | None = lookup.earliest_log_offset(tp)
        if first is None:
            return None
        return max(first, int(lookup.log_start_offset(tp)))

    def offset_for_timestamp(tp: TopicPartition, timestamp: int) -> tuple[int, int] | None:
        try:
            found = reader.read_from_timestamp(tp, timestamp, max_records=1)
        except OffsetNotInRemoteError:
            return None
        return (found[0].offset, found[0].timestamp) if found else None

    return Archive(
        reader.read_batches,
        first_offset,
        offset_for_timestamp,
        functools.partial(reader.read_batches, whole_blocks=True),
    )


@dataclass
class Gateway:
    """The listeners and what they share; ``upstream_addresses``: node id -> the broker's address."""

    ports: PortMap
    bind_host: str
    bootstrap: list[tuple[str, int]]
    state: GatewayState
    archive: Archive
    tls_upstream: ssl.SSLContext | None = None
    upstream_addresses: dict[int, tuple[str, int]] = field(default_factory=dict)
    unserved: set[int] = field(default_factory=set)  # brokers outside the node ids (logged once each)
    servers: dict[int | None, asyncio.Server] = field(default_factory=dict)
    # The gateway's own connection to each broker, for its own ListOffsets (so a client's requests
    # never queue behind them on the client's connection). None: the upstream asks every client to
    # authenticate (SASL, passed through), so the gateway has no identity of its own there.
    own_connections: dict[int, Upstream] | None = field(default_factory=dict)
    tls_clients: ssl.SSLContext | None = None  # TLS towards clients (None: plaintext)
    # seconds a client's request may take to arrive whole once its first byte has
    request_timeout_s: float = REQUEST_TIMEOUT_S

    async def start(self) -> None:
        self.servers[None] = await asyncio.start_server(
            functools.partial(self._serve, None),
            self.bind_host,
            self.ports.port,
            limit=1 << 20,
            ssl=self.tls_clients,
        )
        await self.open_node_listeners()

    def learn(self, node_id: int, host: str, port: int) -> None:
        self.upstream_addresses[node_id] = (host, port)

    async def open_node_listeners(self) -> None:
        for node in sorted(self.upstream_addresses):
            if node in self.servers or node in self.unserved:
                continue
            port = self.ports.node_port(node)
            if port is None:
                self.unserved.add(node)
                host, upstream_port = self.upstream_addresses[node]
                log.error(
                    "broker %d (%s:%d) joined with a node id outside PROCESSOR_GATEWAY_NODE_IDS=%d-%d: "
                    "clients are not told of it (its partitions have no leader they can reach, its "
                    "groups no coordinator); restart the gateway with a range that holds %d",
                    node, host, upstream_port, self.ports.first_node_id, self.ports.last_node_id, node,
                )  # fmt: skip
                continue
            self.servers[node] = await asyncio.start_server(
                functools.partial(self._serve, node),
                self.bind_host,
                port,
                limit=1 << 20,
                ssl=self.tls_clients,
            )
            log.info("gateway: broker %d on port %d", node, port)

    async def _upstream(self, node: int | None) -> Upstream:
        targets = self.bootstrap if node is None else [self.upstream_addresses[node]]
        failure: Exception | None = None
        for host, port in targets:
            try:
                return await Upstream.open(host, port, self.tls_upstream, CONNECT_TIMEOUT_S)
            except (OSError, TimeoutError) as exc:
                failure = exc
        raise ConnectionError(f"no upstream broker reachable ({failure})")

    def own_send(self, node: int | None) -> Send | None:
        """How the gateway sends its own requests to broker ``node`` (None: on the client's
        connection)."""
        if node is None or self.own_connections is None:
            return None
        connections = self.own_connections

        async def send(request: bytes) -> Frame:
            upstream = connections.get(node)
            if upstream is None or upstream.failed:
                upstream = connections[node] = await self._upstream(node)
            answer = upstream.send(request)
            await upstream.drain()
            return await answer

        return send

    async def _serve(
        self, node: int | None, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        metrics.GATEWAY_CONNECTIONS.inc()
        try:
            try:
                upstream = await self._upstream(node)
            except ConnectionError as exc:
                log.warning("gateway: %s", exc)
                writer.close()
                return
            conn = ClientConnection(
                (reader, writer),
                upstream,
                self.state,
                self.archive,
                self.ports,
                self.learn,
                self.open_node_listeners,
                self.own_send(node),
                self.request_timeout_s,
            )
            await conn.run()
        finally:
            metrics.GATEWAY_CONNECTIONS.dec()

    async def close(self) -> None:
        if self.state.prefetch is not None:
            self.state.prefetch.close()
        for upstream in (self.own_connections or {}).values():
            await upstream.close()
        for server in self.servers.values():
            server.close()
        for server in self.servers.values():
            with contextlib.suppress(Exception):
                await server.wait_closed()


def check_node_ids(ports: PortMap, brokers: dict[int, tuple[str, int]]) -> None:
    """ConfigError naming PROCESSOR_GATEWAY_NODE_IDS when a broker's node id (``brokers``: node id ->
    address) is outside it: the gateway could give clients no address of its own for that broker,
    and a client given the broker's would bypass the gateway (and the archive)."""
    outside = sorted(node for node in brokers if ports.node_port(node) is None)
    if not outside:
        return
    ids = sorted(brokers)
    named = ", ".join(f"{node} ({brokers[node][0]}:{brokers[node][1]})" for node in outside)
    wanted = f"{ids[0]}-{ids[-1]}"
    if ids[-1] - ids[0] < 1000:
        hint = (
            f"set PROCESSOR_GATEWAY_NODE_IDS={wanted} (broker n is then on port "
            f"{ports.port} + 1 + n - {ids[0]}; open those ports too)"
        )
    else:
        hint = f"node ids {wanted} span more than the 1000 one gateway can serve"
    raise ConfigError(
        f"PROCESSOR_GATEWAY_NODE_IDS={ports.first_node_id}-{ports.last_node_id} does not hold the node "
        f"id of broker {named}: {hint}"
    )
