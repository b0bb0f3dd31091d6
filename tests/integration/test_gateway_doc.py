"""docs/gateway.md's "Run it", its commands run as written beside a worker started as the README
starts one, on the session stack.

A user's shell on the local stack: ``eval "$(processor dev env)"`` (what the doc says sets the rest),
sample records in a topic of three partitions, the README's worker line, ``processor offload`` and
``processor dev truncate`` (the broker deletes every record). Then the doc's block, each line as
written, in that same shell; only the doc's stand-ins for the user's own values are replaced by the
stack's (the cluster, the bucket, the workers' metadata topic, the name clients reach the gateway
by) and its fixed ports by free ones, so tests can run side by side. An unmodified consumer
bootstrapped on the gateway then reads every record, byte-exact, though the broker holds none.
"""

from __future__ import annotations

import re
import socket
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from processor.devstack import stack
from processor.devstack.sample_data import SampleRecord, sample_record
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from tests.support.consumers import check_every_record_once, read_confluent
from tests.support.doc_blocks import ROOT, code_blocks, commands, exported, section, user_env

pytestmark = pytest.mark.integration

DOC = ROOT / "docs" / "gateway.md"
README = ROOT / "README.md"
TOPIC = "gateway-doc-orders"
PARTITIONS = 3
RECORDS = 3000
META = "__gateway_doc_metadata"


def run_it_block() -> list[str]:
    blocks = code_blocks(section(DOC, "## Run it"), "bash", "sh")
    assert len(blocks) == 1, blocks
    return commands(blocks[0])


def readme_worker_line() -> str:
    """The line of the README's local-stack block that starts the worker."""
    block = code_blocks(section(README, "## Quick start"), "sh")[1]
    (line,) = [c for c in commands(block) if re.search(r"\bprocessor worker\b", c)]
    return line


def free_gateway_port(broker_offset: int) -> int:
    """A free port P whose broker port P + broker_offset is free too."""
    for _ in range(50):
        port = free_port()
        with socket.socket() as s:
            try:
                s.bind(("0.0.0.0", port + broker_offset))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of ports")


def wait_for(what: str, check: Callable[[], bool], timeout_s: float, *procs: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        for proc in procs:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{proc.args!r} exited with code {proc.returncode} while waiting for {what}"
                )
        if time.monotonic() > deadline:
            raise TimeoutError(f"not reached within {timeout_s:.0f} s: {what}")
        time.sleep(0.5)


def http_ok(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def metric(url: str, name: str, **labels: str) -> float:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def shell(command: str, env: dict[str, str], cwd: Path, timeout_s: float = 180) -> str:
    done = subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{command}"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    assert done.returncode == 0, f"{command}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def background(script: str, env: dict[str, str], cwd: Path, log: Path) -> subprocess.Popen[bytes]:
    """``script`` in bash; SIGTERM stops it and what it started in the background."""
    with log.open("wb") as out:
        return subprocess.Popen(
            ["bash", "-c", f"trap 'kill $(jobs -p) 2>/dev/null; wait' TERM EXIT\n{script}\nwait"],
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def expected() -> dict[int, list[SampleRecord]]:
    """What ``processor dev produce`` produced, by partition, in offset order."""
    by_partition: dict[int, list[SampleRecord]] = {p: [] for p in range(PARTITIONS)}
    for i in range(RECORDS):
        record = sample_record(i, PARTITIONS, big_every=0)
        by_partition[record.partition].append(record)
    return by_partition


def reads_every_record_through(
    gateway: subprocess.Popen[bytes], worker: subprocess.Popen[bytes], port: int, web: int, group: str
) -> None:
    """Once the gateway is ready, an unmodified consumer bootstrapped on it (``bootstrap.servers``
    changed and nothing else) reads every record, byte-exact, each from the archive."""
    base = f"http://127.0.0.1:{web}"
    wait_for("the gateway's /readyz", lambda: http_ok(f"{base}/readyz"), 120, gateway, worker)
    got = read_confluent(f"127.0.0.1:{port}", group, TOPIC, RECORDS)
    check_every_record_once(got, expected(), f"confluent-kafka through the gateway on {port}")
    served = metric(f"{base}/metrics", "processor_gateway_fetch_records_total", topic=TOPIC, source="archive")
    assert served >= RECORDS, served  # through the gateway, from the archive: the broker holds none


@pytest.mark.timeout(360)  # a worker, an offload and a gateway, each a process of its own
def test_the_gateway_run_it_block_beside_the_readme_worker_serves_what_the_broker_deleted(
    local_stack: StackInfo, tmp_path: Path
) -> None:
    if local_stack.broker != stack.KAFKA:
        pytest.skip("the broker must delete the records: Tansu never deletes any")
    lines = run_it_block()
    assert lines[-1] == "processor gateway", lines
    exports = lines[:-1]
    assert all(line.startswith("export ") for line in exports), exports
    worker_line = readme_worker_line()
    assert worker_line.endswith(" &") and "PROCESSOR_TOPICS=orders " in worker_line, worker_line

    # the user's shell on the local stack: the venv, `eval "$(processor dev env)"`, and what the test
    # keeps apart from other tests on the same stack (as the quick-start test does)
    dev_env = exported([f'eval "$(processor dev env --dir {local_stack.dir})"'], user_env())
    assert dev_env["PROCESSOR_BOOTSTRAP_SERVERS"] == local_stack.bootstrap_servers, dev_env
    worker_web = free_port()
    env = user_env(
        **{
            **dev_env,
            "PROCESSOR_METADATA_TOPIC": META,
            "PROCESSOR_DELETION_TOPIC": f"{META}-deletions",
            "PROCESSOR_S3_PREFIX": "gateway-doc",
            "PROCESSOR_APP_ID": "gateway-doc",
            "PROCESSOR_WEB_PORT": str(worker_web),  # the README's worker is on 6066
        }
    )
    (tmp_path / ".stack").mkdir()
    produced = shell(
        f"processor dev produce --dir {local_stack.dir} --topic {TOPIC} --records {RECORDS} "
        f"--partitions {PARTITIONS}",
        env,
        tmp_path,
    )
    assert f"produced {RECORDS} sample records to {TOPIC} ({PARTITIONS} partitions)" in produced

    worker = background(
        worker_line.replace("=orders ", f"={TOPIC} "), env, tmp_path, tmp_path / "worker.sh.log"
    )
    gateways: list[subprocess.Popen[bytes]] = []
    try:
        offloaded = shell(f"processor offload --topic {TOPIC}", env, tmp_path, 240)
        for p in range(PARTITIONS):
            assert f"{TOPIC}-{p}: offloaded" in offloaded, offloaded
        truncated = shell(f"processor dev truncate --dir {local_stack.dir} --topic {TOPIC}", env, tmp_path)
        assert truncated.count("the broker deleted offsets 0..") == PARTITIONS, truncated

        # the doc's block as written; its stand-ins for the user's values replaced by the stack's
        first_node_id = int(env.get("PROCESSOR_GATEWAY_NODE_IDS", "0-63").split("-")[0])
        kafka_port = free_gateway_port(1 + 1 - first_node_id)  # Apache Kafka's node id 1
        gateway_web = free_port()
        ours = {
            "BOOTSTRAP_SERVERS=broker-1:9092": f"BOOTSTRAP_SERVERS={local_stack.bootstrap_servers}",
            "S3_BUCKET=my-archive": f"S3_BUCKET={local_stack.bucket}",
            "METADATA_TOPIC=__remote_log_metadata": f"METADATA_TOPIC={META}",
            "GATEWAY_ADVERTISED_HOST=kafka-gateway.internal": "GATEWAY_ADVERTISED_HOST=127.0.0.1",
            "GATEWAY_PORT=19092": f"GATEWAY_PORT={kafka_port}",
            "WEB_PORT=6067": f"WEB_PORT={gateway_web}",
        }
        script = "\n".join(exports)
        for theirs, mine in ours.items():
            assert script.count(f"PROCESSOR_{theirs}") == 1, (
                f"PROCESSOR_{theirs} not in the doc's block: {script}"
            )
            script = script.replace(f"PROCESSOR_{theirs}", f"PROCESSOR_{mine}")
        *others, own = script.splitlines()
        assert own.startswith("export PROCESSOR_WEB_PORT=") and "PROCESSOR_DATA_DIR=" in own, own

        # without its last export, the worker's web port and data directory: refused, as the doc says
        refused = subprocess.run(
            ["bash", "-c", "\n".join(["set -euo pipefail", *others, "processor gateway"])],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
        )
        told = (refused.stdout + refused.stderr).strip()
        assert refused.returncode == 2, told[-3000:]
        assert len(told.splitlines()) == 1 and re.search(r"PROCESSOR_(WEB_PORT|DATA_DIR)\b", told), told

        gateways.append(
            background(
                f"set -euo pipefail\n{script}\nprocessor gateway &", env, tmp_path, tmp_path / "gateway.log"
            )
        )
        reads_every_record_through(gateways[-1], worker, kafka_port, gateway_web, "gateway-doc-readers")

        # on the local stack, as the doc says after the block: dev env, the last export, the gateway
        stop(gateways[-1])
        assert "bootstrap.servers=127.0.0.1:19092" in " ".join(section(DOC, "## Run it").split())
        local_port, local_web = free_gateway_port(1 + 1 - first_node_id), free_port()
        local_env = {**env, "PROCESSOR_GATEWAY_PORT": str(local_port)}  # for its default, 19092
        last = exports[-1].replace("PROCESSOR_WEB_PORT=6067", f"PROCESSOR_WEB_PORT={local_web}")
        gateways.append(
            background(
                f"set -euo pipefail\n{last}\nprocessor gateway &", local_env, tmp_path, tmp_path / "local.log"
            )
        )
        reads_every_record_through(gateways[-1], worker, local_port, local_web, "gateway-doc-local")
    except BaseException:
        for log in [tmp_path / "worker.sh.log", tmp_path / ".stack" / "worker.log", *tmp_path.glob("*.log")]:
            if log.exists():
                print(f"--- {log.name}\n{log.read_text(errors='replace')[-4000:]}")
        raise
    finally:
        for gateway in gateways:
            stop(gateway)
        stop(worker)
