"""The data path's storage and the readiness probe's, from the settings: S3 (built by
:func:`processor.storage.s3.s3_storage`), Google Cloud Storage (:mod:`processor.storage.gcs`) or
Azure Blob Storage (:mod:`processor.storage.azure`) as ``PROCESSOR_STORAGE`` says. The clouds'
clients are the ``gcs`` and ``azure`` extras, imported only when chosen."""

from __future__ import annotations

from typing import Any

from processor.config import Settings
from processor.errors import ConfigError
from processor.probes import PROBE_CONNECT_TIMEOUT_S, PROBE_READ_TIMEOUT_S
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.s3 import s3_storage

# A GCS resumable upload's chunks are multiples of 256 KiB.
_GCS_QUANTUM = 256 * 1024


def build_storage(settings: Settings, *, probe: bool = False, read_threads: int = 0) -> ChunkStorage:
    """The data path's storage client, or (``probe``) a small one with short timeouts and no SDK
    retries for the readiness probe (see processor/probes.py). ``read_threads``: threads that read
    through it at once; its connection pool holds one connection for each (a pool smaller than the
    readers closed a connection after nearly every read and opened another: a TCP connect per
    ranged GET)."""
    tuning: dict[str, Any] = {
        "part_size": settings.s3_part_bytes,
        "multipart_threshold": settings.s3_part_bytes,
        "max_concurrency": max(settings.s3_upload_concurrency, read_threads),
    }
    if probe:
        tuning.update(
            max_concurrency=1,
            connect_timeout_s=PROBE_CONNECT_TIMEOUT_S,
            read_timeout_s=PROBE_READ_TIMEOUT_S,
            max_attempts=1,
        )
    if settings.storage == "gcs":
        return _gcs(settings, tuning)
    if settings.storage == "azure":
        return _azure(settings, tuning)
    tuning.update(
        sse=None if settings.s3_sse == "none" else settings.s3_sse,
        sse_kms_key_id=settings.s3_sse_kms_key_id,
        sse_bucket_key=settings.s3_sse_bucket_key,
    )
    return s3_storage(settings.s3_bucket, settings.s3_endpoint_url, settings.s3_region, **tuning)


def _missing_extra(extra: str) -> ConfigError:
    return ConfigError(
        f"PROCESSOR_STORAGE={extra} needs its client: pip install 'kafka-tiered-processor[{extra}]'"
    )


def _gcs(settings: Settings, tuning: dict[str, Any]) -> ChunkStorage:
    try:
        from processor.storage.gcs import gcs_storage
    except ImportError:
        raise _missing_extra("gcs") from None
    assert settings.gcs_bucket is not None  # the settings' own check
    tuning["part_size"] -= tuning["part_size"] % _GCS_QUANTUM
    return gcs_storage(
        settings.gcs_bucket,
        settings.gcs_endpoint_url,
        project=settings.gcs_project,
        credentials_file=str(settings.gcs_credentials_file) if settings.gcs_credentials_file else None,
        anonymous=settings.gcs_anonymous,
        **tuning,
    )


def _azure(settings: Settings, tuning: dict[str, Any]) -> ChunkStorage:
    try:
        from processor.storage.azure import azure_storage
    except ImportError:
        raise _missing_extra("azure") from None
    assert settings.azure_container is not None  # the settings' own check
    return azure_storage(
        settings.azure_container,
        settings.azure_account_url,
        connection_string=_secret(settings.azure_connection_string),
        account_key=_secret(settings.azure_account_key),
        sas_token=_secret(settings.azure_sas_token),
        **tuning,
    )


def _secret(value: Any) -> str | None:
    return None if value is None else str(value.get_secret_value())
