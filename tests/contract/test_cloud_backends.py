"""GCS and Azure as the archive's store: the settings that choose them (secrets never shown), the
wiring that builds them, and the permission checks of ``config --check --connect`` on each, run
against the emulators (tests/contract/conftest.py) and, where an emulator has no answer to give
(fake-gcs-server serves no testIamPermissions), against a small server that answers as GCS does."""

from __future__ import annotations

import json
import os
import pickle
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from azure.storage.blob import ContainerSasPermissions, generate_container_sas

from processor.commands.config_cmd import describe
from processor.config import load_settings
from processor.devstack import emulators
from processor.devstack.emulators import AZURITE_ACCOUNT, AZURITE_KEY, Emulator
from processor.errors import ConfigError, StorageError
from processor.logs import MASK
from processor.storage.azure import AzureChunkStorage, AzureOptions
from processor.storage.gcs import WORKER_PERMISSIONS, GcsChunkStorage, gcs_storage
from processor.wiring.spark_connection import spark_connection
from processor.wiring.storage import build_storage
from tests.contract.conftest import EMULATOR_BUCKET

_INSTALLING = pytest.mark.timeout(900)  # the first use of an emulator on a machine installs it


def test_the_store_is_chosen_by_the_settings_and_each_needs_its_place() -> None:
    gcs = {"PROCESSOR_STORAGE": "gcs", "PROCESSOR_GCS_BUCKET": "archive"}
    assert isinstance(
        build_storage(load_settings({**gcs, "PROCESSOR_GCS_ANONYMOUS": "true"})), GcsChunkStorage
    )
    if not os.environ.get("GOOGLE_APPLICATION_CREDENTIALS"):  # no credentials here: said with the fix
        with pytest.raises(
            ConfigError, match="GOOGLE_APPLICATION_CREDENTIALS or PROCESSOR_GCS_CREDENTIALS_FILE"
        ):
            build_storage(load_settings(gcs))
    with pytest.raises(ConfigError, match="PROCESSOR_STORAGE=gcs needs PROCESSOR_GCS_BUCKET"):
        load_settings({"PROCESSOR_STORAGE": "gcs"})
    with pytest.raises(ConfigError, match="PROCESSOR_STORAGE=azure needs PROCESSOR_AZURE_CONTAINER"):
        load_settings({"PROCESSOR_STORAGE": "azure"})
    with pytest.raises(ConfigError, match="PROCESSOR_AZURE_ACCOUNT_URL"):
        load_settings({"PROCESSOR_STORAGE": "azure", "PROCESSOR_AZURE_CONTAINER": "archive"})
    with pytest.raises(ConfigError, match="PROCESSOR_STORAGE must be one of s3, gcs, azure"):
        load_settings({"PROCESSOR_STORAGE": "hdfs"})
    with pytest.raises(ConfigError, match="one Azure credential"):
        load_settings(
            {
                "PROCESSOR_STORAGE": "azure",
                "PROCESSOR_AZURE_CONTAINER": "archive",
                "PROCESSOR_AZURE_ACCOUNT_URL": "https://acct.blob.core.windows.net",
                "PROCESSOR_AZURE_ACCOUNT_KEY": "canary-key",
                "PROCESSOR_AZURE_SAS_TOKEN": "canary-sas",
            }
        )


def test_azure_secrets_are_never_shown() -> None:
    env = {
        "PROCESSOR_STORAGE": "azure",
        "PROCESSOR_AZURE_CONTAINER": "archive",
        "PROCESSOR_AZURE_CONNECTION_STRING": "AccountName=a;AccountKey=canary-connection-key;",
    }
    settings = load_settings(env)
    shown = {r["variable"]: r["display"] for r in describe(settings, env)["settings"]}
    assert shown["PROCESSOR_AZURE_CONNECTION_STRING"] == MASK
    assert "canary" not in json.dumps(describe(settings, env)) and "canary" not in repr(settings)
    connection = spark_connection({}, settings)
    assert "canary" not in repr(connection)  # it travels to the executors, never into a log line
    assert ("connection_string", "AccountName=a;AccountKey=canary-connection-key;") in connection.store
    with pytest.raises(ConfigError) as refused:
        build_storage(load_settings({**env, "PROCESSOR_AZURE_CONNECTION_STRING": "canary-not-one"}))
    assert "canary" not in str(refused.value)


@pytest.mark.parametrize("kind", [pytest.param(k, marks=_INSTALLING) for k in ("gcs", "azure")])
def test_the_wiring_and_the_spark_connection_reach_the_emulator(
    kind: str, request: pytest.FixtureRequest
) -> None:
    emulator: Emulator = request.getfixturevalue(f"{kind}_emulator")
    settings = load_settings(emulator.env(EMULATOR_BUCKET))
    worker, probe = build_storage(settings), build_storage(settings, probe=True)
    # as Spark ships it to its Python workers: pickled with the task, the store's settings inside
    reader = pickle.loads(pickle.dumps(spark_connection({}, settings))).storage()
    try:
        worker.create("wired/one", [b"written by the worker's storage"])
        probe.check_bucket()
        assert reader.read("wired/one", 8, 6) == b"by the"
        assert [c.key for c in reader.list("wired/")] == ["wired/one"]
    finally:
        worker.delete("wired/one")
        for s in (worker, probe, reader):
            s.close()


@pytest.mark.timeout(900)
def test_a_sas_without_the_workers_permissions_names_them(azure_emulator: Emulator) -> None:
    """Azurite checks a SAS's permissions: one that may read and list cannot write, and the check
    names what the worker would lack (write, delete)."""
    sas = generate_container_sas(
        AZURITE_ACCOUNT,
        EMULATOR_BUCKET,
        account_key=AZURITE_KEY,
        permission=ContainerSasPermissions(read=True, list=True),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )
    storage = AzureChunkStorage(
        AzureOptions(container=EMULATOR_BUCKET, account_url=azure_emulator.endpoint, sas_token=sas)
    )
    try:
        storage.check_bucket()
        assert storage.missing_permissions() == ["write", "delete"]
        with pytest.raises(StorageError) as refused:
            storage.create("sas/refused", [b"x"])
        assert not refused.value.retriable
    finally:
        storage.close()


class _IamAnswers(BaseHTTPRequestHandler):
    """Answers GCS's bucket GET and testIamPermissions as GCS does, granting ``granted``."""

    granted: tuple[str, ...] = ()

    def do_GET(self) -> None:
        if "/iam/testPermissions" in self.path:
            body = {"kind": "storage#testIamPermissionsResponse", "permissions": list(self.granted)}
        else:
            body = {"kind": "storage#bucket", "name": EMULATOR_BUCKET, "id": EMULATOR_BUCKET}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def iam_server() -> Iterator[tuple[str, type[_IamAnswers]]]:
    handler = type("Answers", (_IamAnswers,), {"granted": ("storage.objects.get", "storage.objects.list")})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()


def test_gcs_names_the_iam_permissions_the_worker_lacks(iam_server: tuple[str, type[_IamAnswers]]) -> None:
    """fake-gcs-server has no IAM: what GCS answers to testIamPermissions is served by a small
    server, and the permissions it does not grant are named."""
    endpoint, _ = iam_server
    storage = gcs_storage(EMULATOR_BUCKET, endpoint, anonymous=True, max_attempts=1)
    try:
        storage.check_bucket()
        assert storage.missing_permissions() == ["storage.objects.create", "storage.objects.delete"]
        assert set(WORKER_PERMISSIONS) >= {"storage.objects.create", "storage.objects.delete"}
    finally:
        storage.close()


@pytest.mark.timeout(900)
def test_gcs_on_the_emulator_says_its_permissions_are_not_checked(
    gcs_emulator: Emulator, caplog: pytest.LogCaptureFixture
) -> None:
    storage = emulators.storage_for(gcs_emulator, EMULATOR_BUCKET)
    try:
        assert storage.missing_permissions() == []
    finally:
        storage.close()
    assert "permissions not checked" in caplog.text


@pytest.mark.timeout(900)
def test_the_emulators_install_as_a_set_up_step() -> None:
    """`python -m processor.devstack.emulators` installs both (once per machine) and says where."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "processor.devstack.emulators"], capture_output=True, text=True, timeout=890
    )
    assert done.returncode == 0, done.stderr
    paths = dict(line.split(": ", 1) for line in done.stdout.splitlines())
    assert set(paths) == {"gcs", "azure"} and all(os.access(p, os.X_OK) for p in paths.values())
