"""The data path's S3 storage and the readiness probe's, from the settings (built by
:func:`processor.storage.s3.s3_storage`)."""

from __future__ import annotations

from typing import Any

from processor.config import Settings
from processor.probes import PROBE_CONNECT_TIMEOUT_S, PROBE_READ_TIMEOUT_S
from processor.storage.s3 import S3ChunkStorage, s3_storage


def build_storage(settings: Settings, *, probe: bool = False, read_threads: int = 0) -> S3ChunkStorage:
    """The data path's S3 client, or (``probe``) a small one with short timeouts and no SDK retries
    for the readiness probe (see processor/probes.py). ``read_threads``: threads that read through
    it at once; its connection pool holds one connection for each (a pool smaller than the readers
    closed a connection after nearly every read and opened another: a TCP connect per ranged GET)."""
    tuning: dict[str, Any] = {
        "part_size": settings.s3_part_bytes,
        "multipart_threshold": settings.s3_part_bytes,
        "max_concurrency": max(settings.s3_upload_concurrency, read_threads),
        "sse": None if settings.s3_sse == "none" else settings.s3_sse,
        "sse_kms_key_id": settings.s3_sse_kms_key_id,
        "sse_bucket_key": settings.s3_sse_bucket_key,
    }
    if probe:
        tuning.update(
            max_concurrency=1,
            connect_timeout_s=PROBE_CONNECT_TIMEOUT_S,
            read_timeout_s=PROBE_READ_TIMEOUT_S,
            max_attempts=1,
        )
    return s3_storage(settings.s3_bucket, settings.s3_endpoint_url, settings.s3_region, **tuning)
