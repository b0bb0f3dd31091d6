"""Key providers: the interface, the encryption context and the wrapped-key record.

Envelope encryption at rest: every segment is sealed under a fresh AES-256 data key (32 random
bytes). The data key is never stored in plaintext: a :class:`KeyProvider` wraps it under a key
encryption key (a key-ring file, or a KMS key) bound to the segment's :class:`EncryptionContext`,
and the :class:`WrappedKey` record (``WrappedKey.encode()``) goes into the segment's KIP-405 custom
metadata. Reading the segment back asks the same provider to unwrap it with the same context.

Pure core: no storage, metadata, Kafka client or role is imported here.
"""

from __future__ import annotations

import abc
import json
import struct
from dataclasses import dataclass, field
from typing import ClassVar

from processor.errors import FormatError, ProcessorError

DATA_KEY_BYTES = 32  # AES-256
PROVIDERS = ("keyring", "kms")

# WrappedKey.encode(): see WrappedKey's docstring
WRAPPED_MAGIC = b"KTSK"
WRAPPED_VERSION = 1
WRAPPED_MAX_BYTES = 1024
WRAPPED_MAX_KEY_ID = 512
_PROVIDER_CODES = {"keyring": 1, "kms": 2}
_PROVIDER_NAMES = {code: name for name, code in _PROVIDER_CODES.items()}
_HEADER = struct.Struct(">4sBBH")  # magic, version, provider, key_id_len
_U16 = struct.Struct(">H")
_FIXED_BYTES = _HEADER.size + _U16.size  # 10: everything but the key id and the blob


def key_scope(topic: str, topic_id: str = "") -> str:
    """Whose key: ``topic``, or ``topic@topic_id`` for one topic id (a re-created topic's earlier
    incarnation can have keys of its own, and be shredded alone)."""
    return f"{topic}@{topic_id}" if topic_id else topic


# --- errors -------------------------------------------------------------------------------------


class KeyConfigError(ProcessorError):
    """The key configuration cannot serve the request: a malformed key file, no key for a topic,
    shredding a topic that has no key of its own, a wrapped key of another provider."""


class KeyAccessError(ProcessorError):
    """A data key cannot be wrapped or unwrapped: permission denied, unknown or disabled key,
    a blob that does not unwrap under the key with this context (tampered, or another segment's).
    The message names the key id and the context. ``retriable`` when the key service was only
    unreachable or throttling (the same call may succeed later)."""

    def __init__(
        self,
        message: str,
        *,
        key_id: str | None = None,
        context: EncryptionContext | None = None,
        retriable: bool = False,
    ) -> None:
        parts = [message]
        if key_id:
            parts.append(f"key={key_id}")
        if context is not None:
            parts.append(context.describe())
        super().__init__("; ".join(parts))
        self.key_id = key_id
        self.context = context
        self.retriable = retriable


class KeyShreddedError(KeyAccessError):
    """The key was destroyed on purpose (``shred_topic``): what it wrapped is gone for good."""


# --- context and records -------------------------------------------------------------------------


@dataclass(frozen=True)
class EncryptionContext:
    """What a data key is bound to: wrapping authenticates it, so a wrapped key only unwraps for
    the segment it was made for (copying it into another segment's metadata does not work)."""

    topic: str
    topic_id: str
    partition: int
    segment_id: str

    def as_kms(self) -> dict[str, str]:
        """The KMS EncryptionContext (string values only)."""
        return {
            "topic": self.topic,
            "topic_id": self.topic_id,
            "partition": str(self.partition),
            "segment": self.segment_id,
        }

    def aad(self) -> bytes:
        """Canonical associated data: the KMS context as sorted-key, compact JSON in UTF-8."""
        return json.dumps(self.as_kms(), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
            "utf-8"
        )

    def describe(self) -> str:
        return (
            f"topic={self.topic} topic_id={self.topic_id} partition={self.partition} "
            f"segment={self.segment_id}"
        )


@dataclass(frozen=True)
class WrappedKey:
    """A data key wrapped by a provider; ``encode()`` is what the segment's metadata holds.

    Byte layout (big-endian), version 1::

        offset  size  field
        0       4     magic b"KTSK"
        4       1     version (u8) = 1
        5       1     provider (u8): 1 = keyring, 2 = kms
        6       2     key_id_len (u16), 1..512
        8       n     key_id, UTF-8 (the key-ring key id, or the KMS key id / key ARN)
        8+n     2     blob_len (u16), >= 1
        10+n    m     blob: the provider's wrapped data key (keyring: nonce + AES-GCM ciphertext;
                      kms: the CiphertextBlob)

    Nothing follows the blob; the whole record is at most 1024 bytes. ``decode`` checks every
    field and raises only :class:`processor.errors.FormatError` (naming ``where``).
    """

    provider: str
    key_id: str
    blob: bytes = field(repr=False)

    def __post_init__(self) -> None:
        problem = _record_problem(self.provider, self.key_id, self.blob)
        if problem:
            raise ValueError(f"invalid WrappedKey: {problem}")

    def __repr__(self) -> str:
        return (
            f"WrappedKey(provider={self.provider!r}, key_id={self.key_id!r}, blob=<{len(self.blob)} bytes>)"
        )

    def encode(self) -> bytes:
        key_id = self.key_id.encode("utf-8")
        return b"".join(
            (
                _HEADER.pack(WRAPPED_MAGIC, WRAPPED_VERSION, _PROVIDER_CODES[self.provider], len(key_id)),
                key_id,
                _U16.pack(len(self.blob)),
                self.blob,
            )
        )

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview, *, where: str) -> WrappedKey:
        """Parse ``encode()``'s bytes; ``where`` names the record in errors (segment, object)."""

        def bad(what: str) -> FormatError:
            return FormatError(f"wrapped data key of {where}: {what}")

        data = bytes(data)
        if len(data) > WRAPPED_MAX_BYTES:
            raise bad(f"{len(data)} bytes, more than the {WRAPPED_MAX_BYTES} allowed")
        if len(data) < _FIXED_BYTES:
            raise bad(f"truncated: {len(data)} bytes, a record has at least {_FIXED_BYTES + 2}")
        magic, version, code, key_id_len = _HEADER.unpack_from(data, 0)
        if magic != WRAPPED_MAGIC:
            raise bad(f"bad magic {magic!r} (expected {WRAPPED_MAGIC!r})")
        if version != WRAPPED_VERSION:
            raise bad(f"unknown version {version} (this build reads version {WRAPPED_VERSION})")
        provider = _PROVIDER_NAMES.get(code)
        if provider is None:
            raise bad(f"unknown provider code {code} (known: 1 keyring, 2 kms)")
        if not 1 <= key_id_len <= WRAPPED_MAX_KEY_ID:
            raise bad(f"key id length {key_id_len} outside 1..{WRAPPED_MAX_KEY_ID}")
        blob_len_at = _HEADER.size + key_id_len
        if len(data) < blob_len_at + _U16.size:
            raise bad(f"truncated: {len(data)} bytes, the key id and blob length need {blob_len_at + 2}")
        try:
            key_id = data[_HEADER.size : blob_len_at].decode("utf-8")
        except UnicodeDecodeError:
            raise bad("key id is not UTF-8") from None
        (blob_len,) = _U16.unpack_from(data, blob_len_at)
        blob_at = blob_len_at + _U16.size
        if blob_len == 0:
            raise bad("empty blob")
        if len(data) != blob_at + blob_len:
            raise bad(f"{len(data)} bytes, the blob length says {blob_at + blob_len}")
        blob = data[blob_at:]
        problem = _record_problem(provider, key_id, blob)
        if problem:
            raise bad(problem)
        return cls(provider, key_id, blob)


def _record_problem(provider: str, key_id: str, blob: bytes) -> str | None:
    if provider not in _PROVIDER_CODES:
        return f"unknown provider {provider!r} (known: {', '.join(PROVIDERS)})"
    if not isinstance(key_id, str) or not key_id or not key_id.isprintable() or key_id != key_id.strip():
        return f"key id {key_id!r} is empty or has blanks or control characters"
    if len(key_id.encode("utf-8")) > WRAPPED_MAX_KEY_ID:
        return f"key id longer than {WRAPPED_MAX_KEY_ID} bytes"
    if not isinstance(blob, bytes) or not blob:
        return "empty blob"
    total = _FIXED_BYTES + len(key_id.encode("utf-8")) + len(blob)
    if total > WRAPPED_MAX_BYTES:
        return f"record of {total} bytes, more than the {WRAPPED_MAX_BYTES} allowed"
    return None


@dataclass(frozen=True)
class DataKey:
    """A fresh data key: the plaintext (never stored, never shown in a repr) and its wrapping."""

    plaintext: bytes = field(repr=False)
    wrapped: WrappedKey

    def __post_init__(self) -> None:
        if not isinstance(self.plaintext, bytes) or len(self.plaintext) != DATA_KEY_BYTES:
            raise ValueError(f"a data key is {DATA_KEY_BYTES} bytes")

    def __repr__(self) -> str:
        return f"DataKey(plaintext=<{DATA_KEY_BYTES} bytes hidden>, wrapped={self.wrapped!r})"


# --- the interface --------------------------------------------------------------------------------


class KeyProvider(abc.ABC):
    """Wraps and unwraps data keys under key encryption keys it holds or reaches.

    Every topic is served by its own key when one is configured for it, else by the current
    default key. Implementations are safe to call from several threads.
    """

    name: ClassVar[str]

    @abc.abstractmethod
    def new_data_key(self, ctx: EncryptionContext) -> DataKey:
        """32 fresh random bytes, wrapped under ``current_key_id(ctx.topic)`` bound to ``ctx``."""

    @abc.abstractmethod
    def unwrap(self, wrapped: WrappedKey, ctx: EncryptionContext) -> bytes:
        """The 32-byte data key. :class:`KeyShreddedError` when its key was shredded,
        :class:`KeyAccessError` when it cannot be unwrapped (unknown key, no permission, another
        context, tampered bytes), :class:`KeyConfigError` for another provider's record."""

    @abc.abstractmethod
    def rewrap(self, wrapped: WrappedKey, ctx: EncryptionContext) -> WrappedKey:
        """The same data key wrapped under the topic's current key; ``wrapped`` itself (the same
        object) when it is already under it."""

    @abc.abstractmethod
    def current_key_id(self, topic: str, topic_id: str = "") -> str:
        """The key new data keys of ``topic`` (of topic id ``topic_id``) are wrapped under: the
        key of that topic id's own (scope ``topic@topic_id``), else the topic's own, else the
        default."""

    @abc.abstractmethod
    def shred_topic(self, scope: str) -> str:
        """Destroy the keys of ``scope`` (a topic, or ``topic@topic_id``: one incarnation of a
        re-created topic): every data key they wrapped becomes unreadable. Returns the newest
        destroyed key id. :class:`KeyConfigError` when the scope has no key of its own: shredding
        a shared key would shred every topic using it."""

    def _check_provider(self, wrapped: WrappedKey, ctx: EncryptionContext) -> None:
        if wrapped.provider != self.name:
            raise KeyConfigError(
                f"the data key was wrapped by the {wrapped.provider} provider (key {wrapped.key_id}), "
                f"but the {self.name} provider is configured; {ctx.describe()}"
            )
