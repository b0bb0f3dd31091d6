"""The readers' side of encryption at rest: an encrypted segment's data key, unwrapped once by the
key provider that wrapped it and kept for later reads, and the cipher that opens the segment's
index object and blocks (processor/segment/index_sealing.py, blocks_v3.py).

A segment is encrypted when its metadata carries a wrapped data key (KIP-405 custom metadata,
processor/crypto/keys.py ``WrappedKey``). Every reader (remote reads, the gateway, Spark, restore,
the audit, verify) opens blocks through here, so one place turns a key that cannot be had into a
``SegmentKeyError`` naming the segment, and a shredded topic into ``SegmentShreddedError``.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field

from processor.crypto.keys import EncryptionContext, KeyAccessError, KeyProvider, KeyShreddedError, WrappedKey
from processor.errors import FormatError, SegmentKeyError, SegmentShreddedError
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata
from processor.segment.blocks import is_encrypted_block
from processor.segment.blocks_v3 import open_block
from processor.segment.index_sealing import is_sealed_index, open_index

# Unwrapped keys kept (32 bytes each, plus the entry): enough for every segment a reader touches in
# a long scan, so a KMS Decrypt is paid once per segment, not once per read.
MAX_CACHED_KEYS = 16_384


def encryption_context(sid: RemoteLogSegmentId) -> EncryptionContext:
    """What a segment's data key is bound to (KMS encryption context, key-ring associated data)."""
    return EncryptionContext(
        topic=sid.topic,
        topic_id=str(sid.topic_id) if sid.topic_id is not None else "",
        partition=sid.partition,
        segment_id=str(sid.id),
    )


@dataclass(frozen=True, slots=True)
class SegmentCipher:
    """Opens one encrypted segment's index object and blocks."""

    key: bytes = field(repr=False)
    segment_id: uuid.UUID

    def open_index(self, raw: bytes, *, where: str) -> bytes:
        if not is_sealed_index(raw):
            raise FormatError(f"{where}: the segment is encrypted, its index object is not")
        return open_index(raw, self.key, self.segment_id, where=where)

    def open_block(self, block: memoryview, position: int, *, where: str) -> memoryview:
        """The block as it was before encryption (format 2), or FormatError."""
        if not is_encrypted_block(block):
            raise FormatError(f"{where}: the segment is encrypted, this block is not")
        return memoryview(open_block(block, self.key, self.segment_id, position, where=where))


class SegmentDecryption:
    """Data keys of encrypted segments, by the providers that wrapped them (``"keyring"``,
    ``"kms"``): only unwrapping is asked of them, so a reader needs Decrypt permission only."""

    def __init__(self, providers: Mapping[str, KeyProvider], max_keys: int = MAX_CACHED_KEYS) -> None:
        self._providers = dict(providers)
        self._max_keys = max_keys
        self._keys: OrderedDict[tuple[uuid.UUID, bytes], bytes] = OrderedDict()
        self._lock = threading.Lock()

    def cipher(self, segment: RemoteLogSegmentMetadata) -> SegmentCipher | None:
        """None for a segment stored in the clear; else its cipher. Raises SegmentKeyError
        (SegmentShreddedError for a shredded topic)."""
        return self.cipher_for(segment.segment_id, segment.custom_metadata)

    def cipher_for(self, sid: RemoteLogSegmentId, blob: bytes | None) -> SegmentCipher | None:
        """``cipher`` from a segment's id and custom metadata (what a Spark slice carries)."""
        if blob is None:
            return None
        name = str(sid)
        try:
            wrapped = WrappedKey.decode(blob, where=f"custom metadata of {name}")
        except FormatError as exc:
            raise SegmentKeyError(f"its wrapped data key is malformed: {exc}", segment=name) from exc
        cache_key = (sid.id, blob)
        with self._lock:
            key = self._keys.get(cache_key)
            if key is not None:
                self._keys.move_to_end(cache_key)
                return SegmentCipher(key, sid.id)
        key = self._unwrap(sid, wrapped, name)
        with self._lock:
            self._keys[cache_key] = key
            while len(self._keys) > self._max_keys:
                self._keys.popitem(last=False)
        return SegmentCipher(key, sid.id)

    def _unwrap(self, sid: RemoteLogSegmentId, wrapped: WrappedKey, name: str) -> bytes:
        topic = sid.topic
        provider = self._providers.get(wrapped.provider)
        if provider is None:
            raise SegmentKeyError(
                f"the segment is encrypted under {wrapped.provider} key {wrapped.key_id!r} and this "
                f"reader has no {wrapped.provider} key provider (set "
                f"{'PROCESSOR_ENCRYPTION_KEYRING' if wrapped.provider == 'keyring' else 'the KMS settings'})",
                segment=name,
                topic=topic,
            )
        try:
            return provider.unwrap(wrapped, encryption_context(sid))
        except KeyShreddedError as exc:
            raise SegmentShreddedError(f"the topic was shredded: {exc}", segment=name, topic=topic) from exc
        except KeyAccessError as exc:
            raise SegmentKeyError(
                f"its data key cannot be unwrapped: {exc}", segment=name, topic=topic
            ) from exc


NO_DECRYPTION = SegmentDecryption({})
