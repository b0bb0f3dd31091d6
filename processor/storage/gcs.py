"""ChunkStorage on Google Cloud Storage (google-cloud-storage). The only module that imports it.

Why Google's own client rather than one library for all three clouds (obstore, fsspec): the
credential chain users of Google Cloud expect (application-default credentials, a service-account
file, workload identity on GKE through the metadata server) is google-auth's, and only the
vendor's client gives every precondition (``ifGenerationMatch``) and compose the
contract uses; S3 stays on boto3 and Azure on azure-storage-blob for the same reasons. What it costs
in CPU per GB is measured by ``python -m benchmarks --storage gcs``.

- ``create`` is conditional (``ifGenerationMatch=0``: only if no live object has the name), for
  single-request uploads and for resumable uploads (objects above ``multipart_threshold`` go up in
  ``part_size`` chunks of one resumable session; the precondition is checked when it finishes).
  GCS stores nothing of an unfinished session (it expires after a week), so there are no
  abandoned uploads to list or abort.
- Every create carries a token of its own in the object's metadata: a 412 whose object holds this
  attempt's token is the client's own retry of a request whose answer was lost, and the create
  succeeded (the S3 backend checks the size for the same case; the token is exact).
- Reads are ranged GETs without decompressive transcoding (``raw_download``); errors map to the
  storage taxonomy as S3's do (:func:`storage_error`).
- ``concat`` is GCS's compose (at most 32 sources in one request; more are composed in rounds
  into temporary objects that are deleted after).
- ``delete_many`` sends the deletes in parallel on the pooled connections (see there why not as
  a JSON batch).
"""

from __future__ import annotations

import builtins
import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import google.auth.exceptions
import requests
from google.api_core import exceptions as gexc
from google.api_core.retry import Retry
from google.auth.credentials import AnonymousCredentials, Credentials
from google.cloud import storage  # type: ignore[import-untyped]
from google.cloud.storage.retry import (  # type: ignore[import-untyped]
    DEFAULT_RETRY,
    DEFAULT_RETRY_IF_GENERATION_SPECIFIED,
)
from requests.adapters import HTTPAdapter

from processor.errors import (
    ConfigError,
    InvalidRangeError,
    ObjectExistsError,
    ObjectNotFoundError,
    StorageError,
)
from processor.storage.chunk_storage import (
    Buffer,
    ChunkInfo,
    ChunkStorage,
    MultipartUpload,
    not_deleted,
)
from processor.storage.upload_body import ChainedReader

log = logging.getLogger(__name__)

OBJECT_CONTENT_TYPE = "application/octet-stream"
# The metadata key holding a create's own token (see the module docstring).
CREATE_TOKEN = "processor-create"
# A resumable upload's chunks must be multiples of 256 KiB.
CHUNK_QUANTUM = 256 * 1024
COMPOSE_MAX = 32
# IAM permissions the worker needs on the bucket (the follower, gateway and Spark need get + list).
WORKER_PERMISSIONS = (
    "storage.objects.create",
    "storage.objects.get",
    "storage.objects.list",
    "storage.objects.delete",
)


@dataclass(frozen=True, slots=True)
class GcsOptions:
    bucket: str
    # None: storage.googleapis.com; else an emulator's (fake-gcs-server) or a private endpoint
    endpoint_url: str | None = None
    project: str | None = None
    # A service-account key file; None: application-default credentials (GOOGLE_APPLICATION_CREDENTIALS,
    # gcloud's user credentials, or the metadata server: workload identity on GKE, a VM's account)
    credentials_file: str | None = None
    # No credentials at all (an emulator)
    anonymous: bool = False
    part_size: int = 16 * 1024 * 1024
    multipart_threshold: int = 32 * 1024 * 1024
    max_concurrency: int = 16
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    max_attempts: int = 5


def storage_error(op: str, where: str, exc: Exception, key: str = "") -> StorageError:
    """Map a client error to the storage taxonomy: 404 -> ObjectNotFoundError, 412 ->
    ObjectExistsError, 416 -> InvalidRangeError; credentials, permissions, a missing bucket and
    malformed requests are not retriable; 408, 429, 5xx, timeouts and connection errors are."""
    if isinstance(exc, gexc.NotFound):
        if "bucket" in str(exc).lower() and "does not exist" in str(exc).lower():
            return StorageError(f"GCS {op} {where} failed: the bucket does not exist", retriable=False)
        return ObjectNotFoundError(key or where)
    if isinstance(exc, gexc.PreconditionFailed):
        return ObjectExistsError(key or where)
    if isinstance(exc, gexc.RequestRangeNotSatisfiable):
        return InvalidRangeError(key or where, str(exc))
    if isinstance(exc, gexc.RetryError):
        cause = exc.cause if isinstance(exc.cause, Exception) else None
        if cause is not None:
            return storage_error(op, where, cause, key)
        return StorageError(f"GCS {op} {where} failed: {exc}", retriable=True)
    if isinstance(exc, gexc.GoogleAPICallError):
        status = int(exc.code or 0)
        retriable = status >= 500 or status in {408, 429} or status == 0
        return StorageError(f"GCS {op} {where} failed: {status} {exc.message}", retriable=retriable)
    if isinstance(exc, google.auth.exceptions.DefaultCredentialsError):
        return StorageError(f"GCS {op} {where} failed: no Google credentials: {exc}", retriable=False)
    if isinstance(exc, google.auth.exceptions.RefreshError):
        return StorageError(f"GCS {op} {where} failed: credentials refused: {exc}", retriable=False)
    # TransportError, requests' connection errors and timeouts, a truncated body
    return StorageError(f"GCS {op} {where} failed: {type(exc).__name__}: {exc}", retriable=True)


_CLIENT_ERRORS: tuple[type[Exception], ...] = (
    gexc.GoogleAPIError,
    google.auth.exceptions.GoogleAuthError,
    requests.RequestException,
    ConnectionError,
    TimeoutError,
)


def _credentials(options: GcsOptions) -> Credentials | None:
    if options.anonymous:
        return AnonymousCredentials()  # type: ignore[no-untyped-call]
    if options.credentials_file:
        from google.oauth2 import service_account

        try:
            creds: Credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                options.credentials_file,
                scopes=["https://www.googleapis.com/auth/devstorage.read_write"],
            )
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"PROCESSOR_GCS_CREDENTIALS_FILE: cannot read a service-account key from "
                f"{options.credentials_file}: {type(exc).__name__}"
            ) from None
        return creds
    return None  # application-default credentials, found by the client


def new_gcs_client(options: GcsOptions) -> storage.Client:
    """The one place a GCS client is made: its credentials, endpoint and a connection pool that
    holds one connection for each thread that reads or writes through it."""
    client_options = {"api_endpoint": options.endpoint_url} if options.endpoint_url else None
    try:
        client = storage.Client(
            project=options.project or ("local" if options.anonymous else None),
            credentials=_credentials(options),
            client_options=client_options,
        )
    except google.auth.exceptions.DefaultCredentialsError as exc:
        raise ConfigError(
            f"no Google credentials found ({exc}): set GOOGLE_APPLICATION_CREDENTIALS or "
            "PROCESSOR_GCS_CREDENTIALS_FILE to a service-account key, run `gcloud auth "
            "application-default login`, or run with workload identity"
        ) from None
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=options.max_concurrency + 4)
    client._http.mount("https://", adapter)
    client._http.mount("http://", adapter)
    return client


class GcsChunkStorage(ChunkStorage):
    supports_concat = True
    lists_folders = True

    def __init__(self, options: GcsOptions, client: storage.Client | None = None) -> None:
        if options.part_size % CHUNK_QUANTUM:
            raise ValueError(f"GCS part size must be a multiple of {CHUNK_QUANTUM} bytes")
        self.options = options
        self._client = client or new_gcs_client(options)
        self._bucket = self._client.bucket(options.bucket)
        self._timeout = (options.connect_timeout_s, options.read_timeout_s)
        deadline = options.read_timeout_s * options.max_attempts
        self._retry: Retry | None = DEFAULT_RETRY.with_timeout(deadline) if options.max_attempts > 1 else None
        self._conditional_retry = DEFAULT_RETRY_IF_GENERATION_SPECIFIED if options.max_attempts > 1 else None

    @property
    def bucket(self) -> str:
        return self.options.bucket

    @property
    def client(self) -> storage.Client:
        return self._client

    def _fail(self, op: str, key: str, exc: Exception) -> StorageError:
        return storage_error(op, f"{self.bucket}/{key}", exc, key)

    # -- ChunkStorage ---------------------------------------------------------------------------

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        size = sum(len(memoryview(p).cast("B")) for p in parts)
        token = uuid.uuid4().hex
        blob = self._bucket.blob(key)
        blob.metadata = {CREATE_TOKEN: token}
        if size > self.options.multipart_threshold:
            blob.chunk_size = self.options.part_size  # a resumable upload, in chunks of this size
        try:
            blob.upload_from_file(
                ChainedReader(parts),
                size=size,
                content_type=OBJECT_CONTENT_TYPE,
                if_generation_match=0,
                timeout=self._timeout,
                retry=self._conditional_retry,
                # every block and index carries CRC-32s each read verifies: no second checksum pass
                checksum=None,
            )
        except _CLIENT_ERRORS as exc:
            err = self._fail("upload", key, exc)
            if isinstance(err, ObjectExistsError) and self._created_by(key, token):
                log.info("GCS create of %s: an earlier attempt stored it (answer lost); going on", key)
                return ChunkInfo(key, size)
            raise err from exc
        return ChunkInfo(key, size)

    def _created_by(self, key: str, token: str) -> bool:
        """Whether the object at ``key`` was written by the create that carried ``token``."""
        try:
            found = self._bucket.get_blob(key, timeout=self._timeout, retry=self._retry)
        except _CLIENT_ERRORS:
            return False  # the 412 stands
        return found is not None and (found.metadata or {}).get(CREATE_TOKEN) == token

    def read(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length <= 0:
            raise InvalidRangeError(key, f"offset {offset}, length {length}")
        try:
            data: bytes = self._bucket.blob(key).download_as_bytes(
                start=offset,
                end=offset + length - 1,
                raw_download=True,
                checksum=None,
                # the body read whole, not in the library's 8 KiB pieces: 1 MiB ranged reads
                # 4.5-4.8 -> 2.6-2.8 CPU-s/GB (alternating runs on fake-gcs-server, load 32)
                single_shot_download=True,
                timeout=self._timeout,
                retry=self._retry,
            )
        except _CLIENT_ERRORS as exc:
            raise self._fail("get", key, exc) from exc
        if len(data) != length:
            raise InvalidRangeError(key, f"asked {length} bytes at {offset}, got {len(data)}")
        return data

    def stat(self, key: str) -> ChunkInfo | None:
        try:
            blob = self._bucket.get_blob(key, timeout=self._timeout, retry=self._retry)
        except _CLIENT_ERRORS as exc:
            raise self._fail("stat", key, exc) from exc
        return None if blob is None else _info(blob)

    def delete(self, key: str) -> None:
        try:
            self._bucket.delete_blob(key, timeout=self._timeout, retry=self._retry)
        except gexc.NotFound:
            return
        except _CLIENT_ERRORS as exc:
            raise self._fail("delete", key, exc) from exc

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete many chunks, ``max_concurrency`` requests at a time; missing ones are not an error.
        Raises StorageError naming each key not deleted (the others are).

        Not GCS's JSON batch API: fake-gcs-server answers a batch with an empty multipart (no
        sub-responses), so a batch delete could not be tested here; parallel DELETEs on the pooled
        connections cost the same round trips per ``max_concurrency`` keys."""
        pending = list(dict.fromkeys(keys))
        failed: dict[str, StorageError] = {}

        def delete(name: str) -> tuple[str, StorageError | None]:
            try:
                self.delete(name)
            except StorageError as exc:  # gathered, raised below with every key that failed
                return name, exc
            return name, None

        with ThreadPoolExecutor(
            max_workers=self.options.max_concurrency, thread_name_prefix="gcs-delete"
        ) as pool:
            for name, error in pool.map(delete, pending):
                if error is not None:
                    failed[name] = error
        if failed:
            raise not_deleted(failed)

    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        try:
            for blob in self._client.list_blobs(
                self._bucket, prefix=prefix, timeout=self._timeout, retry=self._retry
            ):
                yield _info(blob)
        except _CLIENT_ERRORS as exc:
            raise self._fail("list", prefix, exc) from exc

    def list_folders(self, prefix: str) -> tuple[builtins.list[str], builtins.list[ChunkInfo]]:
        """The folders directly under ``prefix`` and the objects directly in it (delimiter ``/``)."""
        chunks: builtins.list[ChunkInfo] = []
        folders: set[str] = set()
        try:
            pages = self._client.list_blobs(
                self._bucket, prefix=prefix, delimiter="/", timeout=self._timeout, retry=self._retry
            ).pages
            for page in pages:
                chunks.extend(_info(blob) for blob in page)
                folders.update(page.prefixes)
        except _CLIENT_ERRORS as exc:
            raise self._fail("list", prefix, exc) from exc
        return sorted(folders), chunks

    def concat(self, target: str, sources: Sequence[str]) -> ChunkInfo:
        """Server-side compose (conditional on ``target`` not existing); more than 32 sources are
        composed in rounds through temporary objects named after ``target``, deleted after."""
        if not sources:
            raise StorageError("concat needs at least one source", retriable=False)
        temporaries: builtins.list[str] = []
        names = list(sources)
        try:
            while len(names) > COMPOSE_MAX:
                grouped = []
                for start in range(0, len(names), COMPOSE_MAX):
                    temp = f"{target}.compose-{uuid.uuid4().hex}"
                    self._compose(temp, names[start : start + COMPOSE_MAX])
                    temporaries.append(temp)
                    grouped.append(temp)
                names = grouped
            info = self._compose(target, names)
        finally:
            if temporaries:
                self.delete_many(temporaries)
        return info

    def _compose(self, target: str, sources: Sequence[str]) -> ChunkInfo:
        blob = self._bucket.blob(target)
        blob.content_type = OBJECT_CONTENT_TYPE
        try:
            blob.compose(
                [self._bucket.blob(s) for s in sources],
                if_generation_match=0,
                timeout=self._timeout,
                retry=self._conditional_retry,
            )
        except _CLIENT_ERRORS as exc:
            if isinstance(exc, gexc.NotFound):
                raise ObjectNotFoundError(", ".join(sources)) from exc
            raise self._fail("compose", target, exc) from exc
        return ChunkInfo(target, int(blob.size or 0))

    # -- uploads: a resumable session stores nothing until it finishes ----------------------------

    def list_multipart_uploads(self, prefix: str) -> builtins.list[MultipartUpload]:
        return []

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """GCS keeps no part of an unfinished upload: there is never one to abort."""

    # -- lifecycle --------------------------------------------------------------------------------

    def check_bucket(self) -> None:
        """Fail fast, naming what to change, when the bucket cannot be reached or used."""
        where = self.options.endpoint_url or "storage.googleapis.com"
        try:
            self._bucket.reload(timeout=self._timeout, retry=self._retry)
        except gexc.NotFound as exc:
            raise StorageError(
                f"GCS bucket {self.bucket!r} does not exist at {where} (PROCESSOR_GCS_BUCKET; the "
                "bucket must exist)",
                retriable=False,
            ) from exc
        except gexc.Forbidden:
            # storage.buckets.get is not among the permissions the worker needs (roles/storage.
            # objectUser has none of the bucket's own); listing one object shows the bucket is there
            try:
                next(iter(self._client.list_blobs(self._bucket, max_results=1, timeout=self._timeout)), None)
            except _CLIENT_ERRORS as exc:
                raise self._bucket_unusable(exc) from exc
        except _CLIENT_ERRORS as exc:
            raise self._bucket_unusable(exc) from exc

    def _bucket_unusable(self, exc: Exception) -> StorageError:
        err = storage_error("check", self.bucket, exc)
        return StorageError(
            f"GCS bucket {self.bucket!r} is not usable: {err} (PROCESSOR_GCS_BUCKET, and the "
            "credentials' permissions on it)",
            retriable=err.retriable,
        )

    def missing_permissions(self, needed: Sequence[str] = WORKER_PERMISSIONS) -> builtins.list[str]:
        """The IAM permissions among ``needed`` the credentials lack on the bucket (testIamPermissions)."""
        try:
            granted = set(self._bucket.test_iam_permissions(list(needed), timeout=self._timeout))
        except (gexc.NotFound, gexc.MethodNotImplemented) as exc:
            # a store without IAM (fake-gcs-server does not serve testIamPermissions): say so
            log.warning("GCS bucket %s: permissions not checked (%s)", self.bucket, type(exc).__name__)
            return []
        except _CLIENT_ERRORS as exc:
            raise self._fail("testIamPermissions", "", exc) from exc
        return [p for p in needed if p not in granted]

    def create_bucket(self) -> None:
        """Create the bucket unless it exists (the local stack's emulator)."""
        try:
            if self._bucket.exists(timeout=self._timeout):
                return
            self._client.create_bucket(self.bucket, timeout=self._timeout)
        except gexc.Conflict:
            return
        except _CLIENT_ERRORS as exc:
            raise self._fail("create bucket", "", exc) from exc

    def close(self) -> None:
        self._client.close()


def _info(blob: Any) -> ChunkInfo:
    updated = blob.updated or blob.time_created
    return ChunkInfo(blob.name, int(blob.size or 0), int(updated.timestamp() * 1000) if updated else None)


def gcs_storage(bucket: str, endpoint_url: str | None = None, **tuning: Any) -> GcsChunkStorage:
    """The one builder of GCS storage (the wiring's, the Spark sources', the local stack's)."""
    return GcsChunkStorage(GcsOptions(bucket=bucket, endpoint_url=endpoint_url, **tuning))
