"""Safe settings: unknown PROCESSOR_* variables are refused with the closest name, enumerated settings
say their allowed values in plain words, and ``processor config --check [--connect]`` is the worker's
own pre-flight check (exit 2 where the worker refuses its configuration, 3 where Kafka or S3 is
unreachable)."""

from __future__ import annotations

import tempfile

import pytest

from processor.commands.restore import TARGET_ENV_NAMES
from processor.commands.worker import START_UP_CHECKS
from processor.config import Settings, known_variables, load_settings, unknown_variables
from processor.errors import ConfigError
from processor.kafka import admin
from processor.wiring import storage
from processor.wiring.encryption import require_encryption_keys
from processor.wiring.startup import read_api_token, require_topics
from tests.support.cli import CliResult, run_cli

AWS = {"AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y", "AWS_DEFAULT_REGION": "us-east-1"}
EMPTY_RING = tempfile.mkdtemp(prefix="empty-key-ring-")  # a key ring directory with no key in it
VALID = {**AWS, "PROCESSOR_TOPICS": "orders", "PROCESSOR_WEB_TOKEN": "s3cret-token"}


def test_a_misspelt_setting_is_refused_with_the_closest_name() -> None:
    result = run_cli({"PROCESSOR_SEGMNT_BYTES": "1MiB"}, "config")
    assert result.returncode == 2
    assert "PROCESSOR_SEGMNT_BYTES" in result.stderr
    assert "did you mean PROCESSOR_SEGMENT_BYTES?" in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""  # no configuration printed as if it were in force


@pytest.mark.parametrize(
    ("variable", "suggested"),
    [
        ("PROCESSOR_REMOTE_RETENTION_M", "PROCESSOR_REMOTE_RETENTION_MS"),
        ("PROCESSOR_TOPIC", "PROCESSOR_TOPICS"),
        ("PROCESSOR_TARGET_SASL_PASWORD", "PROCESSOR_TARGET_SASL_PASSWORD"),
        ("processor_topics", "PROCESSOR_TOPICS"),  # read as upper case only: would be ignored
    ],
)
def test_every_command_refuses_unknown_variables(variable: str, suggested: str) -> None:
    with pytest.raises(ConfigError, match=f"{variable} .*did you mean {suggested}\\?"):
        load_settings({variable: "1", "PROCESSOR_TOPICS": "orders"})


def test_unknown_variables_are_all_listed_with_the_invalid_values() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(
            {"PROCESSOR_SEGMNT_BYTES": "1", "PROCESSOR_NO_SUCH_THING_AT_ALL": "1", "PROCESSOR_WEB_AUTH": "x"}
        )
    text = str(err.value)
    assert "PROCESSOR_SEGMNT_BYTES" in text and "PROCESSOR_NO_SUCH_THING_AT_ALL" in text
    assert "PROCESSOR_WEB_AUTH must be one of token, none" in text


def test_every_variable_something_reads_is_known() -> None:
    names = {f"PROCESSOR_{name.upper()}" for name in Settings.model_fields} | set(TARGET_ENV_NAMES.values())
    assert names <= known_variables()
    env = {name: "" for name in known_variables()} | {"PROCESSOR_ARCHITECTURE": "AMD64", "PATH": "/bin"}
    assert unknown_variables(env) == []  # nor Windows' PROCESSOR_* variables, nor others


def test_enumerated_settings_say_their_values_in_plain_words() -> None:
    result = run_cli({"PROCESSOR_LOG_LEVEL": "verbose"}, "config")
    assert result.returncode == 2
    assert (
        "PROCESSOR_LOG_LEVEL must be one of debug, info, warn, warning, error, crit (in any case) "
        "(got 'verbose')"
    ) in result.stderr
    assert "pattern" not in result.stderr and "^(" not in result.stderr


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PROCESSOR_SECURITY_PROTOCOL": "TLS"}, "must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
        ({"PROCESSOR_ARCHIVE_COMPRESSION": "brotli"}, "must be one of off, keep, zstd (got 'brotli')"),
        ({"PROCESSOR_WEB_ENABLED": "maybe"}, "PROCESSOR_WEB_ENABLED must be true or false"),
        ({"PROCESSOR_S3_BUCKET": "Not_A_Bucket"}, "PROCESSOR_S3_BUCKET must be an S3 bucket name"),
    ],
)
def test_no_error_shows_a_regular_expression(env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env)
    assert expected in str(err.value)
    assert "should match pattern" not in str(err.value)


def test_every_pattern_has_plain_words() -> None:
    """A pattern setting added later lists its values or has a description (_describe uses them)."""
    checked = 0
    for name, field in Settings.model_fields.items():
        patterns = [getattr(m, "pattern", None) for m in field.metadata]
        pattern = next((p for p in patterns if p), None)
        if pattern is None:
            continue
        with pytest.raises(ConfigError) as err:
            load_settings({f"PROCESSOR_{name.upper()}": "\u00e9 no such value \u00e9"})
        assert "pattern" not in str(err.value), name
        checked += 1
    assert checked >= 9


def check(env: dict[str, str], *args: str) -> CliResult:
    with tempfile.TemporaryDirectory(prefix="config-check-") as data_dir:
        return run_cli({**env, "PROCESSOR_DATA_DIR": data_dir}, "config", "--check", *args)


def test_check_runs_the_workers_own_start_up_validation() -> None:
    # what Worker.build runs first
    assert (require_topics, read_api_token, require_encryption_keys) == START_UP_CHECKS


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({**AWS, "PROCESSOR_WEB_TOKEN": "t"}, "PROCESSOR_TOPICS"),  # no source topics
        ({**AWS, "PROCESSOR_TOPICS": "orders"}, "PROCESSOR_WEB_TOKEN"),  # read API open off loopback
        (  # a key ring that is not there: every copy would fail
            {**VALID, "PROCESSOR_ENCRYPTION": "keyring", "PROCESSOR_ENCRYPTION_KEYRING": "/nonexistent-ring"},
            "PROCESSOR_ENCRYPTION=keyring: no key provider",
        ),
        (  # a key ring without a key for the topic
            {**VALID, "PROCESSOR_ENCRYPTION": "keyring", "PROCESSOR_ENCRYPTION_KEYRING": EMPTY_RING},
            "no key for topic orders",
        ),
    ],
)
def test_check_exits_2_where_the_worker_refuses(env: dict[str, str], named: str) -> None:
    result = check(env)
    assert result.returncode == 2, result.stderr
    assert named in result.stderr and "Traceback" not in result.stderr
    with tempfile.TemporaryDirectory(prefix="config-check-") as data_dir:
        worker = run_cli({**env, "PROCESSOR_DATA_DIR": data_dir}, "worker")
    assert worker.returncode == 2 and named in worker.stderr  # the same verdict, before connecting


def test_check_prints_every_problem() -> None:
    result = check(AWS)  # neither topics nor a token
    assert result.returncode == 2
    assert result.stderr.count("error: ") == 2
    assert "PROCESSOR_TOPICS" in result.stderr and "PROCESSOR_WEB_TOKEN" in result.stderr


@pytest.mark.parametrize(
    "env",
    [
        VALID,
        {**AWS, "PROCESSOR_TOPICS": "orders", "PROCESSOR_WEB_HOST": "127.0.0.1"},
        {**AWS, "PROCESSOR_TOPICS": "orders", "PROCESSOR_WEB_AUTH": "none"},
    ],
)
def test_check_exits_0_on_a_valid_set_up(env: dict[str, str]) -> None:
    result = check(env)
    assert result.returncode == 0, result.stderr
    assert "configuration: ok" in result.stdout and result.stderr == ""


def test_check_refuses_unknown_variables_too() -> None:
    result = check({**VALID, "PROCESSOR_RETENTION_MS": "7d"})
    assert result.returncode == 2
    assert "did you mean PROCESSOR_" in result.stderr


def test_connect_exits_3_when_kafka_and_s3_are_unreachable() -> None:
    env = {
        **VALID,
        "PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:1",
        "PROCESSOR_S3_ENDPOINT_URL": "http://127.0.0.1:1",
    }
    result = check(env, "--connect", "--timeout", "1")
    assert result.returncode == 3, result.stderr
    assert "Kafka broker at 127.0.0.1:1 is unreachable" in result.stderr
    assert "S3 endpoint http://127.0.0.1:1 is unreachable" in result.stderr
    assert "Traceback" not in result.stderr


def test_connect_exits_0_when_both_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    """The happy path, with the probes stubbed: nothing is created, the topics found are said."""

    class Bucket:
        def check_bucket(self) -> None:
            pass

        def missing_permissions(self) -> list[str]:
            return []

        def close(self) -> None:
            pass

    monkeypatch.setattr(admin, "check_broker", lambda kafka, timeout_s, refused_s: object())
    monkeypatch.setattr(admin, "partition_counts", lambda admin, topics, timeout_s: {"orders": 3})
    monkeypatch.setattr(storage, "build_storage", lambda settings, probe: Bucket())
    result = check(VALID, "--connect")
    assert result.returncode == 0, result.stderr
    assert "source topics found: 1 of 1" in result.stdout
    assert "metadata topic __remote_log_metadata: missing (the worker creates it)" in result.stdout
    assert "s3: ok (bucket 'tiered-storage')" in result.stdout


def test_connect_is_not_tried_when_the_configuration_is_refused() -> None:
    env = {**AWS, "PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:1", "PROCESSOR_WEB_TOKEN": "t"}
    result = check(env, "--connect", "--timeout", "1")
    assert result.returncode == 2
    assert "PROCESSOR_TOPICS" in result.stderr and "127.0.0.1:1" not in result.stderr


def test_connect_needs_check_and_check_excludes_json() -> None:
    assert run_cli(VALID, "config", "--connect").returncode == 2
    assert run_cli(VALID, "config", "--check", "--json").returncode == 2


def test_config_without_check_is_unchanged() -> None:
    result = run_cli(AWS, "config")  # no topics, no token: still printed, exit 0
    assert result.returncode == 0
    assert "PROCESSOR_SEGMENT_BYTES" in result.stdout


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"PROCESSOR_ERASURE_SECRET": "tooshort-s3cr"}, "has 13 characters; give 16 to 1024"),
        ({"PROCESSOR_WEB_TOKEN": "  "}, "is set but empty"),
    ],
)
def test_a_wrong_secret_is_named_never_shown(env: dict[str, str], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(env)
    assert expected in str(err.value)
    assert "(got" not in str(err.value) and "tooshort" not in str(err.value)
