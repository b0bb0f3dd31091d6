"""``processor fetch`` checks its arguments before it connects to anything: a bad one is exit 2 with
the option named, at once, and never the broker-unreachable path (exit 3)."""

from __future__ import annotations

import time

import pytest

from processor.commands import fetch
from tests.support.cli import run_cli

# Nothing listens on port 1: a command that tried to connect would wait, then exit 3.
ENV = {
    "PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:1",
    "PROCESSOR_S3_ENDPOINT_URL": "http://127.0.0.1:1",
}
QUICK_S = 5.0  # far below a connection attempt's timeout, with room for a loaded machine


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--partition", "0", "--offset", "-5"], "--offset -5"),
        (["--partition", "-1", "--offset", "0"], "--partition -1"),
        (["--partition", str(2**31), "--offset", "0"], f"--partition {2**31}"),
        (["--partition", "0", "--offset", str(2**63)], f"--offset {2**63}"),
        (["--partition", "0", "--timestamp", "-1"], "--timestamp -1"),
        (["--partition", "0", "--offset", "0", "--max-records", "0"], "--max-records 0"),
        (["--partition", "0", "--offset", "0", "--output", "out.csv"], "--output out.csv"),
        (["--partition", "0", "--offset", "0", "--topic", "../escape"], "../escape"),
    ],
)
def test_bad_arguments_exit_2_before_any_connection(monkeypatch, args, message):
    def no_connection(*a, **k):
        raise AssertionError("fetch connected before it checked its arguments")

    monkeypatch.setattr(fetch, "open_read_side", no_connection)
    monkeypatch.setattr(fetch, "load_settings", no_connection)
    if "--topic" not in args:
        args = ["--topic", "events", *args]
    started = time.monotonic()
    result = run_cli(ENV, "fetch", *args)
    took = time.monotonic() - started
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "unreachable" not in result.stderr
    assert took < QUICK_S


def test_negative_offset_without_stubs_is_exit_2_quickly():
    """The real command, nothing stubbed: the message names the option and the range."""
    started = time.monotonic()
    result = run_cli(ENV, "fetch", "--topic", "events", "--partition", "0", "--offset", "-5")
    assert result.returncode == 2, result.stderr
    assert "error: --offset -5: an offset is a number from 0 to" in result.stderr
    assert time.monotonic() - started < QUICK_S


def test_good_arguments_reach_the_connection(monkeypatch):
    """The checks let valid arguments through (the stub stands for the connection)."""

    class Reached(Exception):
        pass

    def reached(*a, **k):
        raise Reached

    monkeypatch.setattr(fetch, "load_settings", lambda: None)
    monkeypatch.setattr(fetch, "open_read_side", reached)
    result = run_cli(ENV, "fetch", "--topic", "events", "--partition", "0", "--offset", "0")
    assert result.returncode == 1
    assert "Reached" in result.stderr
