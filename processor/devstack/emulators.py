"""Cloud storage emulators for the local stack: Azurite (Azure Blob) and fake-gcs-server (GCS).

Both are installed by the project itself, once per machine, into a cache folder (like the Kafka
jars, :mod:`processor.devstack.jars`): Azurite from the npm registry (``npm install azurite@VERSION``,
needs ``npm`` and Node.js on PATH), fake-gcs-server built from its Go module
(``go install github.com/fsouza/fake-gcs-server@VERSION``, needs ``go`` on PATH). The folder is
``$PROCESSOR_TOOLS_CACHE`` (default ``~/.cache/kafka-tiered-processor/tools``)/NAME-VERSION; a file
lock lets one process install while the others wait, and a ``.complete`` marker makes an
interrupted install start again. Each emulator listens on a free loopback port, keeps its data in
the stack folder, and is started and stopped by the stack like ``weed`` (by PID).

What each does not emulate (found by running the contract suite and probes against them; the
tests say how each gap is covered instead, see tests/contract/test_chunk_storage_contract.py):

fake-gcs-server (v1.56):
- No IAM: ``testIamPermissions`` is not served and nothing is ever refused for lack of a
  permission (the permission check of ``config --check --connect`` is tested on its parsing and
  naming, and against an answer the emulator cannot give, see tests/unit/test_cloud_storage.py).
- No XML multipart upload API (the backend uses resumable uploads, which it serves) and no
  per-request soft-delete, retention or encryption (CMEK) behaviour.
- ``ifGenerationMatch`` is ignored on compose and on delete (an existing compose target was
  overwritten when tried); it is enforced on uploads, single and resumable.
- The JSON batch endpoint answers an empty multipart (no sub-responses, nothing deleted): the
  backend deletes many objects with parallel DELETEs instead of a batch.
- Ranged reads, listing with a delimiter and compose are served.

Azurite (3.37):
- Put Blob From URL answers 501 (not implemented): server-side copy uses Copy Blob instead.
- Authorization is the well-known development account key only: no Entra ID tokens, no RBAC data
  actions (``DefaultAzureCredential`` and the roles are not exercised here), SAS permissions are
  checked.
- ``If-None-Match: *`` on Put Blob and Put Block List, ETag conditions, ranged reads, delimiter
  listings and blob batch deletes are served.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from processor.devstack.jars import locked
from processor.devstack.servers import wait_writable
from processor.errors import ConfigError, ServiceUnavailableError
from processor.storage.chunk_storage import ChunkStorage

AZURITE_VERSION = "3.37.0"
FAKE_GCS_MODULE = "github.com/fsouza/fake-gcs-server"
FAKE_GCS_VERSION = "v1.56.1"
CACHE_ENV = "PROCESSOR_TOOLS_CACHE"
COMPLETE = ".complete"
INSTALL_TIMEOUT_S = 900.0

# Azurite's fixed development account (public, documented by Microsoft: not a secret)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="

GCS = "gcs"
AZURE = "azure"
S3 = "s3"
KINDS = (S3, GCS, AZURE)


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-tiered-processor" / "tools"


def _install(name: str, tool: str, command: list[str], env: dict[str, str] | None = None) -> Path:
    """Run ``command`` (with ``{dir}`` replaced by a staging folder) once per machine; the folder."""
    target = cache_root() / name
    if (target / COMPLETE).is_file():
        return target
    if shutil.which(tool) is None:
        raise ConfigError(f"installing {name} needs {tool} on PATH")
    with locked(cache_root() / f"{name}.lock"):
        if (target / COMPLETE).is_file():  # another process installed it while we waited
            return target
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=cache_root()))
        try:
            done = subprocess.run(
                [part.replace("{dir}", str(staging)) for part in command],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
                env={**os.environ, **{k: v.replace("{dir}", str(staging)) for k, v in (env or {}).items()}},
            )
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise ServiceUnavailableError(f"installing {name} failed (exit {done.returncode}):\n{tail}")
            (staging / COMPLETE).write_text(name)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def azurite_binary() -> Path:
    """Azurite's blob server (``azurite-blob``), installed from npm on first use."""
    folder = _install(
        f"azurite-{AZURITE_VERSION}",
        "npm",
        ["npm", "install", "--no-audit", "--no-fund", "--loglevel=error", "--prefix", "{dir}",
         f"azurite@{AZURITE_VERSION}"],
    )  # fmt: skip
    return folder / "node_modules" / ".bin" / "azurite-blob"


def fake_gcs_binary() -> Path:
    """fake-gcs-server, built from its Go module on first use."""
    folder = _install(
        f"fake-gcs-server-{FAKE_GCS_VERSION}",
        "go",
        ["go", "install", f"{FAKE_GCS_MODULE}@{FAKE_GCS_VERSION}"],
        env={"GOBIN": "{dir}", "CGO_ENABLED": "0"},
    )
    return folder / "fake-gcs-server"


@dataclass(frozen=True, slots=True)
class Emulator:
    """How to start one emulator and the environment that points the processor at it."""

    kind: str
    command: list[str]
    log_name: str
    endpoint: str

    def env(self, bucket: str) -> dict[str, str]:
        """PROCESSOR_* variables of a worker or the CLI using this emulator."""
        if self.kind == GCS:
            return {
                "PROCESSOR_STORAGE": GCS,
                "PROCESSOR_GCS_BUCKET": bucket,
                "PROCESSOR_GCS_ENDPOINT_URL": self.endpoint,
                "PROCESSOR_GCS_ANONYMOUS": "true",
            }
        return {
            "PROCESSOR_STORAGE": AZURE,
            "PROCESSOR_AZURE_CONTAINER": bucket,
            "PROCESSOR_AZURE_CONNECTION_STRING": azurite_connection_string(self.endpoint),
        }


def azurite_connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
        f"BlobEndpoint={endpoint};"
    )


def plan(kind: str, data_dir: Path, port: int) -> Emulator:
    """The command line of ``kind``'s emulator on ``port``, its data under ``data_dir``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    if kind == GCS:
        return Emulator(
            GCS,
            [
                str(fake_gcs_binary()),
                "-scheme=http",
                "-host=127.0.0.1",
                f"-port={port}",
                "-backend=filesystem",
                f"-filesystem-root={data_dir}",
                f"-public-host=127.0.0.1:{port}",
                f"-external-url=http://127.0.0.1:{port}",
                "-log-level=warn",
            ],
            "fake-gcs-server.log",
            f"http://127.0.0.1:{port}",
        )
    if kind == AZURE:
        node = shutil.which("node")
        if node is None:
            raise ConfigError("the Azurite emulator needs Node.js (node) on PATH")
        return Emulator(
            AZURE,
            [
                # node itself first: the stack tells its processes by their first argument
                node,
                str(azurite_binary().resolve()),
                "--blobHost=127.0.0.1",
                f"--blobPort={port}",
                f"--location={data_dir}",
                "--skipApiVersionCheck",
                "--disableTelemetry",
            ],
            "azurite.log",
            f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}",
        )
    raise ValueError(f"no emulator for storage {kind!r}: choose {GCS} or {AZURE}")


def storage_for(emulator: Emulator, bucket: str, **tuning: object) -> ChunkStorage:
    """A storage on the emulator (the stack's readiness check, tests)."""
    if emulator.kind == GCS:
        from processor.storage.gcs import gcs_storage

        return gcs_storage(bucket, emulator.endpoint, anonymous=True, **tuning)
    from processor.storage.azure import azure_storage

    return azure_storage(
        bucket,
        connection_string=azurite_connection_string(emulator.endpoint),
        **tuning,  # type: ignore[arg-type]
    )


def wait_ready(emulator: Emulator, bucket: str, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Ready means a real write works: create the bucket or container, put and delete a probe."""
    storage = storage_for(emulator, bucket, connect_timeout_s=2, read_timeout_s=5, max_attempts=1)
    server = emulator.log_name.removesuffix(".log")
    where = f"the {emulator.kind} emulator at {emulator.endpoint}"
    try:
        wait_writable(storage, storage.create_bucket, proc, server, where, timeout_s)  # type: ignore[attr-defined]
    finally:
        storage.close()


def spawn(emulator: Emulator, log_path: Path) -> subprocess.Popen[bytes]:
    """Start the emulator as a child in its own session (stopped by PID, never by name)."""
    with log_path.open("ab") as out:
        return subprocess.Popen(
            emulator.command, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip


def stop_process(proc: subprocess.Popen[bytes], grace_s: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``; reaped either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def running(kind: str, root: Path, bucket: str, port: int, timeout_s: float = 90.0) -> Iterator[Emulator]:
    """``kind``'s emulator on ``port`` with its bucket or container made, for as long as the block
    runs (tests and benchmarks; the local stack starts its own through :func:`plan`)."""
    emulator = plan(kind, root / f"{kind}-data", port)
    proc = spawn(emulator, root / emulator.log_name)
    try:
        wait_ready(emulator, bucket, proc, timeout_s)
        yield emulator
    finally:
        stop_process(proc)


def installed() -> bool:
    """Whether both emulators are installed in this machine's cache already."""
    names = (f"azurite-{AZURITE_VERSION}", f"fake-gcs-server-{FAKE_GCS_VERSION}")
    return all((cache_root() / name / COMPLETE).is_file() for name in names)


def install_all() -> dict[str, Path]:
    """Install both emulators now (``python -m processor.devstack.emulators``: a machine's set-up
    step, so a first test run or ``dev up`` does not spend minutes building them)."""
    return {GCS: fake_gcs_binary(), AZURE: azurite_binary()}


if __name__ == "__main__":
    for name, path in install_all().items():
        print(f"{name}: {path}")
