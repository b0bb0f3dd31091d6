"""moto's KMS in server mode on a free loopback port: a real KMS API that processes (a worker as a
child process) and boto3 clients reach over HTTP."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def moto_kms() -> Iterator[str]:
    """Yield the server's endpoint URL; stopped when the block ends."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
