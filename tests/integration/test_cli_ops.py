"""The operator's CLI on the real stack: --version, config (sources, units, masking), fetch in every
output format, verify finding missing / corrupt / unreferenced objects, and the exit codes
(0 ok, 1 problems found, 2 bad input, 3 Kafka or S3 unreachable)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from processor import __version__
from tests.support.archive import PARTITIONS, PREFIX, TOPIC, OffloadedArchive, objects_restored
from tests.support.cli import CliResult, run_cli

pytestmark = pytest.mark.integration


def cli(env: dict[str, str], *args: str) -> CliResult:
    """``processor ARGS`` in this process (tests/support/cli.py)."""
    return run_cli(env, *args)


@pytest.fixture
def offloaded(offloaded_archive: OffloadedArchive, tmp_path: Path) -> dict[str, Any]:
    """The session's archive (tests/support/archive.py), read with the CLI's environment."""
    return {
        "env": offloaded_archive.cli_env,
        "by_partition": offloaded_archive.by_partition,
        "tmp": tmp_path,
        "stack": offloaded_archive.info,
    }


def test_version():
    """The one CLI command run as a child process: the ``python -m processor`` entry point."""
    result = subprocess.run(
        [sys.executable, "-m", "processor", "--version"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0
    assert result.stdout.strip() == f"processor {__version__}"


def test_config_json_shape_sources_units_and_masking():
    canary = "canary-aws-secret-0c3e"
    env = {
        "PROCESSOR_SEGMENT_BYTES": "262144",
        "PROCESSOR_SEGMENT_MS": "90s",
        "PROCESSOR_WEB_TOKEN": "canary-web-token-77",
        "AWS_SECRET_ACCESS_KEY": canary,
    }
    result = cli(env, "config", "--json")
    assert result.returncode == 0, result.stderr
    assert canary not in result.stdout and "canary-web-token-77" not in result.stdout
    report = json.loads(result.stdout)
    assert set(report) == {"settings", "aws"}
    rows = {r["variable"]: r for r in report["settings"]}
    for r in rows.values():
        assert set(r) == {"variable", "value", "display", "source"}
        assert r["source"] in {"environment", "default", "derived"}
    assert rows["PROCESSOR_SEGMENT_BYTES"] == {
        "variable": "PROCESSOR_SEGMENT_BYTES",
        "value": 262144,
        "display": "256KiB",
        "source": "environment",
    }
    assert rows["PROCESSOR_SEGMENT_MS"]["value"] == 90_000
    assert rows["PROCESSOR_BLOCK_BYTES"]["source"] == "derived"  # adapted to the small segment size
    assert rows["PROCESSOR_BLOCK_BYTES"]["value"] <= 262144
    assert rows["PROCESSOR_BUFFER_BYTES"] == {**rows["PROCESSOR_BUFFER_BYTES"], "source": "default"}
    assert rows["PROCESSOR_WEB_TOKEN"]["value"] == "***"
    aws = {a["variable"]: a for a in report["aws"]}
    assert aws["AWS_SECRET_ACCESS_KEY"] == {
        "variable": "AWS_SECRET_ACCESS_KEY",
        "value": "***",
        "source": "environment",
    }
    text = cli(env, "config")
    assert text.returncode == 0 and "256KiB" in text.stdout and canary not in text.stdout


def test_bad_config_is_exit_2():
    result = cli({"PROCESSOR_SEGMENT_MS": "5 fortnights"}, "config")
    assert result.returncode == 2
    assert "PROCESSOR_SEGMENT_MS" in result.stderr and "Traceback" not in result.stderr
    assert cli({}, "fetch", "--topic", "x").returncode == 2  # usage


@pytest.mark.usefixtures("unreachable_fails_fast")
def test_unreachable_services_are_exit_3(offloaded):
    env = {**offloaded["env"], "PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:1"}
    result = cli(env, "verify", "--topic", TOPIC, "--json")
    assert result.returncode == 3, result.stderr
    env = {**offloaded["env"], "PROCESSOR_S3_ENDPOINT_URL": "http://127.0.0.1:1"}
    result = cli(env, "verify", "--topic", TOPIC, "--json")
    assert result.returncode == 3, result.stderr
    assert "Traceback" not in result.stderr


def test_fetch_json_lines_raw_and_parquet(offloaded):
    env = offloaded["env"]
    want = offloaded["by_partition"][1]
    jsonl = cli(
        env,
        "fetch",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--offset",
        "10",
        "--max-records",
        "50",
        "--format",
        "jsonl",
    )
    assert jsonl.returncode == 0, jsonl.stderr
    rows = [json.loads(line) for line in jsonl.stdout.splitlines()]
    assert [r["offset"] for r in rows] == list(range(10, 60))
    assert set(rows[0]) == {"offset", "timestamp", "timestamp_type", "key", "value", "headers"}
    assert [
        json.loads(x)
        for x in cli(
            env,
            "fetch",
            "--topic",
            TOPIC,
            "--partition",
            "1",
            "--offset",
            "10",
            "--max-records",
            "50",
            "--json",
        ).stdout.splitlines()
    ] == rows

    raw = cli(
        env,
        "fetch",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--offset",
        "0",
        "--max-records",
        "20",
        "--format",
        "raw",
    )
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout_bytes == b"".join((r.value or b"") + b"\n" for r in want[:20])

    # many records: read across segments, in chunks, to the end of the remote log
    out = offloaded["tmp"] / "p1.parquet"
    pq = cli(
        env,
        "fetch",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--offset",
        "0",
        "--max-records",
        "100000",
        "--output",
        str(out),
    )
    assert pq.returncode == 0, pq.stderr
    import pyarrow.parquet as parquet

    table = parquet.read_table(out)
    assert table.num_rows == len(want)
    assert table.column_names == [
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestamp_type",
        "key",
        "value",
        "headers",
    ]
    got = table.to_pylist()
    for row, w in zip(got, want, strict=True):
        assert (row["key"], row["value"], row["timestamp"]) == (w.key, w.value, w.timestamp)
        assert [(h["key"], h["value"]) for h in row["headers"]] == list(w.headers)
    assert {row["topic"] for row in got} == {TOPIC} and {row["partition"] for row in got} == {1}

    assert (
        cli(
            env, "fetch", "--topic", TOPIC, "--partition", "1", "--offset", "0", "--output", "x.csv"
        ).returncode
        == 2
    )
    missing = cli(env, "fetch", "--topic", TOPIC, "--partition", "1", "--offset", str(10**9))
    assert missing.returncode == 2 and "not in remote storage" in missing.stderr


def test_verify_clean_then_finds_each_kind_of_problem(offloaded):
    """Damages the bucket, then puts every object back (the archive is shared)."""
    env, stack = offloaded["env"], offloaded["stack"]
    clean = cli(env, "verify", "--topic", TOPIC, "--json")
    assert clean.returncode == 0, clean.stderr + clean.stdout
    report = json.loads(clean.stdout)
    assert set(report) == {
        "topic",
        "partitions",
        "segments_checked",
        "bytes_checked",
        "encrypted_segments",
        "plaintext_segments",
        "missing",
        "corrupt",
        "unreferenced",
        "key_unavailable",
        "shredded",
        "clean",
    }
    assert report["clean"] is True and report["partitions"] == list(range(PARTITIONS))
    assert report["plaintext_segments"] == report["segments_checked"] and report["encrypted_segments"] == 0
    assert report["segments_checked"] >= 2
    assert cli(env, "verify", "--topic", TOPIC).stdout.strip().endswith("clean")

    segments = [
        json.loads(x)
        for x in cli(env, "segments", "--topic", TOPIC, "--partition", "0", "--json").stdout.splitlines()
    ]
    assert len(segments) >= 2
    bucket = stack.bucket
    stray = f"{PREFIX}/{TOPIC}/0/00000000000000000000-stray.log"
    victim = segments[0]["object_key"]
    gone = segments[1]["object_key"] + "-index"
    with objects_restored(stack, stray, victim, gone) as s3:
        # 1. a stray object under the partition's prefix
        s3.put_object(Bucket=bucket, Key=stray, Body=b"leftover")
        # 2. a data object with one flipped byte (same size)
        data = bytearray(s3.get_object(Bucket=bucket, Key=victim)["Body"].read())
        data[len(data) // 2] ^= 0xFF
        s3.put_object(Bucket=bucket, Key=victim, Body=bytes(data))
        # 3. an index object gone
        s3.delete_object(Bucket=bucket, Key=gone)

        result = cli(env, "verify", "--topic", TOPIC, "--partition", "0", "--json")
        assert result.returncode == 1, result.stderr
        report = json.loads(result.stdout)
        assert report["clean"] is False and report["partitions"] == [0]
        assert [u["key"] for u in report["unreferenced"]] == [stray]
        assert [c["key"] for c in report["corrupt"]] == [victim]
        assert [m["key"] for m in report["missing"]] == [gone]
        assert report["missing"][0]["segment_id"] == segments[1]["id"]
        text = cli(env, "verify", "--topic", TOPIC)
        assert text.returncode == 1 and "PROBLEMS FOUND" in text.stdout
        # partition 1 is untouched
        assert cli(env, "verify", "--topic", TOPIC, "--partition", "1").returncode == 0
    assert cli(env, "verify", "--topic", TOPIC, "--json").returncode == 0, "the archive is whole again"


def test_long_commands_print_no_progress_bars_when_piped(offloaded):
    result = cli(
        offloaded["env"],
        "fetch",
        "--topic",
        TOPIC,
        "--partition",
        "1",
        "--offset",
        "0",
        "--max-records",
        "20000",
        "--format",
        "jsonl",
    )
    assert result.returncode == 0
    assert "\r" not in result.stderr and "━" not in result.stderr  # no bar when stderr is not a terminal


def test_progress_bar_draws_on_a_terminal(tmp_path: Path):
    from processor.commands.progress import progress

    log = tmp_path / "bar.txt"
    with log.open("w") as f:
        from rich.console import Console
        from rich.progress import Progress

        p = Progress(console=Console(file=f, force_terminal=True, width=80))
        with p:
            task = p.add_task("x", total=3)
            p.advance(task, 3)
    assert "3" in log.read_text()
    with progress("quiet", 10, enabled=False) as bar:  # disabled: a no-op that still accepts calls
        bar(5)
        bar.set(10)
