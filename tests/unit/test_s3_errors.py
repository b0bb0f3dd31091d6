"""S3 errors map to the storage taxonomy with the right ``retriable`` flag (no server needed)."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

from processor.errors import InvalidRangeError, ObjectExistsError, ObjectNotFoundError, StorageError
from processor.storage.s3 import storage_error


def client_error(code: str, status: int) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "PutObject")


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("AccessDenied", 403),
        ("InvalidAccessKeyId", 403),
        ("SignatureDoesNotMatch", 403),
        ("NoSuchBucket", 404),
        ("403", 403),  # HEAD answers carry no body, only the status
        ("Forbidden", 403),
        ("MalformedXML", 400),
    ],
)
def test_permanent_errors_are_not_retriable(code: str, status: int) -> None:
    err = storage_error("put", "b/k", client_error(code, status), "k")
    assert type(err) is StorageError and err.retriable is False


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("InternalError", 500),
        ("SlowDown", 503),
        ("ServiceUnavailable", 503),
        ("503", 503),
        ("BadGateway", 502),
        ("RequestTimeout", 400),
        ("Throttling", 400),
        ("TooManyRequests", 429),
    ],
)
def test_transient_errors_are_retriable(code: str, status: int) -> None:
    err = storage_error("put", "b/k", client_error(code, status), "k")
    assert type(err) is StorageError and err.retriable is True


@pytest.mark.parametrize(
    "exc",
    [
        ReadTimeoutError(endpoint_url="http://x"),
        ConnectTimeoutError(endpoint_url="http://x"),
        EndpointConnectionError(endpoint_url="http://x"),
        ConnectionClosedError(endpoint_url="http://x"),
    ],
)
def test_timeouts_and_connection_errors_are_retriable(exc: Exception) -> None:
    err = storage_error("get", "b/k", exc, "k")
    assert err.retriable is True


def test_missing_credentials_are_not_retriable() -> None:
    assert storage_error("get", "b/k", NoCredentialsError(), "k").retriable is False


def test_object_level_answers_keep_their_types() -> None:
    assert isinstance(storage_error("get", "b/k", client_error("NoSuchKey", 404), "k"), ObjectNotFoundError)
    assert isinstance(
        storage_error("put", "b/k", client_error("PreconditionFailed", 412), "k"), ObjectExistsError
    )
    assert isinstance(storage_error("get", "b/k", client_error("InvalidRange", 416), "k"), InvalidRangeError)
