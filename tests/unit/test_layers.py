"""The layer contracts (pyproject.toml ``[tool.importlinter]``) hold on the real tree, a deliberate
violation added to a copy of the package makes ``lint-imports`` fail, naming it, and so does a new
package that takes no floor."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}  # the copy's packages, not the installed ones
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--config", str(tree / "pyproject.toml")],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def copy_of_the_tree(dest: Path) -> Path:
    shutil.copytree(ROOT / "processor", dest / "processor", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "tests" / "support", dest / "tests" / "support")
    shutil.copy(ROOT / "tests" / "__init__.py", dest / "tests" / "__init__.py")
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    return dest


def test_the_real_tree_keeps_every_layer_contract() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_an_unchanged_copy_keeps_them_too(tmp_path: Path) -> None:
    result = lint_imports(copy_of_the_tree(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("module", "violation", "reported"),
    [
        (
            "leader/resume.py",
            "from processor.follower import materializer",
            "processor.leader is not allowed to import processor.follower",
        ),
        ("segment/records.py", "import boto3", "processor.segment is not allowed to import boto3"),
        ("storage/filesystem.py", "import faust", "processor is not allowed to import faust"),
        ("reader/record_json.py", "from tests.support import fault_proxy", "not allowed to import tests"),
        # a role reads no settings: the wiring builds it from them
        (
            "gateway/address_rewrite.py",
            "from processor.config import Settings",
            "processor.gateway is not allowed to import processor.config",
        ),
        # a floor imports only the floors below it
        (
            "metadata/model.py",
            "from processor.reader import record_json",
            "processor.metadata is not allowed to import processor.reader",
        ),
        (
            "reader/record_json.py",
            "from processor.wiring import storage",
            "processor.reader is not allowed to import processor.wiring",
        ),
        # roles on one floor do not import each other
        (
            "gateway/address_rewrite.py",
            "from processor.restore import plan",
            "processor.gateway is not allowed to import processor.restore",
        ),
        # the partition type stays pure
        (
            "kafka/partition.py",
            "import confluent_kafka",
            "processor.kafka.partition is not allowed to import confluent_kafka",
        ),
    ],
)
def test_a_deliberate_violation_fails_the_contracts(
    tmp_path: Path, module: str, violation: str, reported: str
) -> None:
    tree = copy_of_the_tree(tmp_path)
    path = tree / "processor" / module
    path.write_text(path.read_text() + f"\n{violation}  # deliberate layer violation\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert reported in result.stdout, result.stdout


def test_a_package_without_a_floor_fails_the_contracts(tmp_path: Path) -> None:
    tree = copy_of_the_tree(tmp_path)
    room = tree / "processor" / "newroom"
    room.mkdir()
    (room / "__init__.py").write_text('"""A package nobody gave a floor."""\n')
    (room / "thing.py").write_text("from processor.errors import ConfigError  # noqa: F401\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "The following modules are not listed as layers:" in result.stdout, result.stdout
    assert "- processor.newroom" in result.stdout, result.stdout
