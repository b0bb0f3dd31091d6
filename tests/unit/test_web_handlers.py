"""The HTTP handlers without a server: token checks, readiness from HEALTH and checks, liveness."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import REGISTRY

from processor.health import HEALTH
from processor.web import handlers


@pytest.fixture(autouse=True)
def clean_health() -> Iterator[None]:
    HEALTH.reset()
    yield
    HEALTH.reset()


def test_no_token_configured_leaves_reads_open() -> None:
    assert handlers.authorized(None, {}) is None
    assert handlers.authorized("", {"Authorization": "Bearer x"}) is None


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "s3cret-token"},
        {"Authorization": "Basic s3cret-token"},
        {"Authorization": "Bearer s3cret-toke"},
        {"Authorization": "Bearer s3cret-token-and-more"},
        {"Authorization": "Bearer "},
    ],
)
def test_wrong_or_missing_token_is_401(headers: dict[str, str]) -> None:
    reply = handlers.authorized("s3cret-token", headers)
    assert reply is not None and reply.status == 401
    assert reply.headers["WWW-Authenticate"].startswith("Bearer")
    assert "s3cret" not in str(reply.body)


@pytest.mark.parametrize(
    ("headers", "says"),
    [
        ({}, "a bearer token is required"),
        ({"Authorization": "s3cret-token"}, "a bearer token is required"),
        ({"Authorization": "Basic s3cret-token"}, "a bearer token is required"),
        ({"Authorization": "Bearer "}, "a bearer token is required"),
        ({"Authorization": "Bearer s3cret-toke"}, "the bearer token is wrong"),
        ({"Authorization": "Bearer s3cret-token-and-more"}, "the bearer token is wrong"),
    ],
)
def test_a_wrong_token_is_told_apart_from_none(headers: dict[str, str], says: str) -> None:
    reply = handlers.authorized("s3cret-token", headers)
    assert reply is not None and isinstance(reply.body, dict)
    assert reply.body["error"].startswith(says) and "PROCESSOR_WEB_TOKEN" in reply.body["error"]
    wrong = says.startswith("the bearer token is wrong")
    assert ('error="invalid_token"' in reply.headers["WWW-Authenticate"]) == wrong


@pytest.mark.parametrize("header", ["Bearer s3cret-token", "bearer s3cret-token", "Bearer  s3cret-token "])
def test_right_token_passes(header: str) -> None:
    assert handlers.authorized("s3cret-token", {"Authorization": header}) is None


def test_livez_is_unconditional() -> None:
    HEALTH.report("storage", "S3 unreachable")
    assert handlers.livez().status == 200


def test_readyz_follows_health_and_checks() -> None:
    failure: list[str] = []
    checks = {"data_path": lambda: failure[0] if failure else None}
    ready = handlers.readyz(checks, {"paused": False})
    assert ready.status == 200
    assert ready.body == {"ready": True, "reasons": [], "problems": [], "paused": False}
    assert REGISTRY.get_sample_value("processor_ready") == 1.0

    HEALTH.report("storage", "S3 unreachable: connection refused")
    HEALTH.report("kafka", "Kafka unreachable")
    reply = handlers.readyz(checks)
    assert reply.status == 503
    assert isinstance(reply.body, dict)
    assert reply.body["reasons"] == [
        "kafka: Kafka unreachable",
        "storage: S3 unreachable: connection refused",
    ]
    assert REGISTRY.get_sample_value("processor_ready") == 0.0

    HEALTH.clear("storage")
    HEALTH.clear("kafka")
    failure.append("data path failed: boom")
    reply = handlers.readyz(checks)
    assert reply.status == 503
    assert isinstance(reply.body, dict)
    assert reply.body["reasons"] == ["data_path: data path failed: boom"]
    assert reply.body["problems"][0]["fatal"] is True

    failure.clear()
    assert handlers.readyz(checks).status == 200


def test_bad_read_parameters_are_400_before_any_read() -> None:
    class NoReader:
        def __getattr__(self, name: str) -> None:
            raise AssertionError("must not be read")

    reader = NoReader()
    for query in (
        {"topic": "../x", "partition": "0", "offset": "0"},
        {"topic": "t", "offset": "0"},
        {"topic": "t", "partition": "x", "offset": "0"},
        {"topic": "t", "partition": "0"},
        {"topic": "t", "partition": "0", "offset": "0", "timestamp": "0"},
        {"topic": "t", "partition": "0", "offset": "0", "max_records": "100000"},
    ):
        reply = handlers.fetch(reader, query)  # type: ignore[arg-type]
        assert reply.status == 400, query
