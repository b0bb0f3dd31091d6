"""Debian's package lists and one Debian tool (promtool) for the deploy tests, cached under ``.cache/``.

apt-get runs with a private configuration (sources, lists, cache all under
``.cache/debian/<release>/``), so a test can ask "is package X in Debian release R?" about a release
other than the machine's own (the image's base is trixie; this machine may run bookworm) without
touching the system's apt state, and no root is needed for it. ``promtool`` (Prometheus' rule
checker) comes from Debian's ``promtool`` package of the same release: ``apt-get download`` fetches
the .deb through the ordinary client and ``dpkg-deb -x`` unpacks it; nothing is installed.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

from tests.deploy.k8s_tools import ROOT, ToolUnavailable

CACHE = ROOT / ".cache" / "debian"
MIRROR = "http://deb.debian.org/debian"
SECURITY = "http://deb.debian.org/debian-security"
LISTS_MAX_AGE_S = 24 * 3600  # package lists older than this are fetched again
TOOLS_RELEASE = "trixie"  # where promtool comes from


def _arch() -> str:
    proc = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise ToolUnavailable("dpkg is not installed: not a Debian machine")
    return proc.stdout.strip()


class Release:
    """apt-get/apt-cache bound to one Debian release's package lists, in a folder of its own."""

    def __init__(self, codename: str) -> None:
        if shutil.which("apt-get") is None or shutil.which("apt-cache") is None:
            raise ToolUnavailable("apt-get is not installed: Debian's package lists cannot be read")
        self.codename = codename
        self.root = CACHE / codename
        self.options = [
            "-o", f"Dir::Etc::SourceList={self.root / 'sources.list'}",
            "-o", "Dir::Etc::SourceParts=/nonexistent",
            "-o", f"Dir::State::Lists={self.root / 'lists'}",
            "-o", f"Dir::Cache={self.root / 'cache'}",
            "-o", "Dir::Etc::Preferences=/nonexistent",
            "-o", "Dir::Etc::PreferencesParts=/nonexistent",
            "-o", "Dir::State::status=/dev/null",
            "-o", f"APT::Architecture={_arch()}",
            "-o", "APT::Sandbox::User=root",
        ]  # fmt: skip
        self._update()

    def _update(self) -> None:
        stamp = self.root / "updated"
        if stamp.exists() and time.time() - stamp.stat().st_mtime < LISTS_MAX_AGE_S:
            return
        for sub in ("lists/partial", "cache/archives/partial"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "sources.list").write_text(
            f"deb {MIRROR} {self.codename} main\n"
            f"deb {MIRROR} {self.codename}-updates main\n"
            f"deb {SECURITY} {self.codename}-security main\n"
        )
        proc = self._run("apt-get", "update")
        if proc.returncode != 0:
            raise ToolUnavailable(f"apt-get update for {self.codename} failed: {proc.stderr.strip()[-500:]}")
        stamp.touch()

    def _run(self, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        command = [args[0], *self.options, *args[1:]]
        return subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=cwd, check=False)

    def candidate(self, package: str) -> str | None:
        """The version apt would install of ``package`` from this release, or None if it has none."""
        proc = self._run("apt-cache", "policy", package)
        for line in proc.stdout.splitlines():
            if line.strip().startswith("Candidate:"):
                version = line.split(":", 1)[1].strip()
                return None if version == "(none)" else version
        return None

    def unpack(self, package: str) -> Path:
        """Download ``package``'s .deb and unpack it (no install); the folder it was unpacked into."""
        target = self.root / "unpacked" / package
        if target.exists():
            return target
        downloads = self.root / "downloads"
        downloads.mkdir(parents=True, exist_ok=True)
        proc = self._run("apt-get", "download", package, cwd=downloads)
        debs = sorted(downloads.glob(f"{package}_*.deb"))
        if proc.returncode != 0 or not debs:
            raise ToolUnavailable(f"apt-get download {package} failed: {proc.stderr.strip()[-500:]}")
        partial = target.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["dpkg-deb", "-x", str(debs[-1]), str(partial)], check=True, timeout=300)
        partial.rename(target)
        return target


def promtool() -> Path:
    """Path of Debian's promtool, downloaded and unpacked on first use."""
    path = Release(TOOLS_RELEASE).unpack("promtool") / "usr" / "bin" / "promtool"
    if not path.exists():
        raise ToolUnavailable("the promtool package holds no usr/bin/promtool")
    return path
