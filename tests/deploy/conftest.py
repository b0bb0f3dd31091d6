"""Fixtures of the deploy tests: helm (installed on first use), renders shared by several tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart import ALL_ON, BASE, render
from tests.deploy.k8s_tools import ToolUnavailable, tool


def tool_or_skip(name: str) -> Path:
    """The tool (installed on first use), or the test skipped with the reason it cannot be."""
    try:
        return tool(name)
    except ToolUnavailable as exc:
        pytest.skip(f"{name} cannot be installed here: {exc}")


@pytest.fixture(scope="session")
def helm() -> Path:
    return tool_or_skip("helm")


@pytest.fixture(scope="session")
def kubectl() -> Path:
    return tool_or_skip("kubectl")


@pytest.fixture(scope="session")
def default_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *BASE)


@pytest.fixture(scope="session")
def all_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *ALL_ON)
