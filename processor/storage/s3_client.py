"""The S3 client every S3ChunkStorage talks through: its options (:class:`S3Options`) and the one
place a boto3 client is made (:func:`new_s3_client`), with the request counting and the part
labels the storage relies on. Credentials come from the standard AWS chain (environment, profile,
instance role) unless the options name a key pair (the local stack's)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import boto3
from botocore.config import Config
from botocore.exceptions import ProfileNotFound

from processor import metrics
from processor.errors import ConfigError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


# Every object is labelled with S3's own default type for bytes. S3-compatible stores guess from an
# unlabelled (or "application/octet-stream") body whether to compress it: SeaweedFS gzips each 4 MiB
# chunk of compressible data (uncompressed records) and then inflates a whole chunk for every ranged
# read of it. Measured on SeaweedFS 4.48: 1 MiB ranged reads of text-like objects p50 62 ms and p90
# 116 ms unlabelled, 7.4 ms and 9.9 ms labelled so; that was the slow tail of random archive reads.
OBJECT_CONTENT_TYPE = "binary/octet-stream"


def label_parts(client: Any) -> None:
    """UploadPart has no ContentType parameter, yet SeaweedFS decides per part whether to compress
    it: each part request carries the same label as its upload."""

    def label(params: dict[str, Any], **_: Any) -> None:
        params.setdefault("headers", {})["Content-Type"] = OBJECT_CONTENT_TYPE

    client.meta.events.register("before-call.s3.UploadPart", label)


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
    # None: the standard AWS credential chain (environment, profile, instance role)
    access_key_id: str | None = None
    secret_access_key: str | None = None
    # Server-side encryption of every object written: None, "AES256" (SSE-S3) or "aws:kms" (SSE-KMS
    # under ``sse_kms_key_id``, or the bucket's default key; ``sse_bucket_key``: S3 Bucket Keys, far
    # fewer KMS requests). Reads need nothing more (S3 decrypts; SSE-KMS needs kms:Decrypt).
    sse: str | None = None
    sse_kms_key_id: str | None = None
    sse_bucket_key: bool = True

    def sse_args(self) -> dict[str, Any]:
        """The PutObject / CreateMultipartUpload parameters of the server-side encryption asked."""
        if self.sse is None:
            return {}
        args: dict[str, Any] = {"ServerSideEncryption": self.sse}
        if self.sse == "aws:kms":
            args["BucketKeyEnabled"] = self.sse_bucket_key
            if self.sse_kms_key_id:
                args["SSEKMSKeyId"] = self.sse_kms_key_id
        return args


def count_requests(client: Any) -> None:
    """Prometheus counters of every S3 attempt, error and SDK retry, by operation, from botocore's
    event hooks (so retries inside the SDK are seen, which wrapping our calls would miss)."""

    def before_send(request: Any, event_name: str = "", **_: Any) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        metrics.S3_REQUESTS.labels(operation).inc()
        attempt = (getattr(request, "context", None) or {}).get("retries", {}).get("attempt", 1)
        if attempt > 1:
            metrics.S3_RETRIES.labels(operation).inc()

    def needs_retry(
        response: Any = None, caught_exception: Any = None, event_name: str = "", **_: Any
    ) -> None:
        operation = event_name.rsplit(".", 1)[-1]
        if caught_exception is not None:
            metrics.S3_ERRORS.labels(operation, type(caught_exception).__name__).inc()
        elif response is not None and response[0].status_code >= 400:
            parsed = response[1] if isinstance(response[1], dict) else {}
            code = parsed.get("Error", {}).get("Code") or str(response[0].status_code)
            metrics.S3_ERRORS.labels(operation, str(code)).inc()
        # None: the decision to retry stays with botocore's own handler

    client.meta.events.register("before-send.s3.*", before_send)
    client.meta.events.register("needs-retry.s3.*", needs_retry)


def new_s3_client(options: S3Options) -> S3Client:
    """The S3 client of the standard AWS chain; an AWS_PROFILE that names no profile is a
    configuration error naming it (botocore raises it as the client is made)."""
    try:
        session = boto3.session.Session()
        return session.client(
            "s3",
            endpoint_url=options.endpoint_url,
            region_name=options.region,
            aws_access_key_id=options.access_key_id,
            aws_secret_access_key=options.secret_access_key,
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
    except ProfileNotFound as exc:
        raise ConfigError(
            f"AWS_PROFILE: {exc}; name a profile of the AWS config files (~/.aws/config, "
            "~/.aws/credentials), or unset it"
        ) from None
