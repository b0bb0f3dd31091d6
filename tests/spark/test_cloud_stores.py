"""``spark.read.format("tiered_records")`` in the tests' SparkSession, on an archive in Google Cloud
Storage and one in Azure Blob Storage (their emulators: fake-gcs-server, Azurite).

The archive is the Spark tests' own (tests/spark/conftest.py), its objects copied from S3 into the
emulator as they are (same keys, same bytes) under the same metadata topic: what Spark reads is what
it reads on S3, only the store differs. That the worker writes an archive to each cloud store and
every other reader reads it back is tests/integration/test_cloud_archives.py's part.

Where the store is travels in the read's options (``storage``, ``gcs.bucket``, ``gcs.endpoint``,
``azure.container``, ``azure.accountUrl``); its credentials never do: they are each node's settings.
The Python workers that plan and read run with the environment the session gave them when it
started (the driver process's environment then, and ``spark.executorEnv.*``); a variable the driver
process sets later never reaches them. So the session fixture gives its workers the emulators' fixed,
public credentials (Azurite's well-known account key, anonymous GCS access) as
``spark.executorEnv.*``; reads from S3 ignore them.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from processor.devstack import emulators
from processor.devstack.servers import free_port
from tests.integration.lifecycle_support import storage_for
from tests.spark.conftest import (
    PARTITIONS,
    PREFIX,
    TOPIC,
    Archive,
    as_tuple,
    collect_offsets,
    consume_all,
    spark_options,
)

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(900)]

BUCKET = "spark-cloud"


def copy_archive(archive: Archive, emulator: emulators.Emulator) -> int:
    """Every object of the archive's prefix, from S3 into the emulator; how many."""
    source = storage_for(archive.info)
    target = emulators.storage_for(emulator, BUCKET)
    try:
        keys = [info.key for info in source.list(f"{PREFIX}/")]
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda key: target.create(key, [source.read_all(key)]), keys))
    finally:
        source.close()
        target.close()
    return len(keys)


def store_options(emulator: emulators.Emulator) -> dict[str, str]:
    """The read's options that put its archive on the emulator (no credentials)."""
    if emulator.kind == emulators.GCS:
        return {"storage": "gcs", "gcs.bucket": BUCKET, "gcs.endpoint": emulator.endpoint}
    return {"storage": "azure", "azure.container": BUCKET, "azure.accountUrl": emulator.endpoint}


@pytest.mark.parametrize("kind", [emulators.GCS, emulators.AZURE])
def test_a_spark_read_of_an_archive_on_a_cloud_store_is_byte_exact(
    spark: Any, archive: Archive, kind: str, tmp_path: Path
) -> None:
    ends = archive.archive_ends()  # before the copy: every segment below is in it
    with emulators.running(kind, tmp_path, BUCKET, free_port()) as emulator:
        assert copy_archive(archive, emulator) > 0
        # the S3 bucket's options left out: the prefix (inside the store) and the rest stay
        options = {
            k: v for k, v in spark_options(archive).items() if not k.startswith("s3.") or k == "s3.prefix"
        }
        rows = (
            spark.read.format("tiered_records")
            .options(
                **options,
                **store_options(emulator),
                endingOffsets=json.dumps({TOPIC: {str(p): end for p, end in ends.items()}}),
                includeHeaders="true",
            )
            .load()
            .collect()
        )
    assert collect_offsets(rows) == [(p, o) for p in range(PARTITIONS) for o in range(ends[p])]
    plain = consume_all(archive.info.bootstrap_servers)
    for r in rows:
        assert as_tuple(r) == plain[(r["partition"], r["offset"])], (r["partition"], r["offset"])
