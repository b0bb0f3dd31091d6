"""The layer contracts (pyproject.toml ``[tool.importlinter]``) hold on the real tree, and a deliberate
violation added to a copy of the package makes ``lint-imports`` fail, naming it."""

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
