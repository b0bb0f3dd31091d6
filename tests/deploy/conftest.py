"""Fixtures of the deploy tests: helm (installed on first use), renders shared by several tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.deploy.chart import ALL_ON, BASE, render
from tests.deploy.k8s_tools import ToolUnavailable, tool


@pytest.fixture(scope="session")
def helm() -> Path:
    try:
        return tool("helm")
    except ToolUnavailable as exc:
        pytest.skip(f"helm cannot be installed here: {exc}")


@pytest.fixture(scope="session")
def default_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *BASE)


@pytest.fixture(scope="session")
def all_docs(helm: Path) -> list[dict[str, Any]]:
    return render(helm, *ALL_ON)
