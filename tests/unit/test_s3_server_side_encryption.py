"""S3 server-side encryption (PROCESSOR_S3_SSE): every object the storage writes, in one PUT or in
parts, asks for it, and reads need nothing more. On moto's S3 and KMS."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws

from processor.config import Settings
from processor.storage.s3 import S3ChunkStorage
from processor.storage.s3_client import S3Options
from processor.wiring.storage import build_storage

MiB = 1024 * 1024


@pytest.mark.parametrize("size", [1000, 7 * MiB], ids=["one-put", "multipart"])
def test_sse_kms_with_a_key_and_bucket_keys(size: int) -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="sse")
        key_id = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["KeyId"]
        options = S3Options(
            bucket="sse", part_size=5 * MiB, multipart_threshold=6 * MiB, sse="aws:kms", sse_kms_key_id=key_id
        )
        storage = S3ChunkStorage(options, s3)
        data = bytes(range(256)) * (size // 256 + 1)
        storage.create("k", [data[:size]])
        head = s3.head_object(Bucket="sse", Key="k")
        assert head["ServerSideEncryption"] == "aws:kms"
        assert key_id in head["SSEKMSKeyId"]
        if size < options.multipart_threshold:  # moto keeps the flag of single PUTs only
            assert head.get("BucketKeyEnabled") is True
        assert storage.read("k", 10, 20) == data[10:30]


def test_sse_s3_from_the_settings() -> None:
    with mock_aws():
        settings = Settings(s3_bucket="sse-settings", s3_region="us-east-1", s3_sse="AES256")
        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="sse-settings")
        storage = build_storage(settings)
        assert isinstance(storage, S3ChunkStorage)
        storage.create("k", [b"x" * 100])
        assert storage.client.head_object(Bucket="sse-settings", Key="k")["ServerSideEncryption"] == "AES256"


def test_a_kms_key_id_without_sse_kms_is_refused() -> None:
    with pytest.raises(ValueError, match="PROCESSOR_S3_SSE=aws:kms"):
        Settings(s3_sse="AES256", s3_sse_kms_key_id="k")
