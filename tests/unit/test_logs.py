"""Log formatting: one JSON object per line with structured fields, and secrets never written."""

from __future__ import annotations

import io
import json
import logging
import logging.config
import sys
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from processor import logs


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "canary-aws-9d1f")
    monkeypatch.setenv("PROCESSOR_WEB_TOKEN", "canary-token-42ab")
    monkeypatch.setenv("HARMLESS", "canary-not-secret")
    saved = list(logging.root.handlers), logging.root.level
    out = io.StringIO()
    logs.setup_logging("info", "json")
    handler = logging.root.handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(out)
    yield logging.getLogger("processor.test"), out
    logging.root.handlers[:] = saved[0]
    logging.root.setLevel(saved[1])
    logs._Redacting.secrets = []
    logging.captureWarnings(False)
    sys.excepthook = sys.__excepthook__


def test_one_json_object_per_line_with_fields(captured) -> None:
    log, out = captured
    log.info("segment copied", extra={"topic": "t", "partition": 3, "start_offset": 0, "end_offset": 9})
    log.warning("multi\nline message")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("failed")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    first, second, third = (json.loads(line) for line in lines)
    assert first["message"] == "segment copied"
    assert (first["topic"], first["partition"], first["start_offset"], first["end_offset"]) == ("t", 3, 0, 9)
    assert first["level"] == "info" and first["logger"] == "processor.test" and first["ts"].endswith("+00:00")
    assert second["message"] == "multi\nline message"
    assert "ValueError: boom" in third["exception"]


def test_secret_values_are_masked_wherever_they_appear(captured) -> None:
    log, out = captured
    log.info("connecting with %s", "canary-aws-9d1f")
    log.info("token=canary-token-42ab", extra={"header": "Bearer canary-token-42ab"})
    log.info("not a secret: canary-not-secret")
    text = out.getvalue()
    assert "canary-aws-9d1f" not in text and "canary-token-42ab" not in text
    assert text.count(logs.MASK) == 3
    assert "canary-not-secret" in text


def test_text_format_masks_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KAFKA_PASSWORD", "canary-pw-1234")
    logs._Redacting.secrets = logs.secret_values()
    formatter = logs.TextFormatter()
    record = logging.makeLogRecord({"msg": "login %s", "args": ("canary-pw-1234",), "levelname": "INFO"})
    assert "canary-pw-1234" not in formatter.format(record)
    logs._Redacting.secrets = []


def test_faust_gets_the_same_logging_config() -> None:
    class S:
        log_level = "warn"
        log_format = "json"

    options = logs.faust_logging_options(S())
    config = options["logging_config"]
    assert config["root"]["level"] == logging.WARNING
    assert config["formatters"]["processor"]["()"] is logs.JsonFormatter


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], max_examples=60)
@given(
    secret=st.text(alphabet=st.sampled_from('ab"\\\n/é{}'), min_size=4, max_size=12).filter(
        lambda s: '"' in s or "\\" in s
    )
)
def test_json_lines_redact_before_escaping(monkeypatch: pytest.MonkeyPatch, secret: str) -> None:
    """A secret holding a quote or a backslash is masked in the message, the fields and the traceback."""
    monkeypatch.setenv("PROCESSOR_SASL_PASSWORD", secret)
    logs._Redacting.secrets = logs.secret_values()
    try:
        formatter = logs.JsonFormatter()
        try:
            raise RuntimeError(f"bad password {secret}")
        except RuntimeError:
            record = logging.makeLogRecord(
                {"msg": "login with %s", "args": (secret,), "levelname": "ERROR", "detail": f"pw={secret}"}
            )
            record.exc_info = sys.exc_info()
        line = formatter.format(record)
        entry = json.loads(line)
        assert secret not in entry["message"] and secret not in entry["detail"]
        assert secret not in entry["exception"]
        assert json.dumps(secret, ensure_ascii=False)[1:-1] not in line
    finally:
        logs._Redacting.secrets = []


def test_url_credentials_are_secrets() -> None:
    env = {"PROCESSOR_S3_ENDPOINT_URL": "https://minio:canary-url-pw@s3.local:9000", "OTHER": "http://h/x"}
    assert logs.secret_values(env) == ["canary-url-pw"]


def test_text_lines_carry_the_fields_of_the_json_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """`segment copied` in the default text format says which segment, as the JSON line does."""
    monkeypatch.setenv("PROCESSOR_SASL_PASSWORD", 'canary "pw')
    logs._Redacting.secrets = logs.secret_values()
    try:
        record = logging.makeLogRecord(
            {
                "msg": "segment copied",
                "levelname": "INFO",
                "name": "processor.leader.segment_copier",
                "topic": "orders",
                "partition": 3,
                "start_offset": 0,
                "end_offset": 97,
                "size_bytes": 5031,
                "state": "COPY_SEGMENT_FINISHED",
                "note": 'a b="canary "pw"',
            }
        )
        line = logs.TextFormatter().format(record)
    finally:
        logs._Redacting.secrets = []
    assert line.endswith(
        "INFO processor.leader.segment_copier: segment copied topic=orders partition=3 start_offset=0 "
        'end_offset=97 size_bytes=5031 state=COPY_SEGMENT_FINISHED note="a b=\\"***\\""'
    )


def test_botocore_credential_lines_only_at_debug() -> None:
    """`INFO botocore.credentials: Found credentials ...` on every S3 client is not written unless
    PROCESSOR_LOG_LEVEL=debug (it interrupted the output of commands)."""
    saved = list(logging.root.handlers), logging.root.level
    for level, shown in (("info", False), ("debug", True)):
        logging.config.dictConfig(logs.logging_config(level, "text"))
        try:
            assert logging.getLogger("botocore.credentials").isEnabledFor(logging.INFO) is shown
            assert logging.getLogger("botocore.credentials").isEnabledFor(logging.WARNING)
        finally:
            logging.getLogger("botocore.credentials").setLevel(logging.NOTSET)
            logging.root.handlers[:] = saved[0]
            logging.root.setLevel(saved[1])


def test_a_setting_named_session_is_no_secret() -> None:
    """PROCESSOR_SESSION_TIMEOUT_MS is a number: masking it hid every equal offset in the logs."""
    from processor.logs import secret_values

    environ = {"PROCESSOR_SESSION_TIMEOUT_MS": "6000", "AWS_SESSION_TOKEN": "a-session-token"}
    assert secret_values(environ) == ["a-session-token"]
