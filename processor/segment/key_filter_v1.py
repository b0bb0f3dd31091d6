"""Key filter format version 1: what it did differently from version 2 (``key_filter``), kept to
read the filters it wrote. Pure.

The byte layout is version 2's. Only a key longer than 32 bytes is summarised differently: version
1 summarises the 32-byte BLAKE2b-256 of the key (person ``ktp-kf-long``) in place of the key's
words, with the key's own length; version 2 chains all the key's words. A key of up to 32 bytes has
the same summary in both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

ROW_BYTES = 32
_LONG_PERSON = b"ktp-kf-long"


def long_key_row(key: bytes) -> bytes:
    """The 32 bytes that stand for a key longer than 32 bytes in its version 1 summary."""
    return hashlib.blake2b(key, digest_size=ROW_BYTES, person=_LONG_PERSON).digest()


def summary_rows(keys: Sequence[bytes]) -> list[bytes]:
    """What version 1 summarises of each key: the key itself, or its ``long_key_row``."""
    return [key if len(key) <= ROW_BYTES else long_key_row(key) for key in keys]
