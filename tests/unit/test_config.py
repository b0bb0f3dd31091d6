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
