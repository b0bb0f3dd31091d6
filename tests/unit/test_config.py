from __future__ import annotations

import pytest

from processor.config import load_settings
from processor.errors import ConfigError


def test_defaults_and_parsing() -> None:
    s = load_settings({"PROCESSOR_TOPICS": " orders, payments ,", "PROCESSOR_SEGMENT_BYTES": "1048576"})
    assert s.topics == ("orders", "payments")
    assert s.segment_bytes == 1048576
    assert s.metadata_topic == "__remote_log_metadata"


@pytest.mark.parametrize(
    ("env", "variable"),
    [
        ({"PROCESSOR_SEGMENT_BYTES": "lots"}, "PROCESSOR_SEGMENT_BYTES"),
        ({"PROCESSOR_SEGMENT_MS": "-5"}, "PROCESSOR_SEGMENT_MS"),
        ({"PROCESSOR_TOPICS": "ok,../../etc"}, "PROCESSOR_TOPICS"),
        ({"PROCESSOR_S3_PREFIX": "a/../../b"}, "PROCESSOR_S3_PREFIX"),
        ({"PROCESSOR_S3_BUCKET": "Not_A_Bucket"}, "PROCESSOR_S3_BUCKET"),
        ({"PROCESSOR_METADATA_TOPIC": "a/b"}, "PROCESSOR_METADATA_TOPIC"),
        ({"PROCESSOR_BUFFER_BYTES": "2048", "PROCESSOR_SEGMENT_BYTES": "4096"}, "PROCESSOR_BUFFER_BYTES"),
        ({"PROCESSOR_WORKER_ID": "has space"}, "PROCESSOR_WORKER_ID"),
    ],
)
def test_errors_name_the_variable(env: dict[str, str], variable: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env)
    assert variable in str(err.value)


def test_settings_are_frozen() -> None:
    s = load_settings({})
    with pytest.raises(Exception):  # noqa: B017 - pydantic raises its own ValidationError
        s.segment_bytes = 5


def test_settings_validate_the_source_variables() -> None:
    s = load_settings({"PROCESSOR_ARCHIVE_COMPRESSION": "zstd", "PROCESSOR_SASL_MECHANISM": "SCRAM-SHA-512"})
    assert (s.archive_compression, s.sasl_mechanism, s.fetch_concurrency) == ("zstd", "SCRAM-SHA-512", 4)
    with pytest.raises(ConfigError, match="PROCESSOR_ARCHIVE_COMPRESSION"):
        load_settings({"PROCESSOR_ARCHIVE_COMPRESSION": "brotli"})
    with pytest.raises(ConfigError, match="PROCESSOR_SECURITY_PROTOCOL"):
        load_settings({"PROCESSOR_SECURITY_PROTOCOL": "TLS"})
