"""The readers that folded the whole metadata topic in memory start from snapshots too (the running
stack, the session's archive): a worker's remote state of partitions it starts to lead, and
rebuild-metadata's check of what it published. Each serves exactly what the fold of the whole
topic serves, with snapshots and without."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from processor import metrics
from processor.commands.rebuild_metadata import rebuild
from processor.config import Settings, load_settings
from processor.kafka.partition import TopicPartition
from processor.metadata.codec import metadata_partition_for
from processor.metadata.topic_io import load_remote_state
from processor.segment.object_keys import SNAPSHOT_FOLDER
from processor.storage.chunk_storage import ChunkStorage
from processor.wiring.read_side import remote_states
from processor.wiring.resume import remote_state_loader
from processor.wiring.storage import build_storage
from tests.support.archive import META, PARTITIONS, PREFIX, TOPIC, OffloadedArchive
from tests.support.cli import run_cli

pytestmark = pytest.mark.integration

TPS = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
META_PARTITIONS = 4


def _settings(archive: OffloadedArchive, data_dir: Path, **extra: str) -> Settings:
    return load_settings(
        {**archive.cli_env, "PROCESSOR_S3_REGION": "us-east-1", "PROCESSOR_DATA_DIR": str(data_dir), **extra}
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


def _loaded() -> float:
    return metrics.SNAPSHOTS_LOADED._value.get()  # type: ignore[no-any-return]


def test_a_worker_loads_the_remote_state_of_new_partitions_from_snapshots(
    offloaded_archive: OffloadedArchive, storage: ChunkStorage, tmp_path: Path
) -> None:
    settings = _settings(offloaded_archive, tmp_path)
    parts = sorted({metadata_partition_for(tp, META_PARTITIONS) for tp in TPS})
    folded, _rejected = load_remote_state(settings.kafka, META, parts, set(TPS))
    whole_topic = {tp: folded.partition(tp) for tp in TPS}
    assert all(whole_topic[tp].finished() for tp in TPS)

    loaded = _loaded()  # none at all: the topic alone
    assert remote_states(settings, META_PARTITIONS, TPS, storage) == whole_topic
    assert _loaded() == loaded

    written = run_cli(offloaded_archive.cli_env, "snapshot", "--json")
    assert written.returncode == 0, written.stderr
    loader = remote_state_loader(settings, META_PARTITIONS, storage)  # the worker's, with its bucket
    assert loader(TPS) == whole_topic
    assert _loaded() == loaded + len(parts)
    assert loader(TPS[:1]) == {TPS[0]: whole_topic[TPS[0]]}  # one partition: its metadata partition only
    assert _loaded() == loaded + len(parts) + 1


def test_rebuild_checks_what_it_published_from_snapshots_of_that_topic(
    offloaded_archive: OffloadedArchive, storage: ChunkStorage, tmp_path: Path
) -> None:
    settings = _settings(offloaded_archive, tmp_path)
    target = f"__rebuilt_{tmp_path.name[-12:].replace('[', '_').replace(']', '_')}"
    first = rebuild(settings, target, dry_run=False)
    served = {tp: s.segments for tp, s in first.partitions.items()}
    assert first.mismatches == [] and all(served[tp] for tp in TPS), first.to_json()
    # snapshots of the rebuilt topic, then a second rebuild into it: the check folds from them
    written = run_cli({**offloaded_archive.cli_env, "PROCESSOR_METADATA_TOPIC": target}, "snapshot", "--json")
    assert written.returncode == 0, written.stderr
    loaded = _loaded()
    again = rebuild(settings, target, dry_run=False)
    assert again.mismatches == [], again.mismatches
    assert {tp: s.segments for tp, s in again.partitions.items()} == served
    assert _loaded() > loaded
    assert all(again.claims[tp] > first.claims[tp] for tp in TPS)
