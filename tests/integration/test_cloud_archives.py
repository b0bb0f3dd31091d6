"""An archive on Google Cloud Storage and on Azure Blob Storage (their emulators): a worker offloads
it, and `processor fetch`, `processor verify`, a Kafka client through the gateway and the Spark
source read it back byte for byte; then the commands that rewrite, rebuild, restore and delete an
archive (merge, erase, rebuild-metadata, restore, delete-topic) run on it in one scenario, last.

One module, one emulator per backend (module-scoped, beside the session stack's Kafka broker: no
second broker), a small topic: the contract suite tests each backend's storage operations; this
tests that every reader reaches the archive through them. The fault tests stay on S3, where the
fault proxy and SeaweedFS sit (CONTRIBUTING.md, "Cloud stores in the tests", says why one backend is
enough for them)."""

from __future__ import annotations

import base64
import dataclasses
import functools
import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer
from confluent_kafka import TopicPartition as KafkaTP

from processor.config import load_settings
from processor.devstack import emulators
from processor.devstack.sample_data import SampleRecord, produce_samples
from processor.devstack.servers import free_port
from processor.devstack.stack import StackInfo
from processor.kafka.admin import ensure_topic
from processor.kafka.clients import new_admin
from processor.kafka.partition import TopicPartition
from processor.metadata.model import PartitionDeleteState, RemoteLogSegmentMetadata
from processor.metadata.topic_io import load_remote_state
from processor.segment.object_keys import ObjectKeyFactory
from processor.wiring.gateway_server import GatewayServer
from tests.integration.lifecycle_support import wait_for
from tests.integration.restore_support import committed_target
from tests.integration.worker_process import WorkerProcess, worker_env
from tests.support.cli import run_cli
from tests.support.gateway_thread import gateway_running
from tests.support.metadata_watch import wait_offloaded

# the first use of an emulator on a machine installs it (npm, a Go build: minutes on a loaded machine)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PARTITIONS = 2
COUNT = 1200
PREFIX = "cloud"
BUCKET = "cloud-archive"


@dataclass
class CloudArchive:
    kind: str
    info: StackInfo  # the session stack's Kafka, the emulator's store
    topic: str
    metadata_topic: str
    by_partition: dict[int, list[SampleRecord]]

    @property
    def cli_env(self) -> dict[str, str]:
        return {
            **self.info.env(),
            "PROCESSOR_METADATA_TOPIC": self.metadata_topic,
            "PROCESSOR_S3_PREFIX": PREFIX,
        }


@pytest.fixture(scope="module", params=[emulators.GCS, emulators.AZURE])
def archive(
    request: pytest.FixtureRequest, local_stack: StackInfo, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[CloudArchive]:
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"cloud-{kind}")
    with emulators.running(kind, tmp, BUCKET, free_port()) as emulator:
        info = dataclasses.replace(local_stack, storage=kind, storage_env=emulator.env(BUCKET))
        topic, meta = f"cloud-{kind}", f"__remote_log_metadata_cloud_{kind}"
        ensure_topic(new_admin(info.kafka, "t"), topic, PARTITIONS, 1, {})
        produced = produce_samples(
            info.kafka, topic, COUNT, PARTITIONS, big_every=400, producer_config={"batch.size": 16 * 1024}
        )
        by_partition: dict[int, list[SampleRecord]] = {p: [] for p in range(PARTITIONS)}
        for r in produced:
            by_partition[r.partition].append(r)
        env = worker_env(
            info,
            tmp / "data",
            topic,
            PROCESSOR_METADATA_TOPIC=meta,
            PROCESSOR_SEGMENT_BYTES=str(256 * 1024),
            PROCESSOR_BLOCK_BYTES=str(32 * 1024),
            PROCESSOR_SEGMENT_MS="1000",
            PROCESSOR_BUFFER_BYTES=str(16 * 1024 * 1024),
            PROCESSOR_S3_PREFIX=PREFIX,
        )
        worker = WorkerProcess(env, tmp / "worker.log")
        ends = {TopicPartition(topic, p): len(rs) - 1 for p, rs in by_partition.items()}
        try:
            wait_offloaded(info.kafka, meta, ends, 240, worker.proc)
        finally:
            worker.stop()
        yield CloudArchive(kind, info, topic, meta, by_partition)


def test_the_worker_wrote_segments_to_the_cloud_store(archive: CloudArchive) -> None:
    storage = emulators.storage_for(_emulator_of(archive), BUCKET)
    try:
        keys = [c.key for c in storage.list(f"{PREFIX}/")]
    finally:
        storage.close()
    assert keys and all(k.startswith(f"{PREFIX}/") for k in keys)
    assert any(archive.topic in k for k in keys)


def _emulator_of(archive: CloudArchive) -> emulators.Emulator:
    env = archive.info.storage_env
    if archive.kind == emulators.GCS:
        return emulators.Emulator(emulators.GCS, [], "", env["PROCESSOR_GCS_ENDPOINT_URL"])
    blob = env["PROCESSOR_AZURE_CONNECTION_STRING"].split("BlobEndpoint=")[1].rstrip(";")
    return emulators.Emulator(emulators.AZURE, [], "", blob)


def test_fetch_and_verify_read_it_back(archive: CloudArchive) -> None:
    want = archive.by_partition[1]
    raw = run_cli(
        archive.cli_env, "fetch", "--topic", archive.topic, "--partition", "1", "--offset", "0",
        "--max-records", str(len(want)), "--format", "raw",
    )  # fmt: skip
    assert raw.returncode == 0, raw.stderr
    assert raw.stdout_bytes == b"".join((r.value or b"") + b"\n" for r in want)
    verify = run_cli(archive.cli_env, "verify", "--topic", archive.topic, "--json")
    assert verify.returncode == 0, verify.stdout + verify.stderr
    report = json.loads(verify.stdout)
    assert report["clean"] and report["segments_checked"] > 0


def test_a_kafka_client_reads_it_through_the_gateway(
    archive: CloudArchive, tmp_path: Path, local_stack: StackInfo
) -> None:
    port, web = free_port(), free_port()
    settings = load_settings(
        {
            **archive.cli_env,
            "PROCESSOR_DATA_DIR": str(tmp_path / "gateway-data"),
            "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
            "PROCESSOR_GATEWAY_PORT": str(port),
            "PROCESSOR_GATEWAY_ARCHIVE_READS": "archived",
            "PROCESSOR_GATEWAY_NODE_IDS": local_stack.gateway_node_ids,
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_WEB_PORT": str(web),
        }
    )
    want = archive.by_partition[0]
    with gateway_running(GatewayServer.build(settings)):
        consumer = Consumer(
            {
                "bootstrap.servers": f"127.0.0.1:{port}",
                "group.id": f"cloud-gw-{archive.kind}",
                "fetch.wait.max.ms": 10,
            }
        )
        consumer.assign([KafkaTP(archive.topic, 0, 0)])
        got: list[Any] = []
        deadline = time.monotonic() + 90
        while len(got) < len(want) and time.monotonic() < deadline:
            got += [m for m in consumer.consume(500, 1.0) if m.error() is None]
        consumer.close()
    assert [m.offset() for m in got] == list(range(len(want)))
    assert [(m.key(), m.value()) for m in got] == [(w.key, w.value) for w in want]


def test_the_spark_source_reads_it(archive: CloudArchive, tmp_path: Path) -> None:
    """What a Spark task runs (the source's plan and read of each piece), in this process, with the
    store chosen by the settings (PROCESSOR_STORAGE and the cloud's variables)."""
    from pyspark.sql.datasource import InputPartition

    from processor.spark.tiered_records import TieredRecordsReader
    from processor.spark_sources.entry import record_options

    options = {
        "kafka.bootstrap.servers": archive.info.bootstrap_servers,
        "metadata.topic": archive.metadata_topic,
        "metadata.cacheDir": str(tmp_path / "spark-meta"),
        "s3.prefix": PREFIX,
        "subscribe": archive.topic,
    }
    reader = TieredRecordsReader(record_options(options, environ=archive.info.storage_env))
    rows: dict[int, list[tuple[int, bytes, bytes]]] = {p: [] for p in range(PARTITIONS)}
    for piece in reader.plan():
        for batch in reader.read(InputPartition(piece)):
            for row in batch.to_pylist():
                rows[row["partition"]].append((row["offset"], row["key"], row["value"]))
    for p, want in archive.by_partition.items():
        assert sorted(rows[p]) == [(i, w.key, w.value) for i, w in enumerate(want)]


@pytest.mark.parametrize("kind", [emulators.GCS, emulators.AZURE])
def test_dev_up_with_a_cloud_store_starts_and_stops_its_emulator(kind: str, tmp_path: Path) -> None:
    """`processor dev up --storage gcs|azure`: the emulator in place of SeaweedFS, its settings in the
    exports, `config --check --connect` passing on them, `dev down` stopping it by PID."""
    d = str(tmp_path / "stack")
    up = run_cli({}, "dev", "up", "--dir", d, "--json", "--broker", "tansu", "--storage", kind)
    assert up.returncode == 0, up.stderr
    info = json.loads(up.stdout)
    try:
        pids = {name: p["pid"] for name, p in info["processes"].items()}
        assert set(pids) == {"tansu", kind} and info["storage"] == kind
        assert info["env"]["PROCESSOR_STORAGE"] == kind and "PROCESSOR_S3_ENDPOINT_URL" not in info["env"]
        env = {**info["env"], "PROCESSOR_TOPICS": "t", "PROCESSOR_WEB_HOST": "127.0.0.1"}
        check = run_cli(env, "config", "--check", "--connect")
        assert check.returncode == 0, check.stdout + check.stderr
        assert f"{kind}: ok (" in check.stdout
    finally:
        down = run_cli({}, "dev", "down", "--dir", d)
    assert down.returncode == 0 and kind in down.stdout
    for name, pid in pids.items():
        wait_for(f"{name} (pid {pid}) stopped", functools.partial(_gone, pid), 30)


def _gone(pid: int) -> bool:
    """Whether the process has exited (a zombie waiting for its parent to reap it counts)."""
    try:
        return "State:\tZ" in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return True


ERASED_KEY = b"key-5"  # about one record in a hundred


def _served(archive: CloudArchive, meta: str) -> list[RemoteLogSegmentMetadata]:
    state, _ = load_remote_state(archive.info.kafka, meta)
    return [
        s for p in range(PARTITIONS) for s in state.partition(TopicPartition(archive.topic, p)).finished()
    ]


def _fingerprint(segments: list[RemoteLogSegmentMetadata]) -> list[tuple[Any, ...]]:
    """Which bytes a segment serves (a rebuild publishes under its own writer id and epoch)."""
    return sorted(
        (str(s.segment_id.id), s.segment_id.partition, s.start_offset, s.end_offset, s.data_object_key,
         s.index_object_key, s.index_crc32, s.segment_size_in_bytes, s.record_count)
        for s in segments
    )  # fmt: skip


def _fetched(archive: CloudArchive, partition: int, count: int) -> list[tuple[Any, ...]]:
    done = run_cli(
        archive.cli_env, "fetch", "--topic", archive.topic, "--partition", str(partition), "--offset", "0",
        "--max-records", str(count), "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    return [(r["offset"], _b64(r["key"]), _b64(r["value"])) for r in rows]


def _b64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)


def test_merge_erase_rebuild_restore_and_delete_topic_on_it(archive: CloudArchive) -> None:
    """Every command that rewrites, rebuilds, restores or deletes an archive, on each cloud store,
    in the order an operator might run them: merge (fewer segments, every record byte-exact), erase
    (one key's records gone, the rest byte-exact), rebuild-metadata from the store alone (the same
    segments served), restore into a new topic (what is left, byte-exact), delete-topic (nothing of
    the topic left in the store). Runs last in the module: it leaves the archive erased and deleted."""
    env = {**archive.cli_env, "PROCESSOR_ERASURE_SECRET": "an erasure secret for the cloud test"}
    want = {p: [(i, r.key, r.value) for i, r in enumerate(rs)] for p, rs in archive.by_partition.items()}
    before = _served(archive, archive.metadata_topic)

    merging = {
        **env,
        "PROCESSOR_MERGE_TARGET_BYTES": str(4 * 1024 * 1024),
        "PROCESSOR_MERGE_SMALL_BYTES": str(1024 * 1024),
        "PROCESSOR_MERGE_MIN_AGE_MS": "0",
    }
    merged = run_cli(merging, "merge", "--topic", archive.topic, "--json")
    assert merged.returncode == 0, merged.stdout + merged.stderr
    after_merge = _served(archive, archive.metadata_topic)
    assert len(after_merge) < len(before)
    for p in range(PARTITIONS):
        assert _fetched(archive, p, len(want[p])) == want[p]

    erased = run_cli(env, "erase", "--topic", archive.topic, "--key", ERASED_KEY.decode(), "--json")
    assert erased.returncode == 0, erased.stdout + erased.stderr
    erased_count = sum(1 for rs in archive.by_partition.values() for r in rs if r.key == ERASED_KEY)
    assert json.loads(erased.stdout)["records_removed"] == erased_count > 0
    # what is left is read back byte-exact by the restore below

    rebuilt_meta = f"{archive.metadata_topic}_rebuilt"
    rebuilt = run_cli(env, "rebuild-metadata", "--to-topic", rebuilt_meta, "--json")
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    assert _fingerprint(_served(archive, rebuilt_meta)) == _fingerprint(
        _served(archive, archive.metadata_topic)
    )

    target = f"{archive.topic}-restored"
    restored = run_cli(env, "restore", "--topic", archive.topic, "--to-topic", target, "--json")
    assert restored.returncode == 0, restored.stdout + restored.stderr
    for p, rs in archive.by_partition.items():
        records, aborted = committed_target(archive.info.kafka, TopicPartition(target, p))
        assert aborted == 0
        assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == [
            (r.key, r.value, r.headers, r.timestamp) for r in rs if r.key != ERASED_KEY
        ]

    deleted = run_cli(env, "delete-topic", "--topic", archive.topic, "--include-live")
    assert deleted.returncode == 0, deleted.stdout + deleted.stderr
    keys = ObjectKeyFactory(PREFIX)
    storage = emulators.storage_for(_emulator_of(archive), BUCKET)
    try:
        left = [c.key for c in storage.list(keys.topic_listing_prefix(archive.topic))]
    finally:
        storage.close()
    # the restore's offset maps stay (restore-groups reads them; the restores/ folder is no partition's)
    assert [k for k in left if "/restores/" not in k] == []
    state, _ = load_remote_state(archive.info.kafka, archive.metadata_topic)
    for p in range(PARTITIONS):
        part = state.partition(TopicPartition(archive.topic, p))
        assert part.delete_state is PartitionDeleteState.DELETE_PARTITION_FINISHED and part.finished() == []
