"""The archive a restore's progress records name (a rerun must read the same one): the store's own
bucket or container, on every backend, never a credential."""

from __future__ import annotations

import pytest

from processor.commands.restore import archive_store
from processor.config import load_settings
from processor.devstack import emulators

BASE = {"PROCESSOR_BOOTSTRAP_SERVERS": "127.0.0.1:9092", "PROCESSOR_S3_BUCKET": "s3-archive"}


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "s3-archive"),  # as progress records have always named it
        (
            {
                "PROCESSOR_STORAGE": "gcs",
                "PROCESSOR_GCS_BUCKET": "gcs-archive",
                "PROCESSOR_GCS_ANONYMOUS": "true",
            },
            "gs://gcs-archive",
        ),
        (
            {
                "PROCESSOR_STORAGE": "azure",
                "PROCESSOR_AZURE_CONTAINER": "blob-archive",
                "PROCESSOR_AZURE_CONNECTION_STRING": emulators.azurite_connection_string(
                    "http://127.0.0.1:1/a"
                ),
            },
            "azure://blob-archive",
        ),
    ],
    ids=["s3", "gcs", "azure"],
)
def test_the_restore_names_the_archive_of_the_configured_store(env: dict[str, str], named: str) -> None:
    settings = load_settings({**BASE, **env})
    assert archive_store(settings) == named
    assert emulators.AZURITE_KEY not in archive_store(settings)
