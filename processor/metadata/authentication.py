"""Authenticated metadata: a MAC (keyed BLAKE2b) over each record's key and value, in a Kafka header.

Every record a worker or command writes to the metadata topic or the deletion topic (records and
tombstones) carries the header ``processor-auth`` when signing is on. The KIP-405 value bytes stay as
they are, so other readers of the topic read them unchanged. Every reader's intake passes each
consumed message through :meth:`MetadataAuth.screen` (the follower's materializer, which the
worker, gateway, CLI reads and the Spark metadata view fold through, and
:func:`processor.metadata.topic_io.read_partitions`, which the leader's resume, the rebuild's check,
the restore's planner and the deletion topic read through). With refusal on, a message that does not
verify is handed to the fold as an empty value: the fold rejects it as it rejects any value that does
not decode (never applied; under the key of an accepted state it shadows that state, so its owner
re-publishes it and a compacted topic keeps it), and it is counted
(``processor_metadata_unauthenticated_total{domain,reason}``) and logged (at most one line a
minute per reason).

Why a MAC and not a signature: a reader verifies every record it folds, and the follower folds
100,000 records a second per core (10 us a record); an Ed25519 verification costs ~50 us (a follower
at 1/5 of its rate), a MAC of a 300-byte record about 1 us. The price: every process that verifies
holds the key and could sign. The threat answered is a principal that may write the topics but
holds no key. Why keyed BLAKE2b (RFC 7693's keyed mode, a MAC by design; Python's hashlib) and not
HMAC-SHA256: one pass instead of HMAC's two, measured at 1.0 us against 2.3-3.4 us a record (the
base state of each key is computed once and copied per record).

Header value, version 1 (all integers big-endian)::

    offset  size  field
    0       1     version (1)
    1       1     n: length of the key id (1..128)
    2       n     key id, ASCII [A-Za-z0-9._-] (a file of the key ring: <key id>.key)
    2+n     32    tag: BLAKE2b(input, key=key material (32 bytes), digest_size=32)

    input = version (1 byte) || len(domain) (1 byte) || domain   (b"metadata" or b"deletion")
            || len(key) (4 bytes; 0xFFFFFFFF: no key) || key
            || len(value) (4 bytes; 0xFFFFFFFF: a tombstone) || value

The domain keeps a record of one topic from verifying on the other. No other header of these topics
means anything to a reader, so none other is covered. A header of another version is refused as
``unknown_version`` under ``require`` (upgrade readers before writers).

Keys: a directory of key files in the format of the encryption key ring
(:mod:`processor.crypto.keyring`, ``processor keyring new --dir DIR``: its default keys, topic null).
Every key in the directory verifies; a writer signs with the newest key created at least
``ACTIVATION_DELAY_MS`` ago (the newest at all while none is that old), so a key added to every
process's directory is taken up by writers only once readers had time to see it. A reader that meets
a key id it does not hold reads the directory again (at most once a second) before refusing.

Modes (``PROCESSOR_METADATA_AUTH``): ``off`` (no header written, nothing checked), ``sign`` (writers
sign; readers check and count what does not verify, and fold it anyway: the migration's first step),
``require`` (writers sign, readers refuse what does not verify). Under ``require`` an unsigned
record whose timestamp is before ``unsigned_before_ms`` (``PROCESSOR_METADATA_AUTH_UNSIGNED_BEFORE``,
set to a time after every writer signed) is still folded: the archive's records from before
signing stay readable. That is safe only on topics whose timestamps the broker sets
(``message.timestamp.type=LogAppendTime``, which :mod:`processor.metadata.topic_io` sets on both
topics whenever it is given), so a record written now cannot claim an earlier time.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import struct
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from processor import metrics
from processor.errors import ConfigError, FormatError

log = logging.getLogger(__name__)

HEADER = "processor-auth"
VERSION = 1
TAG_BYTES = 32
MAX_KEY_ID = 128
DOMAIN_METADATA: Final = b"metadata"
DOMAIN_DELETION: Final = b"deletion"
ACTIVATION_DELAY_MS = 10 * 60 * 1000
RESCAN_INTERVAL_S = 1.0
LOG_INTERVAL_S = 60.0
MODES = ("off", "sign", "require")
# What a refused message is handed to the fold as: a value that does not decode (see the docstring)
REFUSED = b""

# reasons a message does not verify (the metric's label)
UNSIGNED = "unsigned"
MALFORMED = "malformed"
UNKNOWN_VERSION = "unknown_version"
UNKNOWN_KEY = "unknown_key"
BAD_TAG = "bad_tag"
REASONS = (UNSIGNED, MALFORMED, UNKNOWN_VERSION, UNKNOWN_KEY, BAD_TAG)

_KEY_ID = re.compile(rb"[A-Za-z0-9._-]{1,128}")
_NONE = 0xFFFFFFFF
_LEN = struct.Struct(">I")
_TIMESTAMP_NOT_AVAILABLE = 0


def mac_input(domain: bytes, key: bytes | None, value: bytes | None) -> bytes:
    """The bytes the tag is computed over (layout in the module's docstring)."""
    return b"".join(
        (
            bytes((VERSION, len(domain))),
            domain,
            _LEN.pack(_NONE if key is None else len(key)),
            key or b"",
            _LEN.pack(_NONE if value is None else len(value)),
            value or b"",
        )
    )


def tag_of(material: bytes, domain: bytes, key: bytes | None, value: bytes | None) -> bytes:
    return hashlib.blake2b(mac_input(domain, key, value), key=material, digest_size=TAG_BYTES).digest()


def encode_header(key_id: str, tag: bytes) -> bytes:
    raw_id = key_id.encode("ascii")
    if not _KEY_ID.fullmatch(raw_id):
        raise ValueError(f"not a key id: {key_id!r}")
    if len(tag) != TAG_BYTES:
        raise ValueError(f"a tag is {TAG_BYTES} bytes, not {len(tag)}")
    return bytes((VERSION, len(raw_id))) + raw_id + tag


def decode_header(raw: bytes) -> tuple[str, bytes]:
    """(key id, tag) of a version 1 header value. Raises FormatError naming what is wrong (its
    message starts with ``version`` for a header of another version)."""
    if len(raw) < 2:
        raise FormatError(f"authenticator header of {len(raw)} bytes, shorter than its framing")
    if raw[0] != VERSION:
        raise FormatError(f"version {raw[0]} authenticator header, this build reads version {VERSION}")
    n = raw[1]
    if len(raw) != 2 + n + TAG_BYTES:
        raise FormatError(f"authenticator header of {len(raw)} bytes, its key id of {n} needs {2 + n + 32}")
    raw_id = raw[2 : 2 + n]
    if not _KEY_ID.fullmatch(raw_id):
        raise FormatError("authenticator header's key id is not [A-Za-z0-9._-]{1,128}")
    return raw_id.decode("ascii"), raw[2 + n :]


def _header_of(headers: Sequence[tuple[str, bytes | None]] | None) -> bytes | bool | None:
    """The value of our header (False: absent; None: present without a value)."""
    if not headers:
        return False
    found: bytes | bool | None = False
    for name, value in headers:
        if name == HEADER:
            if found is not False:
                return None  # twice: malformed
            found = value
    return found


@dataclass
class KeyRing:
    """The authenticator's keys: ``keys`` by key id (created_ms, material), read again from
    ``source`` (a directory) when a key id is unknown (at most once a second) or when the signer's
    choice is over a minute old."""

    keys: dict[str, tuple[int, bytes]]
    source: Callable[[], dict[str, tuple[int, bytes]]] | None = None
    _scanned_at: float = field(default_factory=time.monotonic)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_directory(cls, directory: Path) -> KeyRing:
        from processor.crypto.keyring import KeyringProvider  # the key files' one reader

        try:
            provider = KeyringProvider(directory)
            keys = provider.default_keys()
        except Exception as exc:
            raise ConfigError(f"PROCESSOR_METADATA_AUTH_KEYS: {exc}") from None
        if not keys:
            raise ConfigError(
                f"PROCESSOR_METADATA_AUTH_KEYS: {directory} holds no key (create one with "
                f"`processor keyring new --dir {directory}`)"
            )
        return cls(keys, provider.default_keys)

    def rescan(self, force: bool = False) -> None:
        if self.source is None:
            return
        now = time.monotonic()
        with self._lock:
            if not force and now - self._scanned_at < RESCAN_INTERVAL_S:
                return
            self._scanned_at = now
        try:
            fresh = self.source()
        except Exception as exc:  # keep the keys held: a directory being rewritten, say
            log.warning("metadata authentication keys not read again: %s", exc)
            return
        if fresh:
            self.keys = fresh

    def material(self, key_id: str) -> bytes | None:
        held = self.keys.get(key_id)
        if held is None:
            self.rescan()
            held = self.keys.get(key_id)
        return None if held is None else held[1]

    def signing_key(self, now_ms: int | None = None) -> tuple[str, bytes]:
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        items = sorted(self.keys.items(), key=lambda kv: (kv[1][0], kv[0]))
        ripe = [kv for kv in items if kv[1][0] <= now_ms - ACTIVATION_DELAY_MS]
        key_id, (_created, material) = (ripe or items)[-1]
        return key_id, material


@dataclass
class MetadataAuth:
    """The deployment's choice (mode, keys, the unsigned cut-off) and the one check every reader's
    intake calls. ``off`` writes and checks nothing."""

    mode: str = "off"
    ring: KeyRing | None = None
    unsigned_before_ms: int | None = None
    _signer: tuple[str, bytes] | None = None
    _signer_at: float = 0.0
    _logged: dict[str, float] = field(default_factory=dict)
    # per domain: a header's first bytes (version, key id length, key id) -> the MAC's state after the
    # key and the input's fixed prefix, copied per record (made again when the ring's keys change)
    _bases: tuple[object, dict[bytes, dict[bytes, Any]]] = (None, {})

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"PROCESSOR_METADATA_AUTH must be one of {', '.join(MODES)}, not {self.mode!r}")
        if self.mode != "off" and self.ring is None:
            raise ConfigError(f"PROCESSOR_METADATA_AUTH={self.mode} needs PROCESSOR_METADATA_AUTH_KEYS")

    @property
    def signs(self) -> bool:
        return self.mode != "off"

    @property
    def requires(self) -> bool:
        return self.mode == "require"

    # -- writers

    def headers(
        self, domain: bytes, key: bytes | None, value: bytes | None
    ) -> list[tuple[str, str | bytes | None]] | None:
        """The headers a writer adds to a record (None while signing is off)."""
        if self.ring is None or not self.signs:
            return None
        now = time.monotonic()
        if self._signer is None or now - self._signer_at > 60.0:
            self.ring.rescan()
            self._signer, self._signer_at = self.ring.signing_key(), now
        key_id, material = self._signer
        return [(HEADER, encode_header(key_id, tag_of(material, domain, key, value)))]

    # -- readers

    def check(
        self,
        domain: bytes,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]] | None,
    ) -> str | None:
        """None when the message verifies, else the reason it does not (one of REASONS)."""
        raw = _header_of(headers)
        if raw is False:
            return UNSIGNED
        if raw is None or self.ring is None:
            return MALFORMED
        assert isinstance(raw, bytes)
        try:
            key_id, tag = decode_header(raw)
        except FormatError as exc:
            return UNKNOWN_VERSION if str(exc).startswith("version") else MALFORMED
        material = self.ring.material(key_id)
        if material is None:
            return UNKNOWN_KEY
        if not hmac.compare_digest(tag, tag_of(material, domain, key, value)):
            return BAD_TAG
        return None

    def admits(self, reason: str | None, timestamp: tuple[int, int] | None) -> bool:
        """Whether a message that checked as ``reason`` is folded (always, unless ``require``)."""
        if reason is None or not self.requires:
            return True
        if reason != UNSIGNED or self.unsigned_before_ms is None or timestamp is None:
            return False
        kind, ms = timestamp
        return kind != _TIMESTAMP_NOT_AVAILABLE and 0 <= ms < self.unsigned_before_ms

    def _bases_of(self, domain: bytes) -> dict[bytes, Any]:
        ring = self.ring
        assert ring is not None
        held, by_domain = self._bases
        if held is not ring.keys:
            by_domain = {}
            self._bases = (ring.keys, by_domain)
        bases = by_domain.get(domain)
        if bases is None:
            bases = {}
            for key_id, (_created, material) in ring.keys.items():
                base = hashlib.blake2b(key=material, digest_size=TAG_BYTES)
                base.update(bytes((VERSION, len(domain))) + domain)
                bases[bytes((VERSION, len(key_id))) + key_id.encode("ascii")] = base
            by_domain[domain] = bases
        return bases

    def screen(self, domain: bytes, msg: Any) -> bytes | None:
        """The value to fold for one consumed message (a confluent_kafka ``Message``): its own, or
        :data:`REFUSED` when refusal is on and it does not verify. The one place readers verify."""
        value: bytes | None = msg.value()
        if self.mode == "off":
            return value
        key: bytes | None = msg.key()
        headers = msg.headers()
        if headers is not None and len(headers) == 1 and key is not None and value is not None:
            # the common case, verified with the key's precomputed state (:meth:`check` says why not)
            name, raw = headers[0]
            if name == HEADER and raw is not None:
                cut = len(raw) - TAG_BYTES
                base = self._bases_of(domain).get(raw[:cut])
                if base is not None:
                    mac = base.copy()
                    mac.update(_LEN.pack(len(key)) + key + _LEN.pack(len(value)))
                    mac.update(value)
                    if hmac.compare_digest(mac.digest(), raw[cut:]):
                        return value
        reason = self.check(domain, key, value, headers)
        if reason is None:
            return value
        if self.admits(reason, msg.timestamp()):
            self._count(domain, reason, msg, refused=False)
            return value
        self._count(domain, reason, msg, refused=True)
        return REFUSED

    def _count(self, domain: bytes, reason: str, msg: Any, refused: bool) -> None:
        name = domain.decode()
        metrics.METADATA_UNAUTHENTICATED.labels(name, reason, "refused" if refused else "folded").inc()
        now = time.monotonic()
        if now - self._logged.get(reason, -LOG_INTERVAL_S) >= LOG_INTERVAL_S:
            self._logged[reason] = now
            log.warning(
                "%s record %s@%s does not verify (%s): %s (further ones counted in "
                "processor_metadata_unauthenticated_total, logged once a minute)",
                name,
                msg.partition(),
                msg.offset(),
                reason,
                "refused, never folded" if refused else "folded (PROCESSOR_METADATA_AUTH is not require)",
            )

    def screener(self, domain: bytes) -> Callable[[Any], bytes | None]:
        """``screen`` bound to ``domain``: what a consumer loop calls per message."""
        if self.mode == "off":
            return _plain_value
        return lambda msg: self.screen(domain, msg)


def _plain_value(msg: Any) -> bytes | None:
    value: bytes | None = msg.value()
    return value


OFF = MetadataAuth()
_installed: MetadataAuth = OFF


def install(auth: MetadataAuth) -> None:
    """Make ``auth`` the process's policy: every writer signs and every reader screens by it
    (commands install it from their settings, :func:`processor.config.load_settings`)."""
    global _installed
    _installed = auth


def installed() -> MetadataAuth:
    return _installed


def from_settings(mode: str, keys: Path | None, unsigned_before_ms: int | None) -> MetadataAuth:
    ring = KeyRing.from_directory(keys) if mode != "off" and keys is not None else None
    return MetadataAuth(mode, ring, unsigned_before_ms)


def metadata_screener() -> Callable[[Any], bytes | None]:
    """The installed policy's screen for messages of the metadata topic."""
    return _installed.screener(DOMAIN_METADATA)
