"""A key ring in a local directory: key encryption keys for development and on-premises use.

Layout of the directory::

    <dir>/<key_id>.key           one key encryption key per file, mode 0600, JSON:
                                 {"version": 1, "key_id": "k-...", "created_ms": <int>,
                                  "topic": null | "<topic>", "material": "<base64 of 32 random bytes>"}
    <dir>/shredded/<topic>.json  a tombstone per shredded topic, JSON:
                                 {"topic": "<topic>", "key_ids": ["k-...", ...], "shredded_ms": <int>}
    <dir>/<topic>.shredded       the same tombstone at the top, for a ring kept where folders cannot
                                 be (a Kubernetes Secret): read, never written here

The default key is the newest key file (by ``created_ms``, then ``key_id``) whose ``topic`` is null;
a topic's own key is the newest whose ``topic`` is that topic. New data keys are wrapped under the
topic's own key when it has one, else under the default key. Older keys stay in the directory so
that the data keys they wrapped still unwrap (``rewrap`` moves a data key to the current key).

Wrapping: ``blob = nonce + AESGCM(material).encrypt(nonce, data_key, ctx.aad())`` with a random
12-byte nonce, so a blob only unwraps for the segment context it was made for.

``shred_topic`` writes the tombstone first, then deletes the topic's key files: a data key wrapped
under a tombstoned key id raises :class:`KeyShreddedError`. The deletion is only as final as the
file system and its backups make it.

Key files are created by :func:`new_key` (``processor`` tooling or by hand, with the same format).
The directory is read again whenever its listing changes, so keys added by another process are
seen without a restart. Key material never appears in logs, reprs or error messages.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import logging
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from processor.crypto.keys import (
    DATA_KEY_BYTES,
    DataKey,
    EncryptionContext,
    KeyAccessError,
    KeyConfigError,
    KeyProvider,
    KeyShreddedError,
    WrappedKey,
    key_scope,
)
from processor.errors import InvalidNameError

log = logging.getLogger(__name__)

KEY_FILE_VERSION = 1
KEY_SUFFIX = ".key"
SHREDDED_DIR = "shredded"
SHREDDED_SUFFIX = ".shredded"
NONCE_BYTES = 12
TAG_BYTES = 16
BLOB_BYTES = NONCE_BYTES + DATA_KEY_BYTES + TAG_BYTES
MAX_KEY_FILE_BYTES = 64 * 1024
_KEY_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}(@[A-Za-z0-9_-]{1,64})?")  # a key scope: topic[@topic id]


@dataclass(frozen=True)
class _Key:
    key_id: str
    created_ms: int
    topic: str | None
    material: bytes = field(repr=False)


@dataclass(frozen=True)
class _Tombstone:
    topic: str
    key_ids: tuple[str, ...]
    shredded_ms: int


def _check_topic(topic: str) -> str:
    """A key's scope: a Kafka topic name, or ``topic@topic_id``."""
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic.split("@")[0] in {".", ".."}:
        raise InvalidNameError(f"not a valid Kafka topic name (or topic@topic-id) for a key: {topic!r}")
    return topic


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _write_atomically(path: Path, payload: bytes, mode: int = 0o600) -> None:
    """Write ``payload`` to a temporary file beside ``path`` (created with ``mode``), fsync it,
    and rename it into place; then fsync the directory."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def _fsync_dir(directory: Path) -> None:
    with contextlib.suppress(OSError):
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def new_key(directory: Path, topic: str | None = None) -> str:
    """Create a key file in ``directory`` (created if missing, mode 0700): the new default key,
    or the own key of ``topic`` (a topic, or ``topic@topic_id``: one topic id of the name). Returns
    the new key id, ``k-<UTC timestamp>-<random hex>``."""
    if topic is not None:
        _check_topic(topic)
    directory = Path(directory)
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    except OSError as exc:
        raise KeyConfigError(f"cannot create the key ring directory {directory}: {exc}") from None
    created_ms = _now_ms()
    stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(created_ms / 1000))
    key_id = f"k-{stamp}{created_ms % 1000:03d}Z-{secrets.token_hex(6)}"
    record = {
        "version": KEY_FILE_VERSION,
        "key_id": key_id,
        "created_ms": created_ms,
        "topic": topic,
        "material": base64.b64encode(secrets.token_bytes(DATA_KEY_BYTES)).decode("ascii"),
    }
    path = directory / f"{key_id}{KEY_SUFFIX}"
    if path.exists():  # 48 random bits: never in practice
        raise KeyConfigError(f"key file {path} already exists")
    try:
        _write_atomically(path, json.dumps(record, indent=2).encode("utf-8") + b"\n")
    except OSError as exc:
        raise KeyConfigError(f"cannot write key file {path}: {exc.strerror or exc}") from None
    log.info("created key %s (%s) in %s", key_id, f"topic {topic}" if topic else "default", directory)
    return key_id


def _load_json(path: Path, what: str) -> dict[str, Any]:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_KEY_FILE_BYTES + 1)
    except OSError as exc:
        raise KeyConfigError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    if len(raw) > MAX_KEY_FILE_BYTES:
        raise KeyConfigError(f"malformed {what} {path}: larger than {MAX_KEY_FILE_BYTES} bytes")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        # the message of a JSON error may quote the file's text: the key material
        raise KeyConfigError(f"malformed {what} {path}: not a JSON document") from None
    if not isinstance(doc, dict):
        raise KeyConfigError(f"malformed {what} {path}: not a JSON object")
    return doc


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _parse_key(path: Path) -> _Key:
    doc = _load_json(path, "key file")

    def bad(what: str) -> KeyConfigError:
        return KeyConfigError(f"malformed key file {path}: {what}")

    if doc.get("version") != KEY_FILE_VERSION:
        raise bad(f"version {doc.get('version')!r}, this build reads version {KEY_FILE_VERSION}")
    key_id = doc.get("key_id")
    if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
        raise bad("key_id missing or not [A-Za-z0-9._-]")
    if path.name != f"{key_id}{KEY_SUFFIX}":
        raise bad(f"key_id {key_id!r} does not match the file name")
    created_ms = doc.get("created_ms")
    if not _is_int(created_ms):
        raise bad("created_ms missing or not a non-negative integer")
    assert isinstance(created_ms, int)
    topic = doc.get("topic")
    if topic is not None and (not isinstance(topic, str) or not _TOPIC.fullmatch(topic)):
        raise bad("topic is neither null nor a valid topic name")
    material_b64 = doc.get("material")
    if not isinstance(material_b64, str):
        raise bad("material missing or not a base64 string")
    try:
        material = base64.b64decode(material_b64, validate=True)
    except (binascii.Error, ValueError):
        raise bad("material is not valid base64") from None
    if len(material) != DATA_KEY_BYTES:
        raise bad(f"material is {len(material)} bytes, a key is {DATA_KEY_BYTES}")
    extra = set(doc) - {"version", "key_id", "created_ms", "topic", "material"}
    if extra:
        raise bad(f"unknown fields {sorted(extra)}")
    return _Key(key_id, created_ms, topic, material)


def _parse_tombstone(path: Path) -> _Tombstone:
    doc = _load_json(path, "shred tombstone")

    def bad(what: str) -> KeyConfigError:
        return KeyConfigError(f"malformed shred tombstone {path}: {what}")

    topic = doc.get("topic")
    if not isinstance(topic, str) or path.name not in (f"{topic}.json", f"{topic}{SHREDDED_SUFFIX}"):
        raise bad("topic missing or does not match the file name")
    key_ids = doc.get("key_ids")
    if not isinstance(key_ids, list) or not all(isinstance(k, str) and k for k in key_ids):
        raise bad("key_ids is not a list of key ids")
    shredded_ms = doc.get("shredded_ms")
    if not _is_int(shredded_ms):
        raise bad("shredded_ms missing or not a non-negative integer")
    assert isinstance(shredded_ms, int)
    return _Tombstone(topic, tuple(key_ids), shredded_ms)


_Stamp = tuple[int, int, int]  # (st_ino, st_mtime_ns, st_size) of a file when it was parsed


class KeyringProvider(KeyProvider):
    """Key encryption keys from a directory of key files (see the module's docstring)."""

    name: ClassVar[str] = "keyring"

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[_Stamp, _Key]] = {}  # by file name
        self._tombstones: dict[str, tuple[_Stamp, _Tombstone]] = {}  # by file name
        self._flat_tombstones: dict[str, tuple[_Stamp, _Tombstone]] = {}  # <topic>.shredded files
        self._warned_modes: set[str] = set()
        if not self.directory.is_dir():
            raise KeyConfigError(f"the key ring directory {self.directory} does not exist")

    def __repr__(self) -> str:
        return f"KeyringProvider({str(self.directory)!r})"

    # --- reading the directory

    def _scan(self) -> tuple[dict[str, _Key], dict[str, _Tombstone]]:
        """The keys (by key id) and tombstones (by topic) now in the directory; files unchanged
        since the last scan are not parsed again."""
        with self._lock:
            self._keys = self._refresh(self.directory, KEY_SUFFIX, self._keys, self._parse_key_file)
            shredded = self.directory / SHREDDED_DIR
            self._tombstones = self._refresh(shredded, ".json", self._tombstones, _parse_tombstone)
            self._flat_tombstones = self._refresh(
                self.directory, SHREDDED_SUFFIX, self._flat_tombstones, _parse_tombstone
            )
            keys = {k.key_id: k for _, k in self._keys.values()}
            tombstones = {
                t.topic: t for _, t in (*self._flat_tombstones.values(), *self._tombstones.values())
            }
        return keys, tombstones

    @staticmethod
    def _refresh(
        directory: Path, suffix: str, cache: dict[str, tuple[_Stamp, Any]], parse: Any
    ) -> dict[str, tuple[_Stamp, Any]]:
        try:
            names = [n for n in os.listdir(directory) if n.endswith(suffix) and not n.startswith(".")]
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise KeyConfigError(f"cannot list the key ring directory {directory}: {exc}") from None
        fresh: dict[str, tuple[_Stamp, Any]] = {}
        for name in names:
            path = directory / name
            try:
                st = path.stat()
            except FileNotFoundError:  # deleted meanwhile (a shred)
                continue
            except OSError as exc:
                raise KeyConfigError(f"cannot read key ring file {path}: {exc}") from None
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
            cached = cache.get(name)
            fresh[name] = cached if cached is not None and cached[0] == stamp else (stamp, parse(path))
        return fresh

    def _parse_key_file(self, path: Path) -> _Key:
        key = _parse_key(path)
        with contextlib.suppress(OSError):
            mode = stat.S_IMODE(path.stat().st_mode)
            if mode & 0o077 and path.name not in self._warned_modes:
                self._warned_modes.add(path.name)
                log.warning("key file %s is readable by others (mode %o); it should be 0600", path, mode)
        return key

    @staticmethod
    def _newest(keys: dict[str, _Key], topic: str | None, shredded: set[str]) -> _Key | None:
        candidates = [k for k in keys.values() if k.topic == topic and k.key_id not in shredded]
        return max(candidates, key=lambda k: (k.created_ms, k.key_id), default=None)

    def _current(
        self, topic: str, keys: dict[str, _Key], tombstones: dict[str, _Tombstone], topic_id: str = ""
    ) -> _Key:
        # a key both on file and in a tombstone: a shred that stopped before deleting it
        shredded = {key_id for t in tombstones.values() for key_id in t.key_ids}
        for scope in ([key_scope(topic, topic_id)] if topic_id else []) + [topic]:
            own = self._newest(keys, scope, shredded)
            if own is not None:
                return own
            if scope in tombstones:
                # never fall back to a wider key silently: the scope was meant to be unreadable
                raise KeyShreddedError(
                    f"{scope}'s key was shredded and it has no new key of its own; create one "
                    f"(processor keyring new --topic {scope}) before writing it again",
                    key_id=", ".join(tombstones[scope].key_ids),
                )
        default = self._newest(keys, None, shredded)
        if default is None:
            raise KeyConfigError(
                f"the key ring {self.directory} holds no default key (a key file with topic null) "
                f"and topic {topic} has no key of its own"
            )
        return default

    def default_keys(self) -> dict[str, tuple[int, bytes]]:
        """Every default key (topic null) now in the directory, by key id: its ``created_ms`` and its
        material (the metadata authenticator's keys, :mod:`processor.metadata.authentication`)."""
        keys, _tombstones = self._scan()
        return {k.key_id: (k.created_ms, k.material) for k in keys.values() if k.topic is None}

    # --- KeyProvider

    def current_key_id(self, topic: str, topic_id: str = "") -> str:
        keys, tombstones = self._scan()
        return self._current(topic, keys, tombstones, topic_id).key_id

    def new_data_key(self, ctx: EncryptionContext) -> DataKey:
        keys, tombstones = self._scan()
        key = self._current(ctx.topic, keys, tombstones, ctx.topic_id)
        plaintext = secrets.token_bytes(DATA_KEY_BYTES)
        return DataKey(plaintext, self._wrap(key, plaintext, ctx))

    def unwrap(self, wrapped: WrappedKey, ctx: EncryptionContext) -> bytes:
        self._check_provider(wrapped, ctx)
        keys, tombstones = self._scan()
        return self._unwrap(wrapped, ctx, keys, tombstones)

    def rewrap(self, wrapped: WrappedKey, ctx: EncryptionContext) -> WrappedKey:
        self._check_provider(wrapped, ctx)
        keys, tombstones = self._scan()
        current = self._current(ctx.topic, keys, tombstones, ctx.topic_id)
        if wrapped.key_id == current.key_id:
            return wrapped
        plaintext = self._unwrap(wrapped, ctx, keys, tombstones)
        return self._wrap(current, plaintext, ctx)

    def shred_topic(self, topic: str) -> str:
        """``topic``: a scope, a topic or ``topic@topic_id`` (see :meth:`KeyProvider.shred_topic`)."""
        _check_topic(topic)
        keys, tombstones = self._scan()
        own = sorted((k for k in keys.values() if k.topic == topic), key=lambda k: (k.created_ms, k.key_id))
        if not own:
            already = " (it was shredded before)" if topic in tombstones else ""
            raise KeyConfigError(
                f"topic {topic} has no key of its own in {self.directory}{already}: its data keys are "
                f"wrapped under the shared default key, and shredding that would shred every topic"
            )
        shredded = self.directory / SHREDDED_DIR
        earlier = tombstones[topic].key_ids if topic in tombstones else ()
        key_ids = list(dict.fromkeys([*earlier, *(k.key_id for k in own)]))
        tombstone = {"topic": topic, "key_ids": key_ids, "shredded_ms": _now_ms()}
        try:
            shredded.mkdir(mode=0o700, exist_ok=True)
            # the tombstone first: a crash before the deletions still refuses these keys
            _write_atomically(shredded / f"{topic}.json", json.dumps(tombstone, indent=2).encode() + b"\n")
            for key in own:
                with contextlib.suppress(FileNotFoundError):
                    (self.directory / f"{key.key_id}{KEY_SUFFIX}").unlink()
        except OSError as exc:
            raise KeyConfigError(
                f"shredding topic {topic} in {self.directory} failed (run it again): {exc}"
            ) from None
        _fsync_dir(self.directory)
        log.warning("shredded topic %s: deleted keys %s", topic, ", ".join(k.key_id for k in own))
        return own[-1].key_id

    # --- wrapping

    def _wrap(self, key: _Key, plaintext: bytes, ctx: EncryptionContext) -> WrappedKey:
        nonce = secrets.token_bytes(NONCE_BYTES)
        blob = nonce + AESGCM(key.material).encrypt(nonce, plaintext, ctx.aad())
        return WrappedKey(self.name, key.key_id, blob)

    def _unwrap(
        self,
        wrapped: WrappedKey,
        ctx: EncryptionContext,
        keys: dict[str, _Key],
        tombstones: dict[str, _Tombstone],
    ) -> bytes:
        for tombstone in tombstones.values():
            if wrapped.key_id in tombstone.key_ids:
                raise KeyShreddedError(
                    f"the key was shredded with topic {tombstone.topic} "
                    f"(at {tombstone.shredded_ms} ms): the data key is gone for good",
                    key_id=wrapped.key_id,
                    context=ctx,
                )
        key = keys.get(wrapped.key_id)
        if key is None:
            raise KeyAccessError(
                f"unknown key: no key file {wrapped.key_id}{KEY_SUFFIX} in {self.directory}",
                key_id=wrapped.key_id,
                context=ctx,
            )
        if len(wrapped.blob) != BLOB_BYTES:
            raise KeyAccessError(
                f"the wrapped key is {len(wrapped.blob)} bytes, a key-ring blob is {BLOB_BYTES}",
                key_id=wrapped.key_id,
                context=ctx,
            )
        nonce, sealed = wrapped.blob[:NONCE_BYTES], wrapped.blob[NONCE_BYTES:]
        try:
            return AESGCM(key.material).decrypt(nonce, sealed, ctx.aad())
        except InvalidTag:
            raise KeyAccessError(
                "the data key does not unwrap under this key with this context: the record was "
                "tampered with or belongs to another segment",
                key_id=wrapped.key_id,
                context=ctx,
            ) from None
