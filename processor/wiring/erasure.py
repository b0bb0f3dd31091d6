"""The erasure secret (PROCESSOR_ERASURE_SECRET) turned into the keys it stands for: one for the
per-segment key filters, one for the keyed hashes of erased keys in the audit trail. Each is a
BLAKE2b of the secret under its own label, so neither reveals the other or the secret."""

from __future__ import annotations

import hashlib

from processor.config import Settings
from processor.errors import ConfigError
from processor.segment.key_filter import FilterSecret

_FILTER_LABEL = b"ktp-erasure-key-filter"
_AUDIT_LABEL = b"ktp-erasure-audit"


def _derived(secret: str, label: bytes) -> bytes:
    return hashlib.blake2b(secret.encode(), digest_size=32, key=label).digest()


def key_filter_secret(settings: Settings) -> FilterSecret | None:
    """What keys new segments' key filters; None without PROCESSOR_ERASURE_SECRET (no filters)."""
    if settings.erasure_secret is None:
        return None
    return FilterSecret(_derived(settings.erasure_secret.get_secret_value(), _FILTER_LABEL))


def audit_key(settings: Settings) -> bytes:
    """The key of the erased keys' hashes in the audit trail. Raises ConfigError without a secret."""
    if settings.erasure_secret is None:
        raise ConfigError(
            "PROCESSOR_ERASURE_SECRET is not set: erasure writes an audit trail of keyed hashes of the "
            "erased keys (and new segments' key filters) under it; set it on the workers and here"
        )
    return _derived(settings.erasure_secret.get_secret_value(), _AUDIT_LABEL)
