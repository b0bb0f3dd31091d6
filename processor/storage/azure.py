"""ChunkStorage on Azure Blob Storage (azure-storage-blob). The only module that imports it.

Why Microsoft's own client rather than one library for all three clouds (obstore, fsspec): the
credentials users of Azure expect (connection strings, account keys, SAS, and
``DefaultAzureCredential``: workload identity on AKS, managed identity, the Azure CLI) are
azure-identity's, and only the vendor's client gives every condition (``If-None-Match: *``, ETags)
and the blob batch API the contract uses. What it costs in CPU per GB is measured by
``python -m benchmarks --storage azure``.

- ``create`` is conditional (``If-None-Match: *``: Azure answers 409 BlobAlreadyExists, or 412), for
  a single Put Blob and for block uploads (objects above ``multipart_threshold`` are staged as
  ``part_size`` blocks in parallel, then committed with the condition). Azure drops uncommitted
  blocks by itself (after a week) and has no request that lists them across a container: there are
  no abandoned uploads to list or abort.
- Every create carries a token of its own in the blob's metadata: a conflict whose blob holds this
  attempt's token is the SDK's own retry of a request whose answer was lost (see gcs.py).
- Reads are ranged GETs; errors map to the storage taxonomy (:func:`storage_error`).
- ``delete_many`` sends the deletes in blob batch requests (up to 256 a batch).
- ``concat`` is server-side: Put Block From URL for each source, then a conditional Put Block List.
"""

from __future__ import annotations

import base64
import builtins
import logging
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs

import requests
from azure.core import MatchConditions
from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential, TokenCredential
from azure.core.exceptions import (
    AzureError,
    ClientAuthenticationError,
    HttpResponseError,
    ResourceExistsError,
    ResourceModifiedError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.core.pipeline.transport import RequestsTransport
from azure.storage.blob import (
    BlobBlock,
    BlobPrefix,
    BlobSasPermissions,
    BlobServiceClient,
    ContainerClient,
    ContentSettings,
    ExponentialRetry,
    generate_blob_sas,
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
# The SDK logs every request and answer at INFO (headers included): one line per ranged read
logging.getLogger("azure.core.pipeline.policies.http_logging_policy").setLevel(logging.WARNING)

OBJECT_CONTENT_TYPE = "application/octet-stream"
CREATE_TOKEN = "processorcreate"  # metadata names are C# identifiers: no '-'
BATCH_MAX = 256
MAX_BLOCK_FROM_URL = 4000 * 1024 * 1024
# What a SAS must allow for the worker: read, add/create/write, delete, list.
WORKER_SAS_PERMISSIONS = {"r": "read", "w": "write", "d": "delete", "l": "list"}


@dataclass(frozen=True, slots=True)
class AzureOptions:
    container: str
    # https://ACCOUNT.blob.core.windows.net (or Azurite's http://127.0.0.1:PORT/ACCOUNT); unset with a
    # connection string, which names it
    account_url: str | None = None
    # One of these, or none: DefaultAzureCredential (workload identity, managed identity, Azure CLI...)
    connection_string: str | None = None
    account_key: str | None = None
    sas_token: str | None = None
    part_size: int = 16 * 1024 * 1024
    multipart_threshold: int = 32 * 1024 * 1024
    max_concurrency: int = 16
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    max_attempts: int = 5

    def __repr__(self) -> str:  # the secrets never reach a log line or a traceback
        return f"AzureOptions(container={self.container!r}, account_url={self.account_url!r})"


def storage_error(op: str, where: str, exc: Exception, key: str = "") -> StorageError:
    """Map an SDK error to the storage taxonomy: a missing blob -> ObjectNotFoundError, a lost
    conditional create (409 BlobAlreadyExists, 412) -> ObjectExistsError, 416 -> InvalidRangeError;
    credentials, permissions, a missing container are not retriable; 408, 429, 5xx, timeouts and
    connection errors are."""
    code = str(getattr(exc, "error_code", "") or "")
    status = int(getattr(exc, "status_code", 0) or 0)
    if code == "ContainerNotFound":
        return StorageError(f"Azure {op} {where} failed: ContainerNotFound", retriable=False)
    if isinstance(exc, ResourceNotFoundError) and status in {404, 0}:
        return ObjectNotFoundError(key or where)
    if isinstance(exc, ResourceExistsError | ResourceModifiedError) or status == 412:
        return ObjectExistsError(key or where)
    if status == 416 or code == "InvalidRange":
        return InvalidRangeError(key or where, code or str(status))
    if isinstance(exc, ClientAuthenticationError) or status in {401, 403}:
        return StorageError(f"Azure {op} {where} failed: {status} {code or exc}", retriable=False)
    if isinstance(exc, HttpResponseError):
        retriable = status >= 500 or status in {408, 429} or status == 0
        return StorageError(f"Azure {op} {where} failed: {status} {code}: {exc.reason}", retriable=retriable)
    if isinstance(exc, ServiceRequestError | ServiceResponseError):
        return StorageError(f"Azure {op} {where} failed: {type(exc).__name__}: {exc}", retriable=True)
    if isinstance(exc, AzureError) and "credential" in type(exc).__name__.lower():
        return StorageError(f"Azure {op} {where} failed: no usable credentials: {exc}", retriable=False)
    return StorageError(f"Azure {op} {where} failed: {type(exc).__name__}: {exc}", retriable=True)


_CLIENT_ERRORS: tuple[type[Exception], ...] = (
    AzureError,
    requests.RequestException,
    ConnectionError,
    TimeoutError,
)


def _credential(options: AzureOptions) -> Any:
    if options.sas_token:
        return AzureSasCredential(options.sas_token.lstrip("?"))
    if options.account_key:
        account = _account_name(options.account_url or "")
        return AzureNamedKeyCredential(account, options.account_key)
    from azure.identity import DefaultAzureCredential

    credential: TokenCredential = DefaultAzureCredential()
    return credential


def _account_name(account_url: str) -> str:
    """The account of https://ACCOUNT.blob.core.windows.net, or of an emulator's http://host:port/ACCOUNT."""
    rest = account_url.split("://", 1)[-1].rstrip("/")
    host, _, path = rest.partition("/")
    if path:
        return path.split("/")[0]
    return host.split(".")[0]


def new_azure_client(options: AzureOptions) -> BlobServiceClient:
    """The one place an Azure client is made: its credentials, timeouts, retries and a connection
    pool holding one connection for each thread that uses it."""
    session = requests.Session()
    adapter = HTTPAdapter(pool_connections=4, pool_maxsize=options.max_concurrency + 4)
    session.mount("https://", adapter)
    session.mount("http://", adapter)
    transport = RequestsTransport(
        session=session,
        session_owner=True,
        connection_timeout=options.connect_timeout_s,
        read_timeout=options.read_timeout_s,
        # a transport made here does not get the SDK's own 256 KiB: azure-core's default reads a
        # body in 4 KiB pieces, 256 Python calls a MiB (a 1 MiB ranged read cost 24 ms of CPU)
        connection_data_block_size=1024 * 1024,
    )
    tuning: dict[str, Any] = {
        "transport": transport,
        "max_single_put_size": options.multipart_threshold,
        "max_block_size": options.part_size,
        # The SDK's default waits 15 s before its first retry (then 18, 24, ...): a read of a
        # segment's block would stall that long on one reset connection. 1 s, 3 s, 5 s, 9 s ..., +-1 s.
        "retry_policy": ExponentialRetry(
            initial_backoff=1, increment_base=2, retry_total=max(options.max_attempts - 1, 0)
        ),
    }
    if options.connection_string:
        try:
            return BlobServiceClient.from_connection_string(options.connection_string, **tuning)
        except ValueError:
            # the SDK's message may quote the string, and a connection string holds the account key
            raise ConfigError(
                "PROCESSOR_AZURE_CONNECTION_STRING is not an Azure Storage connection string"
            ) from None
    if not options.account_url:
        raise ConfigError(
            "PROCESSOR_AZURE_ACCOUNT_URL is needed (https://ACCOUNT.blob.core.windows.net) unless "
            "PROCESSOR_AZURE_CONNECTION_STRING names the account"
        )
    return BlobServiceClient(options.account_url, credential=_credential(options), **tuning)


class AzureChunkStorage(ChunkStorage):
    supports_concat = True
    lists_folders = True

    def __init__(self, options: AzureOptions, client: BlobServiceClient | None = None) -> None:
        self.options = options
        self._service = client or new_azure_client(options)
        self._container: ContainerClient = self._service.get_container_client(options.container)

    @property
    def bucket(self) -> str:
        return self.options.container

    @property
    def client(self) -> ContainerClient:
        return self._container

    def _fail(self, op: str, key: str, exc: Exception) -> StorageError:
        return storage_error(op, f"{self.bucket}/{key}", exc, key)

    # -- ChunkStorage ---------------------------------------------------------------------------

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        size = sum(len(memoryview(p).cast("B")) for p in parts)
        token = uuid.uuid4().hex
        try:
            self._container.upload_blob(
                key,
                ChainedReader(parts),
                length=size,
                overwrite=False,  # If-None-Match: * on the Put Blob or the Put Block List
                metadata={CREATE_TOKEN: token},
                content_settings=ContentSettings(content_type=OBJECT_CONTENT_TYPE),
                max_concurrency=self.options.max_concurrency,
            )
        except _CLIENT_ERRORS as exc:
            err = self._fail("upload", key, exc)
            if isinstance(err, ObjectExistsError) and self._created_by(key, token):
                log.info("Azure create of %s: an earlier attempt stored it (answer lost); going on", key)
                return ChunkInfo(key, size)
            raise err from exc
        return ChunkInfo(key, size)

    def _created_by(self, key: str, token: str) -> bool:
        try:
            props = self._container.get_blob_client(key).get_blob_properties()
        except _CLIENT_ERRORS:
            return False  # the conflict stands
        return (props.metadata or {}).get(CREATE_TOKEN) == token

    def read(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length <= 0:
            raise InvalidRangeError(key, f"offset {offset}, length {length}")
        try:
            data = self._container.download_blob(key, offset=offset, length=length).readall()
        except _CLIENT_ERRORS as exc:
            raise self._fail("get", key, exc) from exc
        if len(data) != length:
            raise InvalidRangeError(key, f"asked {length} bytes at {offset}, got {len(data)}")
        return data

    def stat(self, key: str) -> ChunkInfo | None:
        try:
            props = self._container.get_blob_client(key).get_blob_properties()
        except _CLIENT_ERRORS as exc:
            err = self._fail("stat", key, exc)
            if isinstance(err, ObjectNotFoundError):
                return None
            raise err from exc
        return _info(key, props)

    def delete(self, key: str) -> None:
        try:
            self._container.delete_blob(key)
        except _CLIENT_ERRORS as exc:
            err = self._fail("delete", key, exc)
            if not isinstance(err, ObjectNotFoundError):
                raise err from exc

    def delete_many(self, keys: Iterable[str]) -> None:
        """Delete many chunks, up to 256 in one blob batch request; missing ones are not an error.
        Raises StorageError naming each key not deleted (the others are)."""
        pending = list(keys)
        failed: dict[str, StorageError] = {}
        for start in range(0, len(pending), BATCH_MAX):
            chunk = pending[start : start + BATCH_MAX]
            try:
                answers = list(self._container.delete_blobs(*chunk, raise_on_any_failure=False))
            except _CLIENT_ERRORS as exc:  # the batch request itself failed: nothing is known deleted
                failed.update({name: self._fail("batch delete", name, exc) for name in chunk})
                continue
            for name, answer in zip(chunk, answers, strict=True):
                status = int(answer.status_code)
                if status not in {200, 202, 404}:
                    failed[name] = StorageError(
                        f"Azure delete of {self.bucket}/{name} failed: {status} {answer.reason}",
                        retriable=status >= 500 or status in {408, 429},
                    )
        if failed:
            raise not_deleted(failed)

    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        try:
            for props in self._container.list_blobs(name_starts_with=prefix or None):
                yield _info(props.name, props)
        except _CLIENT_ERRORS as exc:
            raise self._fail("list", prefix, exc) from exc

    def list_folders(self, prefix: str) -> tuple[builtins.list[str], builtins.list[ChunkInfo]]:
        """The folders directly under ``prefix`` and the blobs directly in it (delimiter ``/``)."""
        folders: builtins.list[str] = []
        chunks: builtins.list[ChunkInfo] = []
        try:
            for item in self._container.walk_blobs(name_starts_with=prefix or None, delimiter="/"):
                if isinstance(item, BlobPrefix):
                    folders.append(item.name)
                else:
                    chunks.append(_info(item.name, item))
        except _CLIENT_ERRORS as exc:
            raise self._fail("list", prefix, exc) from exc
        return folders, chunks

    def concat(self, target: str, sources: Sequence[str]) -> ChunkInfo:
        """Server-side: each source becomes a block of ``target`` read by Azure from the source's
        URL (Put Block From URL), committed with ``If-None-Match: *`` (never over an existing
        blob). Each source must be at most 4000 MiB (a block's limit)."""
        infos = []
        for name in sources:
            info = self.stat(name)
            if info is None:
                raise ObjectNotFoundError(name)
            if info.size > MAX_BLOCK_FROM_URL:
                raise StorageError(f"Azure concat: {name} is larger than a block (4000 MiB)", retriable=False)
            infos.append(info)
        if not infos:
            raise StorageError("concat needs at least one source", retriable=False)
        blob = self._container.get_blob_client(target)
        blocks = []
        try:
            for number, info in enumerate(infos):
                block_id = base64.b64encode(f"{number:08d}".encode()).decode()
                url, authorization = self._source(info.key)
                blob.stage_block_from_url(block_id, url, source_authorization=authorization)
                blocks.append(BlobBlock(block_id=block_id))
            blob.commit_block_list(
                blocks,
                content_settings=ContentSettings(content_type=OBJECT_CONTENT_TYPE),
                match_condition=MatchConditions.IfMissing,
            )
        except _CLIENT_ERRORS as exc:
            raise self._fail("concat", target, exc) from exc
        return ChunkInfo(target, sum(i.size for i in infos))

    def _source(self, key: str) -> tuple[str, str | None]:
        """The URL Azure reads a source from, and its authorization: a SAS of ten minutes signed with
        the account key, the SAS given, or the identity's bearer token."""
        url = self._container.get_blob_client(key).url
        if "sig=" in url:  # a connection string's SAS, already in every URL the client makes
            return url, None
        if self.options.sas_token:
            return f"{url}?{self.options.sas_token.lstrip('?')}", None
        credential = self._service.credential
        account_key = getattr(credential, "account_key", None)
        if account_key:
            sas = generate_blob_sas(
                credential.account_name,
                self.bucket,
                key,
                account_key=account_key,
                permission=BlobSasPermissions(read=True),
                expiry=datetime.now(UTC) + timedelta(minutes=10),
            )
            return f"{url}?{sas}", None
        token = credential.get_token("https://storage.azure.com/.default").token
        return url, f"Bearer {token}"

    # -- uploads: uncommitted blocks are dropped by Azure itself ----------------------------------

    def list_multipart_uploads(self, prefix: str) -> builtins.list[MultipartUpload]:
        return []

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """Azure has no upload to abort: uncommitted blocks are discarded after a week."""

    # -- lifecycle --------------------------------------------------------------------------------

    def check_bucket(self) -> None:
        """Fail fast, naming what to change, when the container cannot be reached or used."""
        where = self._service.url
        try:
            self._container.get_container_properties()
        except ResourceNotFoundError as exc:
            raise StorageError(
                f"Azure container {self.bucket!r} does not exist at {where} (PROCESSOR_AZURE_CONTAINER; "
                "the container must exist)",
                retriable=False,
            ) from exc
        except _CLIENT_ERRORS as exc:
            err = storage_error("check", self.bucket, exc)
            if int(getattr(exc, "status_code", 0) or 0) == 403:
                # a container SAS (or a data role without the container's own read) may list blobs
                # yet not read the container's properties: a listing shows it is there and usable
                try:
                    next(iter(self._container.list_blobs(results_per_page=1).by_page()), None)
                    return
                except _CLIENT_ERRORS as listed:
                    err = storage_error("list", self.bucket, listed)
            raise StorageError(
                f"Azure container {self.bucket!r} at {where} is not usable: {err} "
                "(PROCESSOR_AZURE_CONTAINER, and the credentials' data roles on it)",
                retriable=err.retriable,
            ) from exc

    def missing_permissions(self) -> builtins.list[str]:
        """What the worker needs that a SAS does not grant (its ``sp`` field); with other
        credentials the grants cannot be read without writing (an empty answer)."""
        if not self.options.sas_token:
            return []
        fields = parse_qs(self.options.sas_token.lstrip("?"))
        granted = "".join(fields.get("sp", []))
        return [name for letter, name in WORKER_SAS_PERMISSIONS.items() if letter not in granted]

    def create_bucket(self) -> None:
        """Create the container unless it exists (the local stack's emulator)."""
        try:
            self._container.create_container()
        except ResourceExistsError:
            return
        except _CLIENT_ERRORS as exc:
            raise self._fail("create container", "", exc) from exc

    def close(self) -> None:
        self._service.close()


def _info(key: str, props: Any) -> ChunkInfo:
    modified = props.last_modified
    return ChunkInfo(key, int(props.size), int(modified.timestamp() * 1000) if modified else None)


def azure_storage(container: str, account_url: str | None = None, **tuning: Any) -> AzureChunkStorage:
    """The one builder of Azure storage (the wiring's, the Spark sources', the local stack's)."""
    return AzureChunkStorage(AzureOptions(container=container, account_url=account_url, **tuning))
