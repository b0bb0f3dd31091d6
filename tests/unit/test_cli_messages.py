"""What the ``processor`` command says when something is wrong, run as a user runs it (in-process,
tests/support/cli.py), where nothing else is needed: one line naming the setting to change, the
documented exit code, and no wait where there is nothing to wait for."""

from __future__ import annotations

import logging
import time

import pytest

from processor.devstack.servers import free_port
from processor.errors import ConfigError
from processor.kafka.admin import BROKER_CHECK_TIMEOUT_S
from processor.wiring.data_dir import DataDirLock
from processor.wiring.faust_transport import ProcessorApp
from tests.support.cli import run_cli


def test_a_broker_that_refuses_at_once_is_reported_without_waiting_for_the_timeout() -> None:
    port = free_port()  # nothing listens there: every connection is refused at once
    started = time.monotonic()
    result = run_cli({"PROCESSOR_BOOTSTRAP_SERVERS": f"127.0.0.1:{port}"}, "segments", "--topic", "orders")
    took = time.monotonic() - started
    assert result.returncode == 3, result.stderr
    # refused: reported after BROKER_REFUSED_S, not after the wait a broker that does not answer gets
    # (the behaviour, not a speed: a loaded machine took 3.1 s for the 1 s)
    assert took < BROKER_CHECK_TIMEOUT_S
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # no librdkafka FAIL lines, nor their count
    assert f"127.0.0.1:{port}" in lines[0] and "refused" in lines[0]
    assert "PROCESSOR_BOOTSTRAP_SERVERS" in lines[0]


def test_an_unknown_option_gets_the_commands_own_usage() -> None:
    result = run_cli({}, "audit", "--topic", "orders")
    assert result.returncode == 2
    assert result.stderr.startswith("usage: processor audit ")
    assert "processor audit: error: unrecognized arguments: --topic orders" in result.stderr
    assert "{worker,dev," not in result.stderr  # not the top-level usage


def test_config_shows_the_effective_default_of_unset_settings() -> None:
    result = run_cli({"PROCESSOR_WEB_PORT": "7077"}, "config")
    assert result.returncode == 0, result.stderr
    shown = {}
    for line in result.stdout.splitlines():
        if line.startswith("PROCESSOR_"):
            variable, rest = line.split(maxsplit=1)
            shown[variable] = rest.rsplit(maxsplit=1)[0].strip()
    assert shown["PROCESSOR_FOLLOW_TOPICS"] == "all"
    assert shown["PROCESSOR_FOLLOW_METADATA_PARTITIONS"] == "all"
    assert shown["PROCESSOR_WORKER_URLS"] == "http://127.0.0.1:7077"
    assert shown["PROCESSOR_S3_ENDPOINT_URL"] == "AWS"
    assert shown["PROCESSOR_METADATA_REPLICATION_FACTOR"] == "min(3, brokers)"
    assert "(none)" not in {shown[v] for v in ("PROCESSOR_FOLLOW_TOPICS", "PROCESSOR_WORKER_URLS")}


def test_a_data_dir_in_use_is_refused_naming_the_setting(tmp_path) -> None:
    held = DataDirLock(tmp_path / "data")
    try:
        with pytest.raises(ConfigError, match="PROCESSOR_DATA_DIR") as caught:
            DataDirLock(tmp_path / "data")
        assert "another worker, follower or gateway" in str(caught.value)
    finally:
        held.release()
    DataDirLock(tmp_path / "data").release()  # free again once released


def test_no_missing_sensor_state_warning_when_recovery_ends_the_rebalance_first(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With no tables, Faust's recovery ends a rebalance before the consumer's assignment callbacks
    return; Faust then warned "Missing sensor state for rebalance #1" on every worker start."""
    app = ProcessorApp("sensor-state-test", broker="kafka://127.0.0.1:1")
    list(app.on_init_dependencies())  # adds Faust's monitor sensor, as a starting worker does
    with caplog.at_level(logging.WARNING):
        app.on_rebalance_start()
        app.on_rebalance_end()  # recovery, while the assignment callback still runs
        app.on_rebalance_return()  # the callback returns
        app.on_rebalance_start()  # and the usual order
        app.on_rebalance_return()
        app.on_rebalance_end()
    assert "Missing sensor state" not in caplog.text
