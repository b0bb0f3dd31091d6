"""Key providers from the settings: what new segments are sealed under (PROCESSOR_ENCRYPTION), and
what readers may unwrap with (every provider configured, whatever new segments get, so segments
written under an earlier setting stay readable)."""

from __future__ import annotations

from processor.config import Settings
from processor.crypto.keys import KeyConfigError, KeyProvider, KeyShreddedError
from processor.crypto.providers import key_providers
from processor.errors import ConfigError
from processor.reader.segment_keys import SegmentDecryption


def providers(settings: Settings) -> dict[str, KeyProvider]:
    return key_providers(
        settings.encryption_keyring, settings.s3_region, settings.kms_key_id, dict(settings.kms_topic_key_ids)
    )


def segment_encryption(settings: Settings) -> KeyProvider | None:
    """The provider new segments are sealed under; None with PROCESSOR_ENCRYPTION=none."""
    if settings.encryption == "none":
        return None
    provider = providers(settings).get(settings.encryption)
    if provider is None:  # the settings' own checks make this unreachable; say so if not
        raise KeyConfigError(f"PROCESSOR_ENCRYPTION={settings.encryption} has no key provider configured")
    return provider


def segment_decryption(settings: Settings) -> SegmentDecryption:
    return SegmentDecryption(providers(settings))


def require_encryption_keys(settings: Settings) -> None:
    """Every topic the worker offloads has a key to wrap its data keys under (a key ring without a
    default key, or a shredded topic without a new key, failed each copy instead: a worker that
    never archives). No network: a KMS key's existence is KMS's to say at the first copy."""
    topic = ""
    try:
        provider = segment_encryption(settings)
        if provider is None:
            return
        for topic in settings.topics:
            provider.current_key_id(topic)
    except (KeyConfigError, KeyShreddedError) as exc:
        whose = f"no key for topic {topic}" if topic else "no key provider"
        raise ConfigError(f"PROCESSOR_ENCRYPTION={settings.encryption}: {whose}: {exc}") from None
