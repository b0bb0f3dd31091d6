"""``spark.read.format("tiered_records")`` in the tests' SparkSession, on an archive in Google Cloud
Storage and one in Azure Blob Storage (their emulators: fake-gcs-server, Azurite).

The archive is the Spark tests' own (tests/spark/conftest.py), its objects copied from S3 into the
emulator as they are (same keys, same bytes) under the same metadata topic: what Spark reads is what
it reads on S3, only the store differs. That the worker writes an archive to each cloud store and
every other reader reads it back is tests/integration/test_cloud_archives.py's part. The audit
(processor/spark/audit) runs on Azurite, over a small archive the real segment copier writes there
with problems planted in its objects.

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
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from processor.devstack import emulators
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.leader.segment_copier import SegmentCopier
from processor.metadata.topic_io import MetadataPublisher, ensure_metadata_topic
from processor.segment.block_header import BLOCK_HEADER_LEN
from processor.segment.object_keys import ObjectKeyFactory
from processor.spark.audit.run import AuditOptions, run_audit
from processor.spark.connection import Connection
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
from tests.spark.test_audit import build

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


@pytest.fixture(scope="module", params=[emulators.GCS, emulators.AZURE])
def emulator(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[emulators.Emulator]:
    kind = request.param
    with emulators.running(kind, tmp_path_factory.mktemp(f"spark-{kind}"), BUCKET, free_port()) as running:
        yield running


def test_a_spark_read_of_an_archive_on_a_cloud_store_is_byte_exact(
    spark: Any, archive: Archive, emulator: emulators.Emulator
) -> None:
    ends = archive.archive_ends()  # before the copy: every segment below is in it
    assert copy_archive(archive, emulator) > 0
    # the S3 bucket's options left out: the prefix (inside the store) and the rest stay
    options = {k: v for k, v in spark_options(archive).items() if not k.startswith("s3.") or k == "s3.prefix"}
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


def cloud_connection(info: StackInfo, emulator: emulators.Emulator, meta: str, prefix: str) -> Connection:
    """The audit's connection to an archive on the emulator (its credentials travel in the tasks)."""
    store: tuple[tuple[str, str], ...]
    if emulator.kind == emulators.GCS:
        store = (("bucket", BUCKET), ("endpoint_url", emulator.endpoint), ("anonymous", "true"))
    else:
        connection_string = emulators.azurite_connection_string(emulator.endpoint)
        store = (("container", BUCKET), ("connection_string", connection_string))
    return Connection(info.kafka, meta, None, "", prefix, None, storage_kind=emulator.kind, store=store)


# One store is enough for the audit: it reaches the store through the same Connection.storage() as
# the read above, on both; a second pass would add a streaming query's cost for no other path.
@pytest.mark.parametrize("emulator", [emulators.AZURE], indirect=True)
def test_the_audit_finds_what_is_wrong_in_an_archive_on_a_cloud_store(
    spark: Any, local_stack: StackInfo, emulator: emulators.Emulator, tmp_path: Path
) -> None:
    """Four segments the real copier wrote to the emulator; one loses its data object, one gets a
    flipped byte, and an object no segment references appears: the audit names exactly those."""
    info = local_stack
    tag = uuid.uuid4().hex[:6]
    src, meta, prefix = f"audit-cloud-{tag}", f"__meta_audit_cloud_{tag}", f"audit-cloud-{tag}"
    ensure_topic(new_admin(info.bootstrap_servers, "t"), src, 2, 1, {})
    publisher = MetadataPublisher(
        info.bootstrap_servers, meta, ensure_metadata_topic(info.bootstrap_servers, meta, 2, 1)
    )
    storage = emulators.storage_for(emulator, BUCKET)
    try:
        copier = SegmentCopier(storage, publisher, ObjectKeyFactory(prefix), "audit-cloud-test")
        segs = [
            copier.copy(TopicPartition(src, p), build(p, s, s + 49), 0) for p in range(2) for s in (0, 50)
        ]
        gone, bad = segs[1], segs[2]
        storage.delete(gone.data_object_key)
        data = bytearray(storage.read_all(bad.data_object_key))
        data[BLOCK_HEADER_LEN + 20] ^= 0xFF
        storage.delete(bad.data_object_key)
        storage.create(bad.data_object_key, [bytes(data)])
        stray = f"{prefix}/{src}/0/00000000000000099999-stray.log"
        storage.create(stray, [b"stray"])
        options = AuditOptions(
            connection=cloud_connection(info, emulator, meta, prefix),
            checkpoint=tmp_path / "checkpoint",
            output=tmp_path / "out",
            once=True,
            verify_objects=True,
            full_crc=True,
        )
        run = run_audit(spark, options)
    finally:
        publisher.close()
        storage.close()
    by_kind = {f.kind: f for f in run.findings}
    assert sorted(by_kind) == ["crc_mismatch", "missing_object", "orphan_object"], run.findings
    assert by_kind["missing_object"].segment_id == str(gone.segment_id.id)
    assert by_kind["crc_mismatch"].segment_id == str(bad.segment_id.id)
    assert by_kind["orphan_object"].object_key == stray
    assert run.stats.segments == 4
