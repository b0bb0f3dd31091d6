"""What the gateway changes in the answers it forwards: broker addresses and API versions. Pure.

Port per broker (as Kroxylicious does by default): clients are given the gateway's bootstrap port,
and the broker with node id ``n`` on bootstrap port + 1 + ``n`` - the first node id configured. The
mapping is a pure function of the node id, so every gateway replica behind one address agrees on it,
and a client that reconnects after a gateway restart reaches the same broker. Every broker address
in Metadata, FindCoordinator and DescribeCluster answers, and in the node endpoints of Fetch and
Produce answers (KIP-951: where a partition's new leader is), is rewritten to the gateway's. A broker
whose node id is outside the configured range cannot be given a port, and its address never reaches
a client (a client given it would bypass the gateway): it is left out of the brokers and node
endpoints, and a FindCoordinator answer naming it says COORDINATOR_NOT_AVAILABLE (clients ask again).
The gateway refuses to start while a broker of the cluster is outside the range
(:func:`processor.gateway.listeners.check_node_ids`); one that joins later is logged (``learn`` is
told every broker, served or not).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from kio.schema.errors import ErrorCode

from processor.gateway.protocol import GATEWAY_HIDDEN_APIS, GATEWAY_MAX_VERSIONS, schema_versions
from processor.kafka.api_keys import API_DESCRIBE_CLUSTER, API_FIND_COORDINATOR, API_METADATA


@dataclass(frozen=True, slots=True)
class PortMap:
    """Where clients reach the gateway: ``host`` (the advertised name), the bootstrap ``port``."""

    host: str
    port: int
    first_node_id: int = 0
    last_node_id: int = 63

    def node_port(self, node_id: int) -> int | None:
        if not self.first_node_id <= node_id <= self.last_node_id:
            return None
        return self.port + 1 + node_id - self.first_node_id


@cache
def kio_versions(api_key: int) -> tuple[int, int] | None:
    """The versions of ``api_key`` kio describes in both directions, up to the gateway's cap, from
    kio's index (importing every schema module to find out took ~1 s, on a client's first request)."""
    return schema_versions(api_key, GATEWAY_MAX_VERSIONS[api_key])


def cap_api_versions(body: Any) -> Any:
    """ApiVersions: what both the upstream and the gateway support. APIs the gateway changes keep
    the versions it can decode; hidden APIs are left out; the rest pass as the upstream says."""
    keys = []
    for entry in body.api_keys:
        key = int(entry.api_key)
        if key in GATEWAY_HIDDEN_APIS:
            continue
        if key in GATEWAY_MAX_VERSIONS:
            ours = kio_versions(key) if key != 0 else (0, GATEWAY_MAX_VERSIONS[0])
            if ours is None:
                continue
            low, high = max(int(entry.min_version), ours[0]), min(int(entry.max_version), ours[1])
            if low > high:
                continue
            entry = replace(
                entry, min_version=type(entry.min_version)(low), max_version=type(entry.max_version)(high)
            )
        keys.append(entry)
    return replace(body, api_keys=tuple(keys))


def rewrite_addresses(api_key: int, body: Any, ports: PortMap, learn: Callable[[int, str, int], None]) -> Any:
    """A Metadata, FindCoordinator or DescribeCluster answer, or a Fetch or Produce answer with node
    endpoints, with every broker address the gateway's, and no broker the gateway gives no port;
    ``learn(node_id, host, port)`` is told each upstream address first (the gateway connects there)."""
    if getattr(body, "node_endpoints", None):
        return replace(body, node_endpoints=_brokers(body.node_endpoints, "node_id", ports, learn))
    if api_key == API_METADATA:
        return replace(body, brokers=_brokers(body.brokers, "node_id", ports, learn))
    if api_key == API_DESCRIBE_CLUSTER:
        return replace(body, brokers=_brokers(body.brokers, "broker_id", ports, learn))
    if api_key == API_FIND_COORDINATOR:
        if hasattr(body, "coordinators"):
            return replace(body, coordinators=tuple(_coordinator(c, ports, learn) for c in body.coordinators))
        return _coordinator(body, ports, learn)
    return body


def _brokers(
    brokers: tuple[Any, ...], id_field: str, ports: PortMap, learn: Callable[[int, str, int], None]
) -> tuple[Any, ...]:
    out = []
    for broker in brokers:
        node = int(getattr(broker, id_field))
        learn(node, broker.host, int(broker.port))
        port = ports.node_port(node)
        if port is None:
            continue
        out.append(replace(broker, host=ports.host, port=type(broker.port)(port)))
    return tuple(out)


def _coordinator(entry: Any, ports: PortMap, learn: Callable[[int, str, int], None]) -> Any:
    node = int(entry.node_id)
    if node < 0 or not entry.host:  # an error answer (COORDINATOR_NOT_AVAILABLE): nothing to rewrite
        return entry
    learn(node, entry.host, int(entry.port))
    port = ports.node_port(node)
    if port is None:  # never the broker's own address: the client asks again (as while one is elected)
        values: dict[str, Any] = {
            "error_code": ErrorCode.coordinator_not_available,
            "node_id": type(entry.node_id)(-1),
            "host": "",
            "port": type(entry.port)(-1),
        }
        if hasattr(entry, "error_message"):
            values["error_message"] = (
                f"broker {node} is not served by this gateway (PROCESSOR_GATEWAY_NODE_IDS)"
            )
        return replace(entry, **values)
    return replace(entry, host=ports.host, port=type(entry.port)(port))
