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
from processor.config import Settings
from processor.errors import ConfigError, OffsetNotInRemoteError
from processor.gateway.connection import REQUEST_TIMEOUT_S, ClientConnection
from processor.gateway.prefetch import Prefetcher
from processor.gateway.protocol import Frame
from processor.gateway.rewrite import PortMap
from processor.gateway.state import Archive, GatewayState, ReadMode, Send
from processor.gateway.upstream import Upstream
from processor.kafka.clients import connection, new_admin
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


def gateway_ports(settings: Settings) -> PortMap:
    """The addresses clients are given, checked (ConfigError naming the setting) before anything
    connects."""
    advertised = settings.gateway_advertised_host or settings.gateway_host
    if advertised in ("0.0.0.0", "::"):
        raise ConfigError(
            "PROCESSOR_GATEWAY_ADVERTISED_HOST must name the address clients reach the gateway by "
            f"(PROCESSOR_GATEWAY_HOST is {settings.gateway_host})"
        )
    first, _, last = settings.gateway_node_ids.partition("-")
    if not 0 <= int(last) - int(first) < 1000 or settings.gateway_port + 1 + int(last) - int(first) > 65535:
        raise ConfigError(
            f"PROCESSOR_GATEWAY_NODE_IDS={settings.gateway_node_ids}: a range first-last of at most 1000 "
            f"node ids whose ports (PROCESSOR_GATEWAY_PORT + 1 + n - first) end at 65535 or below"
        )
    return PortMap(advertised, settings.gateway_port, int(first), int(last))


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


def client_tls(settings: Settings) -> ssl.SSLContext | None:
    """The TLS context of the gateway's listeners (None: plaintext); ConfigError naming the setting
    when a file is missing or does not load."""
    cert, key, cafile = (
        settings.gateway_tls_certfile,
        settings.gateway_tls_keyfile,
        settings.gateway_tls_client_cafile,
    )
    if cert is None and key is None and cafile is None:
        return None
    if cert is None or key is None:
        raise ConfigError(
            "PROCESSOR_GATEWAY_TLS_CERTFILE and PROCESSOR_GATEWAY_TLS_KEYFILE go together (TLS towards "
            "clients needs both)"
        )
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
        if cafile is not None:
            context.load_verify_locations(cafile)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"PROCESSOR_GATEWAY_TLS_*: cannot load the gateway's TLS files: {exc}") from None
    return context


def build_gateway(settings: Settings, reader: RemoteReader) -> Gateway:
    """The gateway's listeners, told every broker of the upstream cluster (a Metadata request);
    ConfigError when one is outside PROCESSOR_GATEWAY_NODE_IDS (:func:`check_node_ids`)."""
    conn = connection(settings.kafka)
    tls = conn.security.aiokafka_kwargs().get("ssl_context")
    bootstrap = []
    for entry in conn.bootstrap_servers.split(","):
        host, _, port = entry.strip().rpartition(":")
        bootstrap.append((host.strip("[]"), int(port)))
    gateway = Gateway(
        gateway_ports(settings),
        settings.gateway_host,
        bootstrap,
        GatewayState(ReadMode(settings.gateway_archive_reads)),
        reader_archive(reader),
        tls,
    )
    cluster = new_admin(settings.kafka, "processor-gateway").list_topics(timeout=15)
    for node_id, broker in cluster.brokers.items():
        gateway.learn(int(node_id), str(broker.host), int(broker.port))
    check_node_ids(gateway.ports, gateway.upstream_addresses)
    if conn.security.uses_sasl:
        gateway.own_connections = None
        gateway.state.check_access = True
    gateway.tls_clients = client_tls(settings)
    gateway.request_timeout_s = settings.gateway_request_timeout_ms / 1000
    if settings.gateway_prefetch_bytes > 0:
        gateway.state.prefetch = Prefetcher(
            gateway.archive.read_batches,
            settings.gateway_prefetch_bytes,
            read_ahead=gateway.archive.read_whole_blocks,
        )
    gateway.state.served = _count_served
    return gateway


def _count_served(topic: str, source: str, records: int, size: int) -> None:
    metrics.GATEWAY_FETCH_RECORDS.labels(topic, source).inc(records)
    metrics.GATEWAY_FETCH_BYTES.labels(topic, source).inc(size)
