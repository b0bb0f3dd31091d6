"""The README's quick start, its commands run as written against the session stack.

The shell blocks of the README's "Quick start" after ``make demo`` (which
tests/integration/test_demo_smoke.py runs) are taken from the README itself: the exports are
evaluated by bash, then the README's own values are replaced by the test stack's (the broker, the
bucket; topics and the web port of this test's own), and every command line is run by bash as a user
would type it. What the test adds is what the README leaves to the user's cluster: the S3 endpoint
and credentials of the stack, a metadata topic and prefix of its own, and segments that roll within
a second instead of a minute.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from processor.devstack import stack
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.partition import TopicPartition
from tests.integration.restore_support import produce_plain
from tests.support.consumers import kcat
from tests.support.doc_blocks import code_blocks, commands, exported, section, user_env
from tests.support.metadata_watch import wait_offloaded

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"
META = "__quick_start_metadata"


def quick_start_blocks() -> list[str]:
    return code_blocks(section(README, "## Quick start"), "sh")


@pytest.mark.timeout(300)  # a stack of its own, a worker, a gateway: each started as a user would
def test_the_readme_local_stack_block_reads_what_the_broker_deleted_as_written(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    """The block after ``make demo``, run by bash as written in a fresh folder: a stack of its own,
    sample records, a worker, an offload, the broker truncating, a gateway, and kcat reading every
    record through it. Only the fixed ports are replaced by free ones (the worker's and gateway's web
    ports, the gateway's Kafka port), so that tests can run side by side."""
    if local_stack.broker != stack.KAFKA:
        pytest.skip("the block needs Apache Kafka (Tansu never deletes records)")
    block = quick_start_blocks()[1]
    lines = commands(block)
    assert lines[0] == ". .venv/bin/activate" and lines[1] == "processor dev up", lines
    assert lines[-1].startswith("kcat -b 127.0.0.1:19092 ") and lines[-1].endswith("| wc -l"), lines[-1]
    kcat()  # installed where missing
    web, gateway_web, gateway = free_port(), free_port(), free_port()
    script = "\n".join(
        [
            "set -euo pipefail",
            "trap 'kill $(jobs -p) 2>/dev/null || true; wait; processor dev down > /dev/null || true' EXIT",
            *(
                line.replace("PROCESSOR_WEB_PORT=6067", f"PROCESSOR_WEB_PORT={gateway_web}")
                .replace("127.0.0.1:6067/", f"127.0.0.1:{gateway_web}/")
                .replace("127.0.0.1:19092", f"127.0.0.1:{gateway}")
                for line in lines[1:]  # the venv: its bin/ comes first on PATH below
            ),
        ]
    )
    env = user_env(PROCESSOR_WEB_PORT=str(web), PROCESSOR_GATEWAY_PORT=str(gateway))
    done = subprocess.run(
        ["bash", "-c", script], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240
    )
    logs = "".join(
        f"\n--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
        for p in (tmp_path / ".stack").glob("*.log")
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:] + logs
    out = done.stdout.splitlines()
    assert "produced 10000 sample records to orders (2 partitions)" in out, done.stdout
    assert "orders-0: offloaded" in done.stdout and "orders-1: offloaded" in done.stdout, done.stdout
    assert any("the broker deleted offsets 0.." in line for line in out), done.stdout
    assert out[-1].strip() == "10000", done.stdout  # every record, the broker holding none of them


def test_the_readme_quick_start_archives_and_reads_back_as_written(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    blocks = quick_start_blocks()
    assert [c for c in commands(blocks[0])] == ["make demo"]
    setup, reads = commands(blocks[2]), commands(blocks[3])
    exports = [c for c in setup if c.startswith("export ")]
    assert setup[0] == ". .venv/bin/activate"
    run = [c for c in setup[1:] if not c.startswith("export ")]
    assert run[-1] == "processor worker", run

    # the README's exports, evaluated by bash as written
    readme_env = exported(exports)
    assert set(readme_env) >= {
        "PROCESSOR_BOOTSTRAP_SERVERS",
        "PROCESSOR_TOPICS",
        "PROCESSOR_S3_BUCKET",
        "PROCESSOR_WEB_TOKEN",
        "AWS_DEFAULT_REGION",
    }, readme_env
    assert len(readme_env["PROCESSOR_WEB_TOKEN"]) == 64  # openssl rand -hex 32 ran

    # the README's values replaced by the test stack's
    topics = {t: f"qs-{t}" for t in readme_env["PROCESSOR_TOPICS"].split(",")}
    port = free_port()
    env = user_env(**readme_env)  # the stack's AWS_ variables below
    env.update(
        {
            "PROCESSOR_BOOTSTRAP_SERVERS": local_stack.bootstrap_servers,
            "PROCESSOR_S3_BUCKET": local_stack.bucket,
            "PROCESSOR_TOPICS": ",".join(topics.values()),
            **{k: v for k, v in local_stack.env().items() if k.startswith("AWS_")},
            "PROCESSOR_S3_ENDPOINT_URL": local_stack.s3_endpoint_url,
            "PROCESSOR_S3_PREFIX": "quick-start",
            "PROCESSOR_METADATA_TOPIC": META,
            "PROCESSOR_DELETION_TOPIC": f"{META}-deletions",
            "PROCESSOR_APP_ID": "quick-start",
            "PROCESSOR_DATA_DIR": str(tmp_path / "data"),
            "PROCESSOR_WEB_PORT": str(port),
            "PROCESSOR_SEGMENT_MS": "1000",
        }
    )
    env["AWS_DEFAULT_REGION"] = local_stack.env().get("AWS_DEFAULT_REGION", readme_env["AWS_DEFAULT_REGION"])
    for topic in topics.values():
        produce_plain(local_stack.bootstrap_servers, topic, 200, 1)

    def as_here(command: str) -> str:
        for theirs, ours in topics.items():
            command = re.sub(rf"\b{theirs}\b", ours, command)
        return command.replace(":6066", f":{port}")

    for command in run[:-1]:  # the pre-flight
        done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    with (tmp_path / "worker.log").open("wb") as log:
        worker = subprocess.Popen(
            ["bash", "-c", f"exec {run[-1]}"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        ends = {TopicPartition(t, 0): 199 for t in topics.values()}
        wait_offloaded(local_stack.bootstrap_servers, META, ends, 90, worker)
        outputs = []
        for command in map(as_here, reads):
            done = subprocess.run(
                ["bash", "-c", command], env=env, capture_output=True, text=True, timeout=60
            )
            assert done.returncode == 0, f"{command}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
            outputs.append(done.stdout)
    finally:
        worker.terminate()
        worker.wait(30)
    segments, fetched, served = outputs
    assert "qs-orders" in segments
    assert fetched.count("\n") >= 10, fetched
    assert '"offset": 0' in served or '"offset":0' in served, served[:500]
