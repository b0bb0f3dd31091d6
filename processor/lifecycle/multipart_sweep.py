"""Aborting abandoned multipart uploads under the bucket prefix.

A worker killed mid-upload leaves a multipart upload whose parts are stored (and billed) but belong
to no object; the copier aborts its own failed uploads, but a crash gives it no chance. The sweep
aborts uploads under the prefix that were initiated more than ``older_than_ms`` ago: a threshold far
above any segment's upload time, so uploads in flight (of this or another worker) are never touched.
It runs when the worker starts and then periodically (every ``SWEEP_INTERVAL_S``); ``delete-topic``
runs it for the topic's partitions with no age threshold.

Only uploads whose keys are objects of this project's layout under the prefix
(:meth:`ObjectKeyFactory.is_project_key`) are aborted: a bucket (or an empty prefix) shared with
other applications keeps their uploads, however old.
"""

from __future__ import annotations

import logging
import time
from typing import Protocol

from processor.segment.object_keys import ObjectKeyFactory
from processor.storage.chunk_storage import MultipartUpload

log = logging.getLogger(__name__)

SWEEP_INTERVAL_S = 600.0


class MultipartStore(Protocol):
    """The part of the ChunkStorage contract the sweep uses."""

    def list_multipart_uploads(self, prefix: str) -> list[MultipartUpload]: ...

    def abort_multipart_upload(self, key: str, upload_id: str) -> None: ...


def abandoned(
    uploads: list[MultipartUpload], now_ms: int, older_than_ms: int, keys: ObjectKeyFactory
) -> list[MultipartUpload]:
    """The uploads of this project's objects initiated at least ``older_than_ms`` before ``now_ms``. Pure."""
    return [u for u in uploads if now_ms - u.initiated_ms >= older_than_ms and keys.is_project_key(u.key)]


def sweep_multipart_uploads(
    store: MultipartStore, keys: ObjectKeyFactory, prefix: str, older_than_ms: int
) -> int:
    """Abort abandoned multipart uploads of this project's objects under ``prefix`` (a prefix at or
    below ``keys``' own); returns how many were aborted."""
    found = abandoned(store.list_multipart_uploads(prefix), int(time.time() * 1000), older_than_ms, keys)
    for upload in found:
        store.abort_multipart_upload(upload.key, upload.upload_id)
        log.info("aborted abandoned multipart upload of %s (%s)", upload.key, upload.upload_id)
    return len(found)
