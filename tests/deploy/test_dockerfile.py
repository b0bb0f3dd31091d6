"""The container image's Dockerfile, checked without building it.

There is no Docker engine on the machines these tests run on, so the image is never built here:
these tests parse the Dockerfile (dockerfile-parse, the parser Red Hat's OSBS uses) and check what
can be checked statically: it is multi-stage on python:3.11-slim, the final stage runs as a non-root
user, installs no compiler, and its entry point is the ``processor`` console script declared in
pyproject.toml; the Spark extra is a build argument; .dockerignore keeps the build context small.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser

ROOT = Path(__file__).resolve().parents[2]
COMPILERS = ("build-essential", "gcc", "g++", "clang", "make ", "python3-dev", "libc6-dev")


@pytest.fixture(scope="module")
def instructions() -> list[dict[str, Any]]:
    parser = DockerfileParser(path=str(ROOT / "Dockerfile"))
    result: list[dict[str, Any]] = parser.structure
    assert result, "the Dockerfile parses into instructions"
    return result


def _stages(instructions: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    stages: list[list[dict[str, Any]]] = []
    for ins in instructions:
        if ins["instruction"] == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(ins)
    return stages


def test_multi_stage_on_slim_python(instructions):
    stages = _stages(instructions)
    assert len(stages) >= 2
    args = {
        ins["value"].split("=", 1)[0]: ins["value"].split("=", 1)[1]
        for ins in instructions
        if ins["instruction"] == "ARG" and "=" in ins["value"]
    }
    assert args["PYTHON_IMAGE"] == "python:3.11-slim"
    for stage in stages:
        assert stage[0]["value"].startswith("${PYTHON_IMAGE}")


def test_final_stage_has_no_compilers_and_copies_the_built_environment(instructions):
    final = _stages(instructions)[-1]
    text = "\n".join(ins["value"] for ins in final if ins["instruction"] == "RUN")
    for compiler in COMPILERS:
        assert compiler not in text, f"{compiler!r} installed in the final stage"
    copies = [ins["value"] for ins in final if ins["instruction"] == "COPY"]
    assert any(c.startswith("--from=builder /opt/venv") for c in copies)
    # the compilers live in the builder only
    builder = _stages(instructions)[0]
    assert any("build-essential" in ins["value"] for ins in builder if ins["instruction"] == "RUN")


def test_runs_as_non_root(instructions):
    final = _stages(instructions)[-1]
    users = [ins["value"].strip() for ins in final if ins["instruction"] == "USER"]
    assert users, "the final stage sets USER"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}
    assert re.fullmatch(r"\d+", user), "a numeric uid, so runAsNonRoot can verify it"
    assert int(user) >= 1000


def test_entry_point_is_the_console_script(instructions):
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts["processor"] == "processor.cli:main"
    final = _stages(instructions)[-1]
    entry = [ins["value"] for ins in final if ins["instruction"] == "ENTRYPOINT"][-1]
    assert entry.strip() == '["processor"]'
    cmd = [ins["value"] for ins in final if ins["instruction"] == "CMD"][-1]
    assert cmd.strip() == '["worker"]'


def test_spark_extra_is_a_build_argument(instructions):
    builder = _stages(instructions)[0]
    assert any(ins["instruction"] == "ARG" and ins["value"] == 'EXTRAS=""' for ins in builder)
    install = " ".join(ins["value"] for ins in builder if ins["instruction"] == "RUN")
    assert '".[${EXTRAS}]"' in install
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "spark" in extras


def test_env_names_are_settings_fields(instructions):
    from processor.config import ENV_PREFIX, Settings

    final = _stages(instructions)[-1]
    env_text = " ".join(ins["value"] for ins in final if ins["instruction"] == "ENV")
    names = re.findall(r"\b(PROCESSOR_[A-Z_]+)=", env_text)
    assert names
    for name in names:
        assert name.removeprefix(ENV_PREFIX).lower() in Settings.model_fields, name


def test_dockerignore_excludes_local_state():
    ignored = {line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines() if line.strip()}
    for entry in ("**/.venv", ".git", ".cache", ".stack", "tests", "data"):
        assert entry in ignored
