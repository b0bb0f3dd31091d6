"""One offloaded archive for the whole session, shared by the read-side tests (remote reads, the CLI's
reads and verify, fetch formats, the worker's HTTP API).

A real worker (a child process) offloads COUNT sample records of every shape (null and empty keys
and values, headers, 1 MiB values) from TOPIC's partitions into many small segments, then keeps
running: its HTTP API serves the archive and its metrics report the copy lag. Tests that damage the
bucket (a flipped byte, a deleted index, a stray object) do it inside :func:`objects_restored`, so the
archive is whole again for the next test whatever the order.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3

from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.metadata_watch import wait_offloaded

TOPIC = "archive"
PARTITIONS = 3
COUNT = 9000
META = "__remote_log_metadata_archive"
PREFIX = "archive"


@dataclass
class OffloadedArchive:
    info: StackInfo
    env: dict[str, str]  # the worker's environment (its web port included)
    by_partition: dict[int, list[SampleRecord]]  # what was produced, by partition, in offset order
    worker: WorkerProcess
    tmp: Path

    @property
    def cli_env(self) -> dict[str, str]:
        """What a ``processor`` command needs to read the archive."""
        return {**self.info.env(), "PROCESSOR_METADATA_TOPIC": META, "PROCESSOR_S3_PREFIX": PREFIX}

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.env['PROCESSOR_WEB_PORT']}"

    def ends(self) -> dict[TopicPartition, int]:
        return {TopicPartition(TOPIC, p): len(rs) - 1 for p, rs in self.by_partition.items()}


def offload_archive(info: StackInfo, tmp: Path) -> OffloadedArchive:
    """Produce the records and run the worker until every one is in a finished segment."""
    ensure_topic(new_admin(info.bootstrap_servers, "t"), TOPIC, PARTITIONS, 1, {})
    produced = produce_samples(
        info.bootstrap_servers,
        TOPIC,
        COUNT,
        PARTITIONS,
        big_every=3000,
        producer_config={"batch.size": 16 * 1024},  # many batches: segments end at batch boundaries
    )
    env = worker_env(
        info,
        tmp / "data",
        TOPIC,
        PROCESSOR_METADATA_TOPIC=META,
        PROCESSOR_SEGMENT_BYTES=str(192 * 1024),  # several segments of whole batches per partition
        PROCESSOR_BLOCK_BYTES=str(16 * 1024),
        PROCESSOR_SEGMENT_MS="1000",
        PROCESSOR_BUFFER_BYTES=str(16 * 1024 * 1024),
        PROCESSOR_S3_PREFIX=PREFIX,
    )
    by_partition: dict[int, list[SampleRecord]] = {p: [] for p in range(PARTITIONS)}
    for r in produced:
        by_partition[r.partition].append(r)
    worker = WorkerProcess(env, tmp / "worker.log")
    archive = OffloadedArchive(info, env, by_partition, worker, tmp)
    try:
        wait_offloaded(info.bootstrap_servers, META, archive.ends(), 180, worker.proc)
    except BaseException:
        worker.stop()
        raise
    return archive


def s3_client(info: StackInfo) -> Any:
    return boto3.client("s3", endpoint_url=info.s3_endpoint_url, region_name="us-east-1")


@contextmanager
def objects_restored(info: StackInfo, *keys: str) -> Iterator[Any]:
    """Yield an S3 client; afterwards each of ``keys`` is as it was before (its bytes put back, or
    deleted if it did not exist)."""
    s3 = s3_client(info)
    saved: dict[str, bytes | None] = {}
    for key in keys:
        try:
            saved[key] = s3.get_object(Bucket=info.bucket, Key=key)["Body"].read()
        except s3.exceptions.NoSuchKey:
            saved[key] = None
    try:
        yield s3
    finally:
        for key, body in saved.items():
            if body is None:
                s3.delete_object(Bucket=info.bucket, Key=key)
            else:
                s3.put_object(Bucket=info.bucket, Key=key, Body=body)
