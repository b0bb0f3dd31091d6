"""`make dist` builds an sdist and a wheel that install into a clean environment and run.

The wheel goes into fresh virtual environments (``python -m venv``, no site packages of this one)
two ways, then ``processor --version`` must print the project's version:

- the image's way (the Dockerfile's builder stage): the hash-pinned lock ``requirements/worker.txt``
  with ``--no-deps``, then the wheel with ``--no-deps``, then ``pip check``;
- the README's way: the wheel alone, its dependencies resolved from the wheel's own metadata.

uv installs (it is in the dev extra, and its cache makes a second run take seconds); PyPI must be
reachable (the test skips when it is not). In the integration folder, so ``-m integration`` selects it.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PROJECT["version"]
DIST_NAME = PROJECT["name"].replace("-", "_")
INDEX = "https://pypi.org/simple"
VENV = Path(sys.prefix)  # the environment running the tests: make's $(VENV), its uv
UV = VENV / "bin" / "uv"

pytestmark = pytest.mark.timeout(600)


def _run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=540, check=False
    )
    assert proc.returncode == 0, f"{' '.join(map(str, args))}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`make dist` into a directory of the test's own (the stamp taken as made: no venv rebuild)."""
    if shutil.which("make") is None or not UV.exists():
        pytest.skip("make dist needs make and uv (the dev extra)")
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
    except OSError as exc:
        pytest.skip(f"PyPI is not reachable: {exc}")
    out = tmp_path_factory.mktemp("dist")
    stamp = VENV / ".installed"
    _run("make", "--no-print-directory", "-o", stamp, "dist", f"VENV={VENV}", f"DIST={out}")
    return out


def _venv(path: Path) -> Path:
    _run(sys.executable, "-m", "venv", path)
    return path / "bin" / "python"


def _uv_install(python: Path, *args: str | Path) -> None:
    _run(UV, "pip", "install", "--quiet", "--no-config", "--index-url", INDEX, "--python", python, *args)


def _version(python: Path) -> str:
    """`processor --version` of that environment: its console script, run from outside the clone."""
    script = python.parent / "processor"
    return _run(script, "--version", cwd=python.parent).stdout.strip()


def test_make_dist_builds_a_wheel_and_an_sdist(dist: Path):
    wheels = sorted(dist.glob(f"{DIST_NAME}-*.whl"))
    sdists = sorted(dist.glob(f"{DIST_NAME}-*.tar.gz"))
    assert [w.name for w in wheels] == [f"{DIST_NAME}-{VERSION}-py3-none-any.whl"]
    assert [s.name for s in sdists] == [f"{DIST_NAME}-{VERSION}.tar.gz"]
    with zipfile.ZipFile(wheels[0]) as wheel:
        names = set(wheel.namelist())
        metadata = wheel.read(f"{DIST_NAME}-{VERSION}.dist-info/METADATA").decode()
        entry_points = wheel.read(f"{DIST_NAME}-{VERSION}.dist-info/entry_points.txt").decode()
    assert "processor/cli.py" in names
    assert any(n.startswith("processor/schemas/") for n in names), "the schemas ship in the wheel"
    assert "processor = processor.cli:main" in entry_points
    assert "Provides-Extra: msk" in metadata and "Provides-Extra: spark" in metadata
    with tarfile.open(sdists[0]) as sdist:
        members = {m.name.split("/", 1)[-1] for m in sdist.getmembers()}
    assert {"pyproject.toml", "README.md", "processor/cli.py"} <= members


def test_wheel_runs_with_the_image_lock(dist: Path, tmp_path: Path):
    """As the Dockerfile installs: the lock, hash-checked and complete (--no-deps), then the wheel."""
    python = _venv(tmp_path / "venv")
    _uv_install(python, "--require-hashes", "--no-deps", "-r", ROOT / "requirements" / "worker.txt")
    _uv_install(python, "--no-deps", next(dist.glob("*.whl")))
    _run(python, "-m", "pip", "check")
    assert _version(python) == f"processor {VERSION}"


def test_wheel_runs_installed_alone(dist: Path, tmp_path: Path):
    """As the README says: `pip install dist/kafka_tiered_processor-*.whl`, dependencies from its metadata."""
    python = _venv(tmp_path / "venv")
    _uv_install(python, next(dist.glob("*.whl")))
    script = python.parent / "processor"
    proc = subprocess.run(
        [str(script), "--version"],
        cwd=python.parent,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"processor {VERSION}"
