"""The gateway's listeners built from the settings: the addresses clients are given, the TLS towards
clients, the upstream brokers and the read-ahead (processor/wiring/gateway_server.py runs them)."""

from __future__ import annotations

import ssl

from processor import metrics
from processor.config import Settings
from processor.errors import ConfigError
from processor.gateway.address_rewrite import PortMap
from processor.gateway.listeners import Gateway, check_node_ids, reader_archive
from processor.gateway.prefetch import Prefetcher
from processor.gateway.state import GatewayState, ReadMode
from processor.kafka.clients import connection, new_admin
from processor.reader.remote_reader import RemoteReader


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
