"""Java jars for the local stack, resolved by Maven from the pinned files in ``maven/`` and cached.

``resolve("kafka")`` returns a folder holding every jar of ``maven/kafka.pom.xml`` with its
dependencies (``java -cp 'DIR/*'``). The folder is named after the pom's SHA-256, under
``$PROCESSOR_JARS_CACHE`` (default ``~/.cache/kafka-tiered-processor/jars``), so a changed pom is a
new folder and an unchanged one is resolved once per machine (Maven's own ``~/.m2`` makes a second
resolution offline too). Several processes resolving at once (test workers) take a file lock: one
runs Maven, the others wait and use its folder. A folder counts only once its ``.complete`` marker is
written, after Maven succeeded, so an interrupted resolution is redone, never half used.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

from processor.errors import ConfigError, ServiceUnavailableError

POM_DIR = Path(__file__).parent / "maven"
CACHE_ENV = "PROCESSOR_JARS_CACHE"
COMPLETE = ".complete"
# A first resolution downloads ~60 MB from Maven Central; later ones copy from ~/.m2.
RESOLVE_TIMEOUT_S = 900.0


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-tiered-processor" / "jars"


def pom(name: str) -> Path:
    path = POM_DIR / f"{name}.pom.xml"
    if not path.is_file():
        raise ValueError(f"no Maven file {path.name} in {POM_DIR}")
    return path


def java_tools_missing() -> list[str]:
    """The programs the Apache Kafka stack needs that are not on PATH (``java``, ``mvn``)."""
    return [tool for tool in ("java", "mvn") if shutil.which(tool) is None]


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock of this machine's processes on ``path`` (a cache's installer)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def resolve(name: str) -> Path:
    """The folder of ``maven/{name}.pom.xml``'s jars, resolving them first if not cached."""
    source = pom(name)
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    target = cache_root() / f"{name}-{digest}"
    if (target / COMPLETE).is_file():
        return target
    missing = java_tools_missing()
    if missing:
        raise ConfigError(
            f"resolving {source.name} needs {' and '.join(missing)} on PATH "
            "(Java 17 and Maven; or run the stack on Tansu: --broker tansu)"
        )
    with locked(cache_root() / f"{name}-{digest}.lock"):
        if (target / COMPLETE).is_file():  # another process resolved it while we waited
            return target
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=cache_root()))
        try:
            done = subprocess.run(
                [
                    "mvn", "-q", "-B", "-f", str(source), "dependency:copy-dependencies",
                    f"-DoutputDirectory={staging}",
                ],
                capture_output=True,
                text=True,
                timeout=RESOLVE_TIMEOUT_S,
                check=False,
            )  # fmt: skip
            if done.returncode != 0:
                tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
                raise ServiceUnavailableError(
                    f"Maven could not resolve {source.name} (exit {done.returncode}):\n{tail}"
                )
            (staging / COMPLETE).write_text(digest)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return target


def classpath(name: str) -> str:
    """``java -cp`` for the jars of ``maven/{name}.pom.xml``."""
    return str(resolve(name) / "*")


def jar_files(name: str) -> list[Path]:
    """Each jar of ``maven/{name}.pom.xml`` (e.g. for Spark's ``spark.jars``)."""
    return sorted(resolve(name).glob("*.jar"))
