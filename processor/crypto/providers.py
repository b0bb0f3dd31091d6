"""Every key provider a process may unwrap with, from plain settings values (the worker's settings
or a Spark source's options): the key ring when its directory is given, KMS always (a reader needs
no key id to unwrap, only kms:Decrypt on the key that wrapped)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from processor.crypto.keyring import KeyringProvider
from processor.crypto.keys import DataKey, EncryptionContext, KeyProvider, WrappedKey
from processor.crypto.kms import KmsProvider, kms_client


class LazyProvider(KeyProvider):
    """Builds its provider on first use: a KMS client costs ~0.2 s to make (boto3 loads the service
    model), which a process that never meets a KMS-encrypted segment should not pay."""

    def __init__(self, name: str, build: Callable[[], KeyProvider]) -> None:
        self.name = name  # type: ignore[misc]
        self._build = build
        self._provider: KeyProvider | None = None
        self._lock = threading.Lock()

    def _get(self) -> KeyProvider:
        with self._lock:
            if self._provider is None:
                self._provider = self._build()
            return self._provider

    def new_data_key(self, ctx: EncryptionContext) -> DataKey:
        return self._get().new_data_key(ctx)

    def unwrap(self, wrapped: WrappedKey, ctx: EncryptionContext) -> bytes:
        return self._get().unwrap(wrapped, ctx)

    def rewrap(self, wrapped: WrappedKey, ctx: EncryptionContext) -> WrappedKey:
        return self._get().rewrap(wrapped, ctx)

    def current_key_id(self, topic: str, topic_id: str = "") -> str:
        return self._get().current_key_id(topic, topic_id)

    def shred_topic(self, topic: str) -> str:
        return self._get().shred_topic(topic)


def key_providers(
    keyring: Path | None,
    region: str | None,
    kms_key_id: str | None = None,
    kms_topic_key_ids: Mapping[str, str] | None = None,
) -> dict[str, KeyProvider]:
    """By provider name. KMS is reached in ``region`` (or the AWS default), at AWS_ENDPOINT_URL_KMS
    when that is set (boto3 reads it), e.g. a test server."""
    topic_keys = dict(kms_topic_key_ids or {})
    providers: dict[str, KeyProvider] = {
        "kms": LazyProvider(
            "kms", lambda: KmsProvider(kms_client(region, None), kms_key_id or None, topic_keys)
        )
    }
    if keyring is not None:
        providers["keyring"] = KeyringProvider(keyring)
    return providers
