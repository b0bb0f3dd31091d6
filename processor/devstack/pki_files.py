"""Where the secured dev stack's certificate files are (processor/devstack/certs.py makes them).

Apart from the maker, which needs the ``cryptography`` package: every command loads the dev stack's
description, and only ``dev up --secure`` makes certificates.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DevPki:
    """Where the stack's certificate files are."""

    ca_file: str
    broker_cert: str
    broker_key: str
    client_cert: str
    client_key: str
    client_key_password: str
    untrusted_ca_file: str
