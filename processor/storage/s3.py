"""ChunkStorage on S3 (boto3). The only module that imports the AWS SDK.

- ``create`` is conditional (``If-None-Match: *``) for single PUTs and for multipart completion, so a
  second writer gets ``ObjectExistsError`` instead of overwriting.
- Objects above ``multipart_threshold`` go up as multipart uploads whose parts are sent in parallel
  from memory views of the segment's blocks (no joined copy); a failed upload is aborted. Bodies
  are ``upload_body.ViewsReader``s: the socket is sent views of the blocks, never copies.
- ``delete_many`` is DeleteObjects, 1,000 keys a request (its answer lists failures key by key).
- Reads are ranged GETs. Errors map to the storage taxonomy (:func:`storage_error`): 404 ->
  ObjectNotFoundError, 412 -> ObjectExistsError, 416 -> InvalidRangeError, the rest -> StorageError
  with ``retriable`` set (permissions, credentials, missing bucket: no; 5xx, throttling, timeouts,
  connection errors: yes).
- A 412 on a create whose key is this attempt's own (fresh UUID) means the SDK retried a request
  whose response was lost: the object is checked (size) and the create succeeds.
- Credentials come from the standard AWS chain (environment, profile, instance role); the client and
  its options are made in processor/storage/s3_client.py, the storage by :func:`s3_storage`.
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import IO, TYPE_CHECKING, Any, cast

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)

from processor.errors import (
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
    split_parts,
)
from processor.storage.s3_client import (
    OBJECT_CONTENT_TYPE,
    S3Options,
    count_requests,
    label_parts,
    new_s3_client,
)
from processor.storage.upload_body import ViewsReader

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

log = logging.getLogger(__name__)

MIN_PART_SIZE = 5 * 1024 * 1024
DELETE_BATCH = 1000  # keys a DeleteObjects request takes at most


def _code(exc: ClientError) -> str:
    err = exc.response.get("Error", {})
    return str(err.get("Code", "")) or str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def _status(exc: ClientError) -> int:
    try:
        return int(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
    except (TypeError, ValueError):
        return 0


# Codes that no retry of the same request can fix: credentials, permissions, a missing bucket.
PERMANENT_CODES = frozenset(
    {
        "AccessDenied",
        "AllAccessDisabled",
        "AccountProblem",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "NoSuchBucket",
        "InvalidBucketName",
        "InvalidObjectState",
        "InvalidArgument",
        "InvalidRequest",
        "MalformedXML",
        "EntityTooSmall",
        "EntityTooLarge",
        "MethodNotAllowed",
        "NotImplemented",
    }
)
# Codes worth retrying although their status is 4xx (throttling, timeouts, races on the server).
TRANSIENT_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestTimeTooSkewed",
        "OperationAborted",
        "InternalError",
        "ServiceUnavailable",
        "503",
        "500",
    }
)
# Client-side failures that no retry fixes: no or bad credentials, a request the SDK rejects.
_PERMANENT_SDK_ERRORS: tuple[type[BotoCoreError], ...] = (
    NoCredentialsError,
    PartialCredentialsError,
    ParamValidationError,
)


def _retried(exc: Exception) -> bool:
    """Whether the SDK had sent the request more than once before this error: only then can a 412
    be the answer to our own earlier attempt (a first attempt's 412 is a real second writer)."""
    if not isinstance(exc, ClientError):
        return False
    return int(exc.response.get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0) > 0


def storage_error(op: str, where: str, exc: Exception, key: str = "") -> StorageError:
    """Map an SDK error to the storage taxonomy, with the right ``retriable`` flag.

    Not retriable: permissions and credentials (403, AccessDenied, InvalidAccessKeyId, ...), a
    missing bucket, requests the server rejects as malformed. Retriable: 5xx, throttling (503
    SlowDown), timeouts, connection errors. 404/412/416 become their own (non-retriable) types.
    """
    if isinstance(exc, ClientError):
        code, status = _code(exc), _status(exc)
        if code == "NoSuchBucket":
            return StorageError(f"S3 {op} {where} failed: NoSuchBucket", retriable=False)
        if code in {"NoSuchKey", "404", "NotFound"}:
            return ObjectNotFoundError(key or where)
        if code in {"PreconditionFailed", "412"}:
            return ObjectExistsError(key or where)
        if code in {"InvalidRange", "416"}:
            return InvalidRangeError(key or where, str(exc))
        if code in PERMANENT_CODES or status == 403:
            return StorageError(f"S3 {op} {where} failed: {code}", retriable=False)
        retriable = code in TRANSIENT_CODES or status >= 500 or status in {408, 409, 429} or status == 0
        return StorageError(f"S3 {op} {where} failed: {code}: {exc}", retriable=retriable)
    if isinstance(exc, _PERMANENT_SDK_ERRORS):
        return StorageError(f"S3 {op} {where} failed: {type(exc).__name__}: {exc}", retriable=False)
    # Timeouts, refused or reset connections, truncated bodies: the request may succeed next time.
    return StorageError(f"S3 {op} {where} failed: {type(exc).__name__}: {exc}", retriable=True)


class S3ChunkStorage(ChunkStorage):
    supports_concat = True
    lists_folders = True

    def __init__(self, options: S3Options, client: S3Client | None = None) -> None:
        if options.part_size < MIN_PART_SIZE:
            raise ValueError(f"S3 part size must be at least {MIN_PART_SIZE} bytes")
        self.options = options
        self.bucket = options.bucket
        self._client: S3Client = client or new_s3_client(options)
        count_requests(self._client)
        label_parts(self._client)
        self._parts_pool = ThreadPoolExecutor(
            max_workers=options.max_concurrency, thread_name_prefix="s3-part"
        )

    @property
    def client(self) -> S3Client:
        return self._client

    def _fail(self, op: str, key: str, exc: Exception) -> StorageError:
        return storage_error(op, f"{self.bucket}/{key}", exc, key)

    # -- ChunkStorage ---------------------------------------------------------------------------

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        size = sum(len(memoryview(p).cast("B")) for p in parts)
        if size <= self.options.multipart_threshold:
            try:
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=cast(IO[bytes], ViewsReader(parts)),
                    ContentLength=size,
                    ContentType=OBJECT_CONTENT_TYPE,
                    IfNoneMatch="*",
                    **self.options.sse_args(),
                )
            except (ClientError, BotoCoreError) as exc:
                err = self._fail("put", key, exc)
                if isinstance(err, ObjectExistsError) and _retried(exc) and self._landed_earlier(key, size):
                    return ChunkInfo(key, size)
                raise err from exc
            return ChunkInfo(key, size)
        return self._create_multipart(key, parts, size)

    def _landed_earlier(self, key: str, size: int) -> bool:
        """After the SDK's retry of a conditional create got 412 (or the completion's upload is
        gone): did the earlier attempt of this very request land, its answer lost on the way back?

        Keys carry a fresh UUID per copy attempt, so no other writer ever creates this key; the
        SDK's own retry of a request whose response was lost is the only way to find it already
        there. The stored size confirms it; anything else stays an error.
        """
        info = self.stat(key)
        if info is not None and info.size == size:
            log.info("S3 create of %s: an earlier attempt stored it (response lost); going on", key)
            return True
        return False

    def _multipart(
        self,
        op: str,
        key: str,
        upload_parts: Callable[[str], list[CompletedPartTypeDef]],
        size: int | None = None,
    ) -> None:
        """Create a multipart upload, let ``upload_parts(upload_id)`` fill it, complete it
        conditionally (never over an existing object); abort on any failure."""
        try:
            upload_id = self._client.create_multipart_upload(
                Bucket=self.bucket, Key=key, ContentType=OBJECT_CONTENT_TYPE, **self.options.sse_args()
            )["UploadId"]
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("create multipart", key, exc) from exc
        try:
            done = upload_parts(upload_id)
            self._client.complete_multipart_upload(
                Bucket=self.bucket,
                Key=key,
                UploadId=upload_id,
                MultipartUpload={"Parts": done},
                IfNoneMatch="*",
            )
        except (ClientError, BotoCoreError) as exc:
            err = self._fail(op, key, exc)
            lost = isinstance(err, ObjectExistsError) or (
                isinstance(exc, ClientError) and _code(exc) == "NoSuchUpload"
            )
            if lost and _retried(exc) and size is not None and self._landed_earlier(key, size):
                return
            self._abort(key, upload_id)
            raise err from exc
        except BaseException:
            self._abort(key, upload_id)
            raise

    def _create_multipart(self, key: str, parts: Sequence[Buffer], size: int) -> ChunkInfo:
        groups = split_parts(parts, self.options.part_size)

        def upload(upload_id: str) -> list[CompletedPartTypeDef]:
            def send(number: int, group: list[memoryview]) -> CompletedPartTypeDef:
                resp = self._client.upload_part(
                    Bucket=self.bucket,
                    Key=key,
                    UploadId=upload_id,
                    PartNumber=number,
                    Body=cast(IO[bytes], ViewsReader(group)),
                    ContentLength=sum(len(v) for v in group),
                )
                return {"PartNumber": number, "ETag": resp["ETag"]}

            futures = [self._parts_pool.submit(send, n, g) for n, g in enumerate(groups, start=1)]
            return [f.result() for f in futures]

        self._multipart("multipart upload", key, upload, size)
        return ChunkInfo(key, size)

    def _abort(self, key: str, upload_id: str) -> None:
        try:
            self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except (ClientError, BotoCoreError) as exc:
            log.warning("could not abort multipart upload of %s (%s); a bucket lifecycle rule will", key, exc)

    def read(self, key: str, offset: int, length: int) -> bytes:
        if offset < 0 or length <= 0:
            raise InvalidRangeError(key, f"offset {offset}, length {length}")
        try:
            resp = self._client.get_object(
                Bucket=self.bucket, Key=key, Range=f"bytes={offset}-{offset + length - 1}"
            )
            data = resp["Body"].read()
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("get", key, exc) from exc
        if len(data) != length:
            raise InvalidRangeError(key, f"asked {length} bytes at {offset}, got {len(data)}")
        return data

    def stat(self, key: str) -> ChunkInfo | None:
        try:
            resp = self._client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            err = self._fail("head", key, exc)
            if isinstance(err, ObjectNotFoundError):
                return None
            raise err from exc
        except BotoCoreError as exc:
            raise self._fail("head", key, exc) from exc
        modified = resp.get("LastModified")
        return ChunkInfo(
            key, int(resp["ContentLength"]), int(modified.timestamp() * 1000) if modified else None
        )

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            err = self._fail("delete", key, exc)
            if not isinstance(err, ObjectNotFoundError):
                raise err from exc
        except BotoCoreError as exc:
            raise self._fail("delete", key, exc) from exc

    def delete_many(self, keys: Iterable[str]) -> None:
        """DeleteObjects, up to ``DELETE_BATCH`` keys a request (quiet: only failures are listed).
        Raises StorageError naming every key not deleted: those the answers list as failed, and
        every key of a request that failed."""
        failed: dict[str, StorageError] = {}
        unique = list(dict.fromkeys(keys))
        for at in range(0, len(unique), DELETE_BATCH):
            batch = unique[at : at + DELETE_BATCH]
            try:
                resp = self._client.delete_objects(
                    Bucket=self.bucket,
                    Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True},
                )
            except (ClientError, BotoCoreError) as exc:
                failed.update(dict.fromkeys(batch, self._fail("delete objects", batch[0], exc)))
                continue
            for error in resp.get("Errors", []):
                code, k = error.get("Code", ""), error.get("Key", "")
                if code in {"NoSuchKey", "404"}:
                    continue  # missing: what a delete wants
                failed[k] = StorageError(
                    f"S3 delete {self.bucket}/{k} failed: {code}: {error.get('Message', '')}",
                    retriable=code not in PERMANENT_CODES,
                )
        if failed:
            raise not_deleted(failed)

    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                for obj in page.get("Contents", []):
                    modified = obj.get("LastModified")
                    yield ChunkInfo(
                        obj["Key"], int(obj["Size"]), int(modified.timestamp() * 1000) if modified else None
                    )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from exc

    def list_folders(self, prefix: str) -> tuple[builtins.list[str], builtins.list[ChunkInfo]]:
        """The folders directly under ``prefix`` and the objects directly in it: a listing with the
        delimiter ``/`` (a folder's entries, not everything under it)."""
        folders: builtins.list[str] = []
        chunks: builtins.list[ChunkInfo] = []
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix, Delimiter="/"
            ):
                folders.extend(common["Prefix"] for common in page.get("CommonPrefixes", []))
                for obj in page.get("Contents", []):
                    modified = obj.get("LastModified")
                    chunks.append(
                        ChunkInfo(
                            obj["Key"],
                            int(obj["Size"]),
                            int(modified.timestamp() * 1000) if modified else None,
                        )
                    )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from exc
        return folders, chunks

    def concat(self, target: str, sources: Sequence[str]) -> ChunkInfo:
        """Server-side concat with UploadPartCopy (every source but the last must be >= 5 MiB)."""
        infos = []
        for s in sources:
            info = self.stat(s)
            if info is None:
                raise ObjectNotFoundError(s)
            infos.append(info)
        if any(i.size < MIN_PART_SIZE for i in infos[:-1]):
            raise StorageError(
                "S3 concat needs every source but the last to be at least 5 MiB", retriable=False
            )

        def copy_parts(upload_id: str) -> list[CompletedPartTypeDef]:
            parts: list[CompletedPartTypeDef] = []
            for number, info in enumerate(infos, start=1):
                resp = self._client.upload_part_copy(
                    Bucket=self.bucket,
                    Key=target,
                    UploadId=upload_id,
                    PartNumber=number,
                    CopySource={"Bucket": self.bucket, "Key": info.key},
                )
                parts.append({"PartNumber": number, "ETag": resp["CopyPartResult"]["ETag"]})
            return parts

        self._multipart("concat", target, copy_parts, sum(i.size for i in infos))
        return ChunkInfo(target, sum(i.size for i in infos))

    # -- abandoned multipart uploads (see processor/lifecycle/multipart_sweep.py) ------------------

    def list_multipart_uploads(self, prefix: str) -> builtins.list[MultipartUpload]:
        """Multipart uploads under ``prefix`` that were started and neither completed nor aborted."""
        out: builtins.list[MultipartUpload] = []
        try:
            for page in self._client.get_paginator("list_multipart_uploads").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                for up in page.get("Uploads", []):
                    out.append(
                        MultipartUpload(up["Key"], up["UploadId"], int(up["Initiated"].timestamp() * 1000))
                    )
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list multipart uploads", prefix, exc) from exc
        return out

    def abort_multipart_upload(self, key: str, upload_id: str) -> None:
        """Abort one multipart upload; one that is already gone is not an error."""
        try:
            self._client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
        except ClientError as exc:
            if _code(exc) in {"NoSuchUpload", "404"}:
                return
            raise self._fail("abort multipart upload", key, exc) from exc
        except BotoCoreError as exc:
            raise self._fail("abort multipart upload", key, exc) from exc

    # -- lifecycle --------------------------------------------------------------------------------

    def check_bucket(self) -> None:
        """Fail fast, with a clear error naming what to change, when the endpoint or bucket cannot be
        reached or used, or no credentials were found."""
        endpoint = self.options.endpoint_url or "(AWS default)"
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code, status = _code(exc), _status(exc)
            # HEAD has no body: 404 is the missing bucket, 403 no permission; 5xx may pass.
            retriable = status >= 500 or code in TRANSIENT_CODES
            if status == 404:
                raise StorageError(
                    f"S3 bucket {self.bucket!r} does not exist at {endpoint} (PROCESSOR_S3_BUCKET; "
                    "the bucket must exist)",
                    retriable=False,
                ) from exc
            raise StorageError(
                f"S3 bucket {self.bucket!r} is not usable: {code} (PROCESSOR_S3_BUCKET, and the AWS "
                "credentials' permissions on it)",
                retriable=retriable,
            ) from exc
        except (NoCredentialsError, PartialCredentialsError) as exc:
            raise StorageError(
                f"no AWS credentials for S3 at {endpoint} ({exc}): set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY, or AWS_PROFILE, or run with an IAM role (IRSA, instance profile)",
                retriable=False,
            ) from exc
        except BotoCoreError as exc:
            raise StorageError(
                f"S3 endpoint {endpoint} is unreachable: {exc} (PROCESSOR_S3_ENDPOINT_URL)"
            ) from exc

    def create_bucket(self) -> None:
        """Create the bucket unless it exists (the embedded dev stack; production buckets are
        provisioned by their operators)."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self._client.create_bucket(Bucket=self.bucket)
            except (ClientError, BotoCoreError) as exc:
                raise self._fail("create bucket", "", exc) from exc
        except BotoCoreError as exc:
            raise self._fail("head bucket", "", exc) from exc

    def close(self) -> None:
        self._parts_pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()


def s3_storage(bucket: str, endpoint_url: str | None, region: str | None, **tuning: Any) -> S3ChunkStorage:
    """The one builder of S3 storage (the wiring's, the Spark sources', the local stack's): the
    bucket and where it is, and ``tuning`` (the other :class:`S3Options` fields) where a caller
    needs its own concurrency, timeouts, retries, credentials or server-side encryption."""
    return S3ChunkStorage(S3Options(bucket=bucket, endpoint_url=endpoint_url, region=region, **tuning))
