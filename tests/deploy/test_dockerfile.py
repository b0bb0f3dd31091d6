"""The container image's Dockerfile, checked without building it.

There is no Docker engine on the machines these tests run on, so the image is never built here:
these tests parse the Dockerfile (dockerfile-parse, the parser Red Hat's OSBS uses) and check what
can be checked statically: it is multi-stage on python:3.11-slim of a named Debian release pinned by
digest, the final stage runs as a non-root user, installs no compiler, carries the OCI labels, and
its entry point is the ``processor`` console script declared in pyproject.toml; dependencies
install from hash-pinned locks that agree with pyproject.toml, before the source is copied; the
Spark extra is a build argument and its JRE package exists in the base's Debian release (asked of
that release's package lists); .dockerignore keeps the build context small.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from dockerfile_parse import DockerfileParser
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.debian_tools import Release
from tests.deploy.k8s_tools import ToolUnavailable

ROOT = Path(__file__).resolve().parents[2]
BASE = re.compile(r"^python:3\.11-slim-(?P<release>[a-z]+)@sha256:[0-9a-f]{64}$")
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


def _args(instructions: list[dict[str, Any]]) -> dict[str, str]:
    return {
        ins["value"].split("=", 1)[0]: ins["value"].split("=", 1)[1]
        for ins in instructions
        if ins["instruction"] == "ARG" and "=" in ins["value"]
    }


def _runs(stage: list[dict[str, Any]]) -> str:
    return "\n".join(ins["value"] for ins in stage if ins["instruction"] == "RUN")


def test_multi_stage_on_slim_python_pinned_by_digest(instructions):
    stages = _stages(instructions)
    assert len(stages) >= 2
    image = _args(instructions)["PYTHON_IMAGE"]
    assert BASE.match(image), f"{image}: python:3.11-slim-<debian release>@sha256:<digest>"
    for stage in stages:
        assert stage[0]["value"].startswith("${PYTHON_IMAGE}")


def test_spark_jre_is_in_the_base_images_debian_release(instructions):
    """The JRE package the Spark build installs exists in the Debian release the base is built on."""
    match = BASE.match(_args(instructions)["PYTHON_IMAGE"])
    assert match is not None
    packages = re.findall(
        r"\b(openjdk-\d+-jre(?:-headless)?|default-jre(?:-headless)?)\b", _runs(_stages(instructions)[-1])
    )
    assert len(set(packages)) == 1, f"one JRE package in the runtime stage, found {packages}"
    try:
        release = Release(match["release"])
    except ToolUnavailable as exc:
        pytest.skip(f"Debian's package lists cannot be read here: {exc}")
    assert release.candidate(packages[0]) is not None, f"{packages[0]} is not in Debian {match['release']}"


def test_dependencies_install_from_locks_before_the_source(instructions):
    builder = _stages(instructions)[0]
    order = [(ins["instruction"], ins["value"]) for ins in builder]
    copy_locks = order.index(("COPY", "requirements ./requirements"))
    install = next(
        i for i, (kind, value) in enumerate(order) if kind == "RUN" and "--require-hashes" in value
    )
    copy_source = order.index(("COPY", "processor ./processor"))
    assert copy_locks < install < copy_source
    assert '-r "$lock"' in order[install][1] and "requirements/${EXTRAS:-worker}.txt" in order[install][1]
    assert "--no-deps" in order[install][1], "the lock is complete: pip resolves nothing on its own"
    build = " ".join(value for kind, value in order[copy_source:] if kind == "RUN")
    assert "--no-deps" in build and "--no-build-isolation" in build and "pip check" in build


def _lock(name: str) -> dict[str, str]:
    """Package -> pinned version of requirements/<name>; every entry pinned with == and hashed."""
    text = (ROOT / "requirements" / name).read_text()
    pins: dict[str, str] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text):
        if not entry.strip() or entry.startswith("#"):
            continue
        requirement = entry.split("\\", 1)[0].strip()
        assert "==" in requirement, f"{name}: {requirement!r} is not pinned"
        assert "--hash=sha256:" in entry, f"{name}: {requirement!r} has no hash"
        package, version = requirement.split("==", 1)
        pins[canonicalize_name(package.split("[", 1)[0])] = version.split(";", 1)[0].strip()
    return pins


# Every image carries the msk extra: the chart offers kafka.sasl.oauthTokenProvider=aws-msk-iam, and a
# worker without the signer exits at start ("needs the [msk] extra").
LOCK_EXTRAS = [("worker.txt", ("msk",)), ("spark.txt", ("msk", "spark"))]


@pytest.mark.parametrize(("lock", "extras"), LOCK_EXTRAS)
def test_locks_satisfy_pyproject(lock, extras):
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    wanted = list(project["project"]["dependencies"])
    for extra in extras:
        wanted += project["project"]["optional-dependencies"][extra]
    # what the image needs beyond pyproject.toml (requirements/image.in says why)
    wanted += [
        line.split("#", 1)[0].strip()
        for line in (ROOT / "requirements" / "image.in").read_text().splitlines()
        if line.split("#", 1)[0].strip()
    ]
    pins = _lock(lock)
    for text in wanted:
        requirement = Requirement(text)
        name = canonicalize_name(requirement.name)
        assert name in pins, f"{requirement.name} is missing from requirements/{lock}: run make lock"
        assert requirement.specifier.contains(pins[name], prereleases=True), (
            f"requirements/{lock} pins {name}=={pins[name]}, pyproject.toml wants {requirement}: make lock"
        )


@pytest.mark.parametrize("lock", [lock for lock, _ in LOCK_EXTRAS])
def test_every_image_carries_the_msk_iam_signer(lock):
    """aws-msk-iam (processor/kafka/oauth.py) imports aws_msk_iam_sasl_signer: in every image's lock."""
    msk = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["msk"]
    names = {canonicalize_name(Requirement(text).name) for text in msk}
    assert "aws-msk-iam-sasl-signer-python" in names
    assert names <= set(_lock(lock)), f"requirements/{lock} lacks the msk extra: make lock"
    makefile = (ROOT / "Makefile").read_text()
    line = next(x for x in makefile.splitlines() if f"-o requirements/{lock}" in x)
    assert "--extra msk" in line, f"make lock would drop the msk extra from requirements/{lock}"
    assert "requirements/image.in" in line, f"make lock would drop requirements/image.in from {lock}"


def test_build_backend_is_locked():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    pins = _lock("build.txt")
    for text in project["build-system"]["requires"]:
        requirement = Requirement(text)
        assert requirement.specifier.contains(pins[canonicalize_name(requirement.name)])


def test_oci_labels(instructions):
    final = _stages(instructions)[-1]
    text = " ".join(ins["value"] for ins in final if ins["instruction"] == "LABEL")
    labels = dict(re.findall(r'(org\.opencontainers\.image\.[a-z.]+)="([^"]*)"', text))
    for key in ("title", "description", "version", "revision", "created", "source", "licenses", "base.name"):
        assert labels.get(f"org.opencontainers.image.{key}"), key
    assert labels["org.opencontainers.image.base.name"] == "${PYTHON_IMAGE}"
    assert labels["org.opencontainers.image.revision"] == "${REVISION}"
    assert labels["org.opencontainers.image.source"] == "${SOURCE}"  # no made-up repository URL


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
    assert "requirements/${EXTRAS:-worker}.txt" in install
    assert (ROOT / "requirements" / "spark.txt").exists() and (ROOT / "requirements" / "worker.txt").exists()
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
