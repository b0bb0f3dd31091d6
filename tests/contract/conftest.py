"""The cloud emulators the contract suite runs GCS and Azure against: each started once per test
session (one pytest-xdist worker runs the contract module, so once per suite), stopped by PID."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from processor.devstack import emulators
from processor.devstack.emulators import Emulator
from processor.devstack.servers import free_port

EMULATOR_BUCKET = "contract"


def _emulator(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    root = tmp_path_factory.mktemp(f"{kind}-emulator")
    with emulators.running(kind, root, EMULATOR_BUCKET, free_port()) as emulator:
        yield emulator


@pytest.fixture(scope="session")
def gcs_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """fake-gcs-server, built from its Go module on first use."""
    yield from _emulator(emulators.GCS, tmp_path_factory)


@pytest.fixture(scope="session")
def azure_emulator(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Emulator]:
    """Azurite's blob service, installed from npm on first use."""
    yield from _emulator(emulators.AZURE, tmp_path_factory)
