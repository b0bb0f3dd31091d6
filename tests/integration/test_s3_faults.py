"""S3ChunkStorage against the real SeaweedFS through the fault proxy: lost responses, error flags."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from processor.devstack.stack import StackInfo
from processor.errors import ObjectExistsError, StorageError
from processor.storage.s3 import MIN_PART_SIZE, S3ChunkStorage
from processor.storage.s3_client import S3Options
from tests.support.fault_proxy import FaultProxy, FaultRule, error_rule, slowdown_rule

pytestmark = pytest.mark.integration


def _storage(endpoint: str, bucket: str, **kw: object) -> S3ChunkStorage:
    options = S3Options(
        bucket=bucket,
        endpoint_url=endpoint,
        region="us-east-1",
        part_size=MIN_PART_SIZE,
        multipart_threshold=MIN_PART_SIZE,
        **kw,  # type: ignore[arg-type]
    )
    return S3ChunkStorage(options)


@pytest.fixture
def proxied(proxied_stack: StackInfo) -> Iterator[S3ChunkStorage]:
    s = _storage(proxied_stack.s3_endpoint_url, proxied_stack.bucket, read_timeout_s=2.0)
    yield s
    s.close()


@pytest.fixture
def direct(local_stack: StackInfo) -> Iterator[S3ChunkStorage]:
    s = _storage(local_stack.s3_endpoint_url, local_stack.bucket)
    yield s
    s.close()


def _key() -> str:
    return f"s3-faults/{uuid.uuid4()}"


def test_lost_put_response_is_recognised_as_our_own_earlier_attempt(
    fault_proxy: FaultProxy, proxied: S3ChunkStorage, direct: S3ChunkStorage
) -> None:
    key = _key()
    with fault_proxy.rule(FaultRule("drop", frozenset({"put"}), limit=1)) as rule:
        info = proxied.create(key, [b"segment-", b"bytes"])
    assert rule.applied == 1 and fault_proxy.stats.seen["put"] == 2  # the SDK's retry got 412
    assert info.size == 13
    assert direct.read(key, 0, 13) == b"segment-bytes"


def test_lost_multipart_completion_is_recognised(
    fault_proxy: FaultProxy, proxied: S3ChunkStorage, direct: S3ChunkStorage
) -> None:
    key = _key()
    data = os.urandom(MIN_PART_SIZE + 1000)
    with fault_proxy.rule(FaultRule("drop", frozenset({"complete_multipart"}), limit=1)) as rule:
        info = proxied.create(key, [data])
    assert rule.applied == 1
    assert info.size == len(data)
    assert direct.read(key, MIN_PART_SIZE, 1000) == data[MIN_PART_SIZE:]


def test_a_412_from_a_real_second_writer_still_fails(proxied: S3ChunkStorage) -> None:
    key = _key()
    proxied.create(key, [b"first"])
    with pytest.raises(ObjectExistsError):
        proxied.create(key, [b"second writer"])


def test_a_failed_part_is_retried_by_the_sdk_and_the_upload_completes(
    fault_proxy: FaultProxy, proxied: S3ChunkStorage, direct: S3ChunkStorage
) -> None:
    key = _key()
    data = os.urandom(MIN_PART_SIZE * 2 + 10)
    with fault_proxy.rule(error_rule({"upload_part"}, limit=1)) as rule:
        proxied.create(key, [data])
    assert rule.applied == 1
    assert direct.stat(key) is not None and direct.stat(key).size == len(data)  # type: ignore[union-attr]


def _raised(proxy: FaultProxy, rule: FaultRule, call: Callable[[], object]) -> StorageError:
    with proxy.rule(rule), pytest.raises(StorageError) as exc:
        call()
    return exc.value


def test_errors_carry_the_retriable_flag(fault_proxy: FaultProxy, local_stack: StackInfo) -> None:
    once = _storage(fault_proxy.endpoint_url, local_stack.bucket, max_attempts=1, read_timeout_s=0.5)
    try:
        key = _key()
        put = lambda: once.create(key, [b"x"])  # noqa: E731
        assert not _raised(fault_proxy, error_rule({"put"}, status=403, code="AccessDenied"), put).retriable
        assert not _raised(fault_proxy, error_rule({"put"}, status=404, code="NoSuchBucket"), put).retriable
        assert not _raised(
            fault_proxy, error_rule({"put"}, status=403, code="InvalidAccessKeyId"), put
        ).retriable
        assert _raised(fault_proxy, error_rule({"put"}), put).retriable
        assert _raised(fault_proxy, slowdown_rule({"delete"}), lambda: once.delete(key)).retriable
        delay = FaultRule("delay", frozenset({"get"}), delay_s=1.5)
        assert _raised(fault_proxy, delay, lambda: once.read(key, 0, 1)).retriable
        fault_proxy.down("refuse")
        with pytest.raises(StorageError) as down:
            once.stat(key)
        assert down.value.retriable is True
        fault_proxy.up()
        once.create(key, [b"x"])
        assert once.read(key, 0, 1) == b"x"
    finally:
        once.close()


def test_a_failed_multipart_upload_is_aborted(fault_proxy: FaultProxy, local_stack: StackInfo) -> None:
    once = _storage(fault_proxy.endpoint_url, local_stack.bucket, max_attempts=1)
    try:
        key = _key()
        with fault_proxy.rule(error_rule({"upload_part"})), pytest.raises(StorageError) as exc:
            once.create(key, [os.urandom(MIN_PART_SIZE * 2)])
        assert exc.value.retriable is True
        assert fault_proxy.stats.forwarded["abort_multipart"] == 1
        uploads = once.client.list_multipart_uploads(Bucket=local_stack.bucket, Prefix=key)
        assert not uploads.get("Uploads")
        assert once.stat(key) is None
    finally:
        once.close()
