"""ChunkStorage on S3 (boto3). The only module that imports the AWS SDK.

- ``create`` is conditional (``If-None-Match: *``) for single PUTs and for multipart completion, so a
  second writer gets ``ObjectExistsError`` instead of overwriting.
- Objects above ``multipart_threshold`` go up as multipart uploads whose parts are sent in parallel
  from memory views of the segment's blocks (no joined copy); a failed upload is aborted.
- Reads are ranged GETs. Errors map to the storage taxonomy: 404 -> ObjectNotFoundError,
  412 -> ObjectExistsError, 416 -> InvalidRangeError, the rest -> StorageError.
- Credentials come from the standard AWS chain (environment, profile, instance role).
"""

from __future__ import annotations

import builtins
import logging
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, cast

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from processor.errors import InvalidRangeError, ObjectExistsError, ObjectNotFoundError, StorageError
from processor.storage.chunk_storage import Buffer, ChainedReader, ChunkInfo, ChunkStorage, split_parts

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

log = logging.getLogger(__name__)

MIN_PART_SIZE = 5 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class MultipartUpload:
    key: str
    upload_id: str
    initiated_ms: int


@dataclass(frozen=True, slots=True)
class S3Options:
    bucket: str
    endpoint_url: str | None = None
    region: str | None = None
    part_size: int = 16 * 1024 * 1024
    multipart_threshold: int = 32 * 1024 * 1024
    max_concurrency: int = 16
    connect_timeout_s: float = 5.0
    read_timeout_s: float = 60.0
    max_attempts: int = 5


def _code(exc: ClientError) -> str:
    err = exc.response.get("Error", {})
    return str(err.get("Code", "")) or str(exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


class S3ChunkStorage(ChunkStorage):
    supports_concat = True

    def __init__(self, options: S3Options, client: S3Client | None = None) -> None:
        if options.part_size < MIN_PART_SIZE:
            raise ValueError(f"S3 part size must be at least {MIN_PART_SIZE} bytes")
        self.options = options
        self.bucket = options.bucket
        self._client: S3Client = client or boto3.session.Session().client(
            "s3",
            endpoint_url=options.endpoint_url,
            region_name=options.region,
            config=Config(
                max_pool_connections=options.max_concurrency + 4,
                connect_timeout=options.connect_timeout_s,
                read_timeout=options.read_timeout_s,
                retries={"max_attempts": options.max_attempts, "mode": "standard"},
                # Payload bytes are not SHA-256 signed (it doubled the upload CPU): every block and
                # index carries CRC-32s that each read verifies, and TLS protects the transfer.
                s3={
                    "payload_signing_enabled": False,
                    **({"addressing_style": "path"} if options.endpoint_url else {}),
                },
                request_checksum_calculation="when_required",
                response_checksum_validation="when_required",
            ),
        )
        self._parts_pool = ThreadPoolExecutor(
            max_workers=options.max_concurrency, thread_name_prefix="s3-part"
        )

    @property
    def client(self) -> S3Client:
        return self._client

    def _fail(self, op: str, key: str, exc: Exception) -> StorageError:
        if isinstance(exc, ClientError):
            code = _code(exc)
            if code in {"NoSuchKey", "404", "NotFound"}:
                return ObjectNotFoundError(key)
            if code in {"PreconditionFailed", "412", "ConditionalRequestConflict"}:
                return ObjectExistsError(key)
            if code in {"InvalidRange", "416"}:
                return InvalidRangeError(key, str(exc))
            if code in {"NoSuchBucket", "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch"}:
                return StorageError(f"S3 {op} {self.bucket}/{key} failed: {code}", retriable=False)
            return StorageError(f"S3 {op} {self.bucket}/{key} failed: {code}: {exc}")
        return StorageError(f"S3 {op} {self.bucket}/{key} failed: {type(exc).__name__}: {exc}")

    # -- ChunkStorage ---------------------------------------------------------------------------

    def create(self, key: str, parts: Sequence[Buffer]) -> ChunkInfo:
        size = sum(len(memoryview(p).cast("B")) for p in parts)
        if size <= self.options.multipart_threshold:
            try:
                self._client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=cast(IO[bytes], ChainedReader(parts)),
                    ContentLength=size,
                    IfNoneMatch="*",
                )
            except (ClientError, BotoCoreError) as exc:
                raise self._fail("put", key, exc) from exc
            return ChunkInfo(key, size)
        return self._create_multipart(key, parts, size)

    def _multipart(
        self, op: str, key: str, upload_parts: Callable[[str], list[CompletedPartTypeDef]]
    ) -> None:
        """Create a multipart upload, let ``upload_parts(upload_id)`` fill it, complete it
        conditionally (never over an existing object); abort on any failure."""
        try:
            upload_id = self._client.create_multipart_upload(Bucket=self.bucket, Key=key)["UploadId"]
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
            self._abort(key, upload_id)
            raise self._fail(op, key, exc) from exc
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
                    Body=cast(IO[bytes], ChainedReader(group)),
                    ContentLength=sum(len(v) for v in group),
                )
                return {"PartNumber": number, "ETag": resp["ETag"]}

            futures = [self._parts_pool.submit(send, n, g) for n, g in enumerate(groups, start=1)]
            return [f.result() for f in futures]

        self._multipart("multipart upload", key, upload)
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
        return ChunkInfo(key, int(resp["ContentLength"]))

    def delete(self, key: str) -> None:
        try:
            self._client.delete_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            err = self._fail("delete", key, exc)
            if not isinstance(err, ObjectNotFoundError):
                raise err from exc
        except BotoCoreError as exc:
            raise self._fail("delete", key, exc) from exc

    def list(self, prefix: str) -> Iterator[ChunkInfo]:
        try:
            for page in self._client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=prefix
            ):
                for obj in page.get("Contents", []):
                    yield ChunkInfo(obj["Key"], int(obj["Size"]))
        except (ClientError, BotoCoreError) as exc:
            raise self._fail("list", prefix, exc) from exc

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

        self._multipart("concat", target, copy_parts)
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
        """Fail fast, with a clear error, when the endpoint or bucket cannot be reached."""
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            code = _code(exc)
            raise StorageError(f"S3 bucket {self.bucket!r} is not usable: {code}", retriable=False) from exc
        except BotoCoreError as exc:
            raise StorageError(
                f"S3 endpoint {self.options.endpoint_url or '(AWS default)'} is unreachable: {exc}"
            ) from exc

    def ensure_bucket(self) -> None:
        try:
            self._client.head_bucket(Bucket=self.bucket)
        except ClientError:
            try:
                self._client.create_bucket(Bucket=self.bucket)
            except (ClientError, BotoCoreError) as exc:
                raise self._fail("create bucket", "", exc) from exc

    def close(self) -> None:
        self._parts_pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()
