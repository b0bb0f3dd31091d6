"""Snapshots of the folded metadata on the running stack (Apache Kafka and SeaweedFS), over the
session's archive: ``processor snapshot`` writes them; the CLI, a follower and a gateway whose caches
are new start from them and serve exactly what a reader of the whole topic serves; a corrupt
snapshot, one the topic no longer agrees with and none at all each leave the reader on an older one
or on the topic."""

from __future__ import annotations

import base64
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from processor import metrics
from processor.config import Settings, load_settings
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshot_format import decode_snapshot, encode_snapshot
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for
from processor.segment.object_keys import SNAPSHOT_FOLDER
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.follower import build_follower
from processor.wiring.follower_server import FollowerServer
from processor.wiring.gateway_server import GatewayServer
from processor.wiring.storage import build_storage
from tests.support.archive import META, PARTITIONS, PREFIX, TOPIC, OffloadedArchive
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration

TPS = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]


def _settings(archive: OffloadedArchive, data_dir: Path, **extra: str) -> Settings:
    return load_settings(
        {
            **archive.cli_env,
            "PROCESSOR_S3_REGION": "us-east-1",
            "PROCESSOR_DATA_DIR": str(data_dir),
            "PROCESSOR_WEB_HOST": "127.0.0.1",
            "PROCESSOR_GATEWAY_HOST": "127.0.0.1",
            **extra,
        }
    )


@pytest.fixture
def storage(offloaded_archive: OffloadedArchive, tmp_path: Path) -> Iterator[ChunkStorage]:
    """The archive's bucket; every snapshot is deleted before and after (the archive is shared)."""
    store = build_storage(_settings(offloaded_archive, tmp_path))

    def clear() -> None:
        for info in list(store.list(f"{PREFIX}/{SNAPSHOT_FOLDER}/")):
            store.delete(info.key)

    clear()
    yield store
    clear()
    store.close()


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _loaded() -> float:
    return metrics.SNAPSHOTS_LOADED._value.get()  # type: ignore[no-any-return]


def _refused(reason: str) -> float:
    return metrics.SNAPSHOTS_REFUSED.labels(reason)._value.get()  # type: ignore[no-any-return]


def _segments(env: dict[str, str]) -> list[dict[str, object]]:
    result = run_cli(env, "segments", "--topic", TOPIC, "--json")
    assert result.returncode == 0, result.stderr
    return sorted((json.loads(line) for line in result.stdout.splitlines()), key=lambda r: str(r["id"]))


def _state(cache: MetadataCache) -> dict[TopicPartition, object]:
    return {tp: cache.remote_state(tp) for tp in TPS}


def _topic_only(archive: OffloadedArchive, tmp_path: Path) -> dict[TopicPartition, object]:
    """What a reader of the whole topic holds (no snapshot loaded: no storage given)."""
    follower = build_follower(_settings(archive, tmp_path), 4, cache_dir=tmp_path / "topic-only")
    try:
        follower.materializer.catch_up()
        return _state(follower.cache)
    finally:
        follower.close()


def _gateway_state(archive: OffloadedArchive, data_dir: Path) -> dict[TopicPartition, object]:
    """What a gateway with a new data directory holds once it has read the metadata (as it does
    before it listens)."""
    gateway = GatewayServer.build(_settings(archive, data_dir))
    try:
        gateway.follower.materializer.catch_up()
        return _state(gateway.follower.cache)
    finally:
        gateway.close()


def _snapshot_keys(storage: ChunkStorage) -> list[str]:
    return sorted(info.key for info in storage.list(f"{PREFIX}/{SNAPSHOT_FOLDER}/"))


def _rewrite(storage: ChunkStorage, key: str, name: str, **header_changes: int) -> None:
    """Write beside ``key`` a copy of that snapshot with its header changed (its CRCs right): a
    snapshot that passes every format check and names what the topic no longer holds."""
    header, payload = decode_snapshot(storage.read_all(key))
    changed = encode_snapshot(dataclasses.replace(header, **header_changes), payload)  # type: ignore[arg-type]
    storage.create(key.rsplit("/", 1)[0] + "/" + name, [changed])


def test_readers_start_from_snapshots_and_serve_what_the_topic_serves(
    offloaded_archive: OffloadedArchive, storage: ChunkStorage, tmp_path: Path
) -> None:
    env = offloaded_archive.cli_env
    whole_topic = _topic_only(offloaded_archive, tmp_path)
    assert all(whole_topic[tp].finished() for tp in TPS)  # type: ignore[attr-defined]

    # none at all: the CLI reads the topic, as before
    loaded = _loaded()
    listed = _segments(env)
    assert _loaded() == loaded

    written = run_cli(env, "snapshot", "--json")
    assert written.returncode == 0, written.stderr
    rows = [json.loads(line) for line in written.stdout.splitlines()]
    holding = {metadata_partition_for(tp, 4) for tp in TPS}
    assert {r["partition"] for r in rows if "key" in r} >= holding
    assert all(r["entries"] > 0 and r["size"] > 0 for r in rows if r.get("partition") in holding)
    keys = _snapshot_keys(storage)
    assert len(keys) == len([r for r in rows if "key" in r])

    # the CLI: a new throwaway cache per call, from the snapshots
    assert _segments(env) == listed
    assert _loaded() == loaded + len(holding)
    fetched = run_cli(
        env, "fetch", "--topic", TOPIC, "--partition", "2", "--offset", "5", "--max-records", "40", "--json"
    )
    assert fetched.returncode == 0, fetched.stderr
    want = offloaded_archive.by_partition[2][5:45]
    got = [json.loads(line) for line in fetched.stdout.splitlines()]
    assert [r["offset"] for r in got] == list(range(5, 45))
    assert [(r["key"], r["value"]) for r in got] == [(_b64(r.key), _b64(r.value)) for r in want]

    # a follower and a gateway whose data directories are new
    follower = FollowerServer.build(_settings(offloaded_archive, tmp_path / "follower"))
    try:
        follower.follower.materializer.catch_up()
        assert _state(follower.follower.cache) == whole_topic
    finally:
        follower.follower.close()
        follower.probe_storage.close()
        follower.storage.close()
    assert _gateway_state(offloaded_archive, tmp_path / "gateway") == whole_topic
    # the fetch read one metadata partition; the follower and the gateway every one with a snapshot
    assert _loaded() == loaded + len(holding) + 1 + 2 * len(keys)


def test_a_corrupt_or_diverged_snapshot_is_refused_and_an_older_one_or_the_topic_read(
    offloaded_archive: OffloadedArchive, storage: ChunkStorage, tmp_path: Path
) -> None:
    env = offloaded_archive.cli_env
    whole_topic = _topic_only(offloaded_archive, tmp_path)
    assert run_cli(env, "snapshot").returncode == 0
    good = _snapshot_keys(storage)
    for key in good:
        name = key.rsplit("/", 1)[-1]
        offset, written, _nonce = name.removesuffix(".snap").split("-")
        later = int(written) + 1
        # the newest of each partition: one that names offsets past the topic's end (a topic that
        # lost its tail since), one whose last record is not the topic's (written again since), and
        # one with a flipped byte; each is tried before the good one, and refused
        _rewrite(
            storage,
            key,
            f"{int(offset) + 900:020d}-{later:013d}-truncated.snap",
            next_offset=int(offset) + 900,
            last_offset=int(offset) + 899,
        )
        _rewrite(
            storage,
            key,
            f"{int(offset):020d}-{later:013d}-zdiverged.snap",
            last_record_crc=12345,
        )
        data = bytearray(storage.read_all(key))
        data[len(data) // 2] ^= 0x01
        storage.create(
            key.rsplit("/", 1)[0] + f"/{int(offset):020d}-{later:013d}-corrupt.snap", [bytes(data)]
        )
    before = {r: _refused(r) for r in ("truncated", "diverged", "corrupt")}
    loaded = _loaded()
    cache_dir = tmp_path / "gateway"
    assert _gateway_state(offloaded_archive, cache_dir) == whole_topic
    n = len(good)
    assert _loaded() == loaded + n
    for reason in ("truncated", "diverged", "corrupt"):
        assert _refused(reason) >= before[reason] + n, reason

    # nothing valid left: the topic from its start, the same state
    for key in good:
        storage.delete(key)
    loaded = _loaded()
    assert _gateway_state(offloaded_archive, tmp_path / "gateway-2") == whole_topic
    assert _loaded() == loaded


def test_snapshot_loading_can_be_turned_off(
    offloaded_archive: OffloadedArchive, storage: ChunkStorage, tmp_path: Path
) -> None:
    assert run_cli(offloaded_archive.cli_env, "snapshot").returncode == 0
    loaded = _loaded()
    env = {**offloaded_archive.cli_env, "PROCESSOR_SNAPSHOT_LOAD": "false"}
    assert _segments(env) == _segments(offloaded_archive.cli_env)
    assert _loaded() == loaded + len({metadata_partition_for(tp, 4) for tp in TPS})  # the second call only


def test_spark_planning_starts_from_snapshots(
    offloaded_archive: OffloadedArchive, storage: ChunkStorage, tmp_path: Path
) -> None:
    """The metadata view Spark's sources and the audit plan from (no Spark session needed)."""
    from processor.kafka.security import KafkaConnection
    from processor.spark.connection import Connection
    from processor.spark.metadata_view import MaterializedMetadata

    info = offloaded_archive.info
    conn = Connection(
        KafkaConnection(info.bootstrap_servers), META, info.s3_endpoint_url, info.bucket, PREFIX, "us-east-1"
    )
    wanted = lambda tp: tp.topic == TOPIC  # noqa: E731
    from_topic = MaterializedMetadata(conn, tmp_path / "from-topic").read(wanted)
    assert run_cli(offloaded_archive.cli_env, "snapshot").returncode == 0
    loaded = _loaded()
    from_snapshots = MaterializedMetadata(conn, tmp_path / "from-snapshots").read(wanted)
    assert _loaded() == loaded + len(_snapshot_keys(storage))
    assert from_snapshots == from_topic and set(from_topic) == set(TPS)
