"""A Kafka-aware TCP proxy that can stall one kind of request (Fetch), for tests that stop record
fetching while everything else (metadata, ListOffsets, produce, the consumer group) goes on.

Put it in front of a broker that advertises the proxy's address (so every client connection, not
only the bootstrap one, goes through it). Each client connection is forwarded frame by frame: a
Kafka request is a 4-byte big-endian size followed by the request header, whose first two bytes
are the API key. While :meth:`stall` is on for an API key, the first such request on a connection
is held, and so is everything after it on that connection (the protocol answers in order); the
broker never sees them, so the client's requests time out or wait. :meth:`release` forwards what
was held. Answers from the broker are copied back unchanged.

Written by hand: the fault proxies at hand cut whole connections (tests/integration/tcp_proxy.py) or
speak HTTP (the S3 fault proxy); none tells Kafka requests apart.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading

from processor.devstack.servers import free_port

FETCH = 1  # the Fetch request's API key
LIST_OFFSETS = 2


def _read_exactly(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = sock.recv(min(size, 65536))
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


class KafkaGate:
    def __init__(self, target_host: str, target_port: int, port: int | None = None) -> None:
        self.target = (target_host, target_port)
        self.port = port or free_port()
        self._stalled: set[int] = set()
        self._released = threading.Condition()
        self._sockets: list[socket.socket] = []
        self._listener: socket.socket | None = None
        self.held = 0  # requests held back since the last release (for the test's own checks)
        self.seen: dict[int, int] = {}  # requests forwarded, by API key

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> KafkaGate:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), name="kafka-gate", daemon=True).start()
        return self

    def stall(self, api_key: int = FETCH) -> None:
        with self._released:
            self._stalled.add(api_key)

    def release(self, api_key: int = FETCH) -> None:
        with self._released:
            self._stalled.discard(api_key)
            self.held = 0
            self._released.notify_all()

    def close(self) -> None:
        with self._released:
            self._stalled.clear()
            self._released.notify_all()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            self._sockets += [client, upstream]
            threading.Thread(target=self._requests, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._answers, args=(upstream, client), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket) -> None:
        try:
            while True:
                size_bytes = _read_exactly(client, 4)
                if size_bytes is None:
                    break
                (size,) = struct.unpack(">i", size_bytes)
                body = _read_exactly(client, size)
                if body is None:
                    break
                (api_key,) = struct.unpack(">h", body[:2])
                with self._released:
                    if api_key in self._stalled:
                        self.held += 1
                        while api_key in self._stalled:
                            self._released.wait()
                    self.seen[api_key] = self.seen.get(api_key, 0) + 1
                upstream.sendall(size_bytes + body)
        except OSError:
            pass
        finally:
            _shut(client, upstream)

    def _answers(self, upstream: socket.socket, client: socket.socket) -> None:
        try:
            while True:
                data = upstream.recv(65536)
                if not data:
                    break
                client.sendall(data)
        except OSError:
            pass
        finally:
            _shut(client, upstream)


def _shut(*sockets: socket.socket) -> None:
    """End both directions of a forwarded connection (the other pump then stops too)."""
    for sock in sockets:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
