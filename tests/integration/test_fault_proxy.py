"""The fault-injecting S3 proxy itself, against the real SeaweedFS of the local stack."""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError, ConnectionClosedError, EndpointConnectionError, ReadTimeoutError

from processor.devstack import servers, stack
from tests.support.fault_proxy import FaultProxy, FaultRule, error_rule, request_kind, slowdown_rule

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

pytestmark = pytest.mark.integration


def _client(endpoint: str, read_timeout: float = 5.0) -> S3Client:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=servers.DEV_ACCESS_KEY,
        aws_secret_access_key=servers.DEV_SECRET_KEY,
        region_name="us-east-1",
        config=Config(
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=2,
            read_timeout=read_timeout,
            s3={"addressing_style": "path"},
        ),
    )


def _key() -> str:
    return f"proxy-test/{uuid.uuid4()}"


def test_request_kinds() -> None:
    assert request_kind("PUT", "/b/k", {}, {}) == "put"
    assert request_kind("PUT", "/b", {}, {}) == "other"
    assert request_kind("PUT", "/b/k", {"partNumber": "1", "uploadId": "u"}, {}) == "upload_part"
    assert (
        request_kind("PUT", "/b/k", {"partNumber": "1", "uploadId": "u"}, {"x-amz-copy-source": "b/x"})
        == "upload_part_copy"
    )
    assert request_kind("POST", "/b/k", {"uploads": ""}, {}) == "create_multipart"
    assert request_kind("POST", "/b/k", {"uploadId": "u"}, {}) == "complete_multipart"
    assert request_kind("POST", "/b", {"delete": ""}, {}) == "delete_objects"
    assert request_kind("DELETE", "/b/k", {"uploadId": "u"}, {}) == "abort_multipart"
    assert request_kind("DELETE", "/b/k", {}, {}) == "delete"
    assert request_kind("GET", "/b/k", {}, {}) == "get"
    assert request_kind("GET", "/b", {"list-type": "2"}, {}) == "list"
    assert request_kind("HEAD", "/b/k", {}, {}) == "head"


def test_passthrough_keeps_every_operation_working(
    local_stack: stack.StackInfo, fault_proxy: FaultProxy
) -> None:
    c = _client(fault_proxy.endpoint_url)
    bucket, key = local_stack.bucket, _key()
    c.put_object(Bucket=bucket, Key=key, Body=b"hello world", IfNoneMatch="*")
    assert c.head_object(Bucket=bucket, Key=key)["ContentLength"] == 11
    got = c.get_object(Bucket=bucket, Key=key, Range="bytes=6-10")["Body"].read()
    assert got == b"world"
    with pytest.raises(ClientError) as exc:
        c.put_object(Bucket=bucket, Key=key, Body=b"again", IfNoneMatch="*")
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412

    big = os.urandom(5 * 1024 * 1024 + 7)
    mkey = _key()
    upload = c.create_multipart_upload(Bucket=bucket, Key=mkey)["UploadId"]
    e1 = c.upload_part(Bucket=bucket, Key=mkey, UploadId=upload, PartNumber=1, Body=big)["ETag"]
    e2 = c.upload_part(Bucket=bucket, Key=mkey, UploadId=upload, PartNumber=2, Body=b"tail")["ETag"]
    c.complete_multipart_upload(
        Bucket=bucket,
        Key=mkey,
        UploadId=upload,
        MultipartUpload={"Parts": [{"PartNumber": 1, "ETag": e1}, {"PartNumber": 2, "ETag": e2}]},
    )
    assert c.get_object(Bucket=bucket, Key=mkey)["Body"].read() == big + b"tail"
    listed = c.list_objects_v2(Bucket=bucket, Prefix="proxy-test/")
    assert {key, mkey} <= {o["Key"] for o in listed["Contents"]}
    c.delete_object(Bucket=bucket, Key=key)
    with pytest.raises(ClientError):
        c.head_object(Bucket=bucket, Key=key)

    seen = fault_proxy.stats.seen
    for kind in (
        "put",
        "head",
        "get",
        "create_multipart",
        "upload_part",
        "complete_multipart",
        "list",
        "delete",
    ):
        assert seen[kind] >= 1, kind
    assert not fault_proxy.stats.faulted


def test_error_and_slowdown_rules_answer_s3_xml_without_forwarding(
    local_stack: stack.StackInfo, fault_proxy: FaultProxy
) -> None:
    c = _client(fault_proxy.endpoint_url)
    key = _key()
    with fault_proxy.rule(error_rule({"put"})), pytest.raises(ClientError) as exc:
        c.put_object(Bucket=local_stack.bucket, Key=key, Body=b"x")
    assert exc.value.response["Error"]["Code"] == "InternalError"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 500
    direct = _client(local_stack.s3_endpoint_url)
    with pytest.raises(ClientError):
        direct.head_object(Bucket=local_stack.bucket, Key=key)  # not stored

    c.put_object(Bucket=local_stack.bucket, Key=key, Body=b"x")
    with fault_proxy.rule(slowdown_rule({"get"})), pytest.raises(ClientError) as exc:
        c.get_object(Bucket=local_stack.bucket, Key=key)
    assert exc.value.response["Error"]["Code"] == "SlowDown"
    assert exc.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    assert c.get_object(Bucket=local_stack.bucket, Key=key)["Body"].read() == b"x"


def test_drop_stores_the_object_but_the_client_never_hears_back(
    local_stack: stack.StackInfo, fault_proxy: FaultProxy
) -> None:
    c = _client(fault_proxy.endpoint_url)
    key = _key()
    drop = FaultRule("drop", frozenset({"put"}), limit=1)
    with fault_proxy.rule(drop) as rule, pytest.raises(ConnectionClosedError):
        c.put_object(Bucket=local_stack.bucket, Key=key, Body=b"stored", IfNoneMatch="*")
    assert rule.applied == 1
    direct = _client(local_stack.s3_endpoint_url)
    assert direct.get_object(Bucket=local_stack.bucket, Key=key)["Body"].read() == b"stored"


def test_delay_makes_a_timeout_and_reset_cuts_the_connection(
    local_stack: stack.StackInfo, fault_proxy: FaultProxy
) -> None:
    c = _client(fault_proxy.endpoint_url, read_timeout=0.5)
    key = _key()
    c.put_object(Bucket=local_stack.bucket, Key=key, Body=b"x")
    delay = FaultRule("delay", frozenset({"head"}), delay_s=2.0)
    with fault_proxy.rule(delay), pytest.raises(ReadTimeoutError):
        c.head_object(Bucket=local_stack.bucket, Key=key)
    with fault_proxy.rule(FaultRule("reset", frozenset({"get"}))), pytest.raises(ConnectionClosedError):
        c.get_object(Bucket=local_stack.bucket, Key=key)
    assert c.head_object(Bucket=local_stack.bucket, Key=key)["ContentLength"] == 1


def test_share_and_limit_fault_only_some_requests(
    local_stack: stack.StackInfo, fault_proxy: FaultProxy
) -> None:
    c = _client(fault_proxy.endpoint_url)
    key = _key()
    c.put_object(Bucket=local_stack.bucket, Key=key, Body=b"x")
    failed = 0
    with fault_proxy.rule(error_rule({"head"}, share=0.5)):
        for _ in range(40):
            try:
                c.head_object(Bucket=local_stack.bucket, Key=key)
            except ClientError:
                failed += 1
    assert 5 <= failed <= 35
    with fault_proxy.rule(error_rule({"head"}, limit=2)) as rule:
        results = []
        for _ in range(4):
            try:
                c.head_object(Bucket=local_stack.bucket, Key=key)
                results.append(True)
            except ClientError:
                results.append(False)
    assert results == [False, False, True, True] and rule.applied == 2


def test_down_refuses_or_resets_and_up_restores(
    local_stack: stack.StackInfo, fault_proxy: FaultProxy
) -> None:
    c = _client(fault_proxy.endpoint_url)
    key = _key()
    c.put_object(Bucket=local_stack.bucket, Key=key, Body=b"x")
    fault_proxy.down("refuse")
    assert fault_proxy.is_down
    with pytest.raises(EndpointConnectionError):
        _client(fault_proxy.endpoint_url).get_object(Bucket=local_stack.bucket, Key=key)
    fault_proxy.up()
    assert c.get_object(Bucket=local_stack.bucket, Key=key)["Body"].read() == b"x"
    fault_proxy.down("reset")
    with pytest.raises(ConnectionClosedError):
        c.get_object(Bucket=local_stack.bucket, Key=key)
    fault_proxy.up()
    assert c.get_object(Bucket=local_stack.bucket, Key=key)["Body"].read() == b"x"
