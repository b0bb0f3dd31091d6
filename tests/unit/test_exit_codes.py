"""One exit-code scheme for every command: 0 ok, 1 problems found, 2 bad input, 3 Kafka or S3
unreachable; errors are one clear line (a JSON log record when JSON logging is on)."""

from __future__ import annotations

import argparse
import json
import logging

import pytest

from processor import cli, logs
from processor.commands import config_cmd
from processor.errors import (
    ConfigError,
    CorruptObjectError,
    MetadataTopicError,
    OffsetNotInRemoteError,
    ServiceUnavailableError,
    StorageError,
)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (None, 0),
        (ConfigError("PROCESSOR_X: bad"), 2),
        (OffsetNotInRemoteError("offset 5 of t-0 is not in remote storage"), 2),
        (ServiceUnavailableError("Kafka broker at b:1 is unreachable"), 3),
        (StorageError("S3 endpoint unreachable"), 3),
        (MetadataTopicError("metadata topic not caught up"), 3),
        (CorruptObjectError("block CRC mismatch"), 1),
    ],
)
def test_exit_codes(monkeypatch, capsys, error, code) -> None:
    def command(args: argparse.Namespace) -> int:
        if error is not None:
            raise error
        return 0

    monkeypatch.setattr(config_cmd, "cmd_config", command)
    assert cli.main(["config"]) == code
    err = capsys.readouterr().err
    if error is not None:
        assert err == f"error: {error}\n"


def test_usage_errors_are_2() -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["fetch", "--topic", "t"])
    assert exit_.value.code == 2


def test_errors_are_json_when_json_logging_is_on(monkeypatch, capsys) -> None:
    saved = list(logging.root.handlers)
    try:
        logs.setup_logging("info", "json")

        def command(args: argparse.Namespace) -> int:
            raise ServiceUnavailableError("Kafka broker at b:1 is unreachable")

        monkeypatch.setattr(config_cmd, "cmd_config", command)
        assert cli.main(["config"]) == 3
        line = json.loads(capsys.readouterr().out.strip())
        assert line["message"] == "error: Kafka broker at b:1 is unreachable"
        assert line["level"] == "error"
    finally:
        logging.root.handlers[:] = saved
        logging.captureWarnings(False)
        import sys

        sys.excepthook = sys.__excepthook__
