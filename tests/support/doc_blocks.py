"""The documentation's code blocks, for the tests that run them as written: a section of a Markdown
file, its fenced blocks, a shell block's command lines, the variables its ``export`` lines set (as
bash evaluates them), and the environment of a user's shell in the project's virtualenv."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def section(path: Path, heading: str) -> str:
    """The text under ``heading`` (a ``## `` or ``### `` title as written) up to the next heading of
    the same level or above."""
    text = path.read_text()
    level = heading.split(" ", 1)[0]
    assert set(level) == {"#"}, heading
    body = text.split(f"\n{heading}\n", 1)[1]
    ends = [m.start() for m in re.finditer(rf"^#{{1,{len(level)}}} ", body, re.M)]
    return body[: ends[0]] if ends else body


def code_blocks(text: str, *languages: str) -> list[str]:
    """The fenced blocks of ``text`` tagged with one of ``languages``, in order."""
    tags = "|".join(map(re.escape, languages))
    return re.findall(rf"```(?:{tags})\n(.*?)```", text, re.S)


def commands(block: str) -> list[str]:
    """The block's command lines as written, their trailing comments dropped."""
    lines = (re.sub(r"\s+#.*$", "", line).strip() for line in block.splitlines())
    return [line for line in lines if line]


def user_env(**variables: str) -> dict[str, str]:
    """A user's shell after ``. .venv/bin/activate``: this process's environment without its
    PROCESSOR_* and AWS_* variables, the virtualenv's bin/ first on PATH, then ``variables``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROCESSOR_", "AWS_"))}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    env.update(variables)
    return env


def exported(lines: list[str], env: dict[str, str] | None = None) -> dict[str, str]:
    """The PROCESSOR_* and AWS_* variables that ``lines`` (exports, ``eval "$(...)"``) leave set, as
    bash evaluates them in ``env`` (default: only PATH)."""
    shown = subprocess.run(
        ["bash", "-c", "\n".join(["set -euo pipefail", *lines, "env -0"])],
        capture_output=True,
        check=True,
        env=env if env is not None else {"PATH": os.environ["PATH"]},
        timeout=60,
    ).stdout.decode()
    pairs = (v.split("=", 1) for v in shown.split("\0") if "=" in v)
    return {k: v for k, v in pairs if k.startswith(("PROCESSOR_", "AWS_"))}
