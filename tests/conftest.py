"""Shared fixtures. Servers are started by the fixtures themselves, once per session, on free
loopback ports, and stopped by PID.

``PROCESSOR_TEST_STACK=testcontainers`` switches the stack to Apache Kafka and MinIO containers
where a Docker engine runs; without Docker that choice skips the integration tests, never fails.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor.devstack import stack
from tests.support.fault_proxy import FaultProxy


def _testcontainers_stack(tmp: Path) -> Iterator[stack.StackInfo]:
    try:
        import docker  # type: ignore[import-untyped]

        docker.from_env().ping()
    except Exception as exc:  # no engine here: skip, never fail
        pytest.skip(f"PROCESSOR_TEST_STACK=testcontainers but no Docker engine: {exc}")
    from testcontainers.kafka import KafkaContainer
    from testcontainers.minio import MinioContainer

    with KafkaContainer() as kafka, MinioContainer() as minio:
        cfg = minio.get_config()
        os.environ["AWS_ACCESS_KEY_ID"] = cfg["access_key"]
        os.environ["AWS_SECRET_ACCESS_KEY"] = cfg["secret_key"]
        client = minio.get_client()
        client.make_bucket(stack.DEFAULT_BUCKET)
        yield stack.StackInfo(
            str(tmp), kafka.get_bootstrap_server(), f"http://{cfg['endpoint']}", stack.DEFAULT_BUCKET
        )


@pytest.fixture(scope="session")
def local_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[stack.StackInfo]:
    root = tmp_path_factory.mktemp("stack")
    if os.environ.get("PROCESSOR_TEST_STACK") == "testcontainers":
        yield from _testcontainers_stack(root)
        return
    info = stack.start(root)
    saved = {k: os.environ.get(k) for k in info.env()}
    os.environ.update({k: v for k, v in info.env().items() if k.startswith("AWS_")})
    try:
        yield info
    finally:
        stack.stop(root)
        for k, v in saved.items():
            if k.startswith("AWS_"):
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v


@pytest.fixture(scope="session")
def secured_stack(
    local_stack: stack.StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[stack.StackInfo]:
    """The Kafka side secured (processor dev up --secure), beside the session stack's S3: a
    SASL_SSL-only listener (``bootstrap_servers``, ``env()``) and a mutual-TLS one
    (``secured.mtls_env()``), two small Tansu clusters behind the TLS/SASL gateway."""
    if os.environ.get("PROCESSOR_TEST_STACK") == "testcontainers":
        pytest.skip("the secured stack runs on the embedded broker only")
    root = tmp_path_factory.mktemp("secured-stack")
    info = stack.start(
        root, bucket=local_stack.bucket, secure=True, s3_endpoint_url=local_stack.s3_endpoint_url
    )
    try:
        yield info
    finally:
        stack.stop(root)


@pytest.fixture
def fault_proxy(local_stack: stack.StackInfo) -> Iterator[FaultProxy]:
    """A fault-injecting S3 proxy in front of the session stack's S3, started per test."""
    with FaultProxy(local_stack.s3_endpoint_url) as proxy:
        yield proxy


@pytest.fixture
def proxied_stack(local_stack: stack.StackInfo, fault_proxy: FaultProxy) -> stack.StackInfo:
    """The session stack with its S3 endpoint replaced by this test's fault proxy."""
    return dataclasses.replace(local_stack, s3_endpoint_url=fault_proxy.endpoint_url)
