"""The ownership model with snapshots: a follower that starts from the newest valid snapshot of the
metadata partition and folds the topic's tail serves exactly what the live fold, a fresh fold of the
compacted topic and the RocksDB follower serve (its served segments, remote log start and current
claim), at every step.

It is the ownership model of ``test_ownership_model.py`` (owners copying, retention, forged and
hostile records, zombies, compaction at any point the cleaner may reach, a metadata partition that
loses its tail, the metadata topic lost and rebuilt, merges and erasures) with three more rules:
a snapshot is taken from the model's follower cache (the real writer, into a real bucket folder),
a new follower starts from the newest one the topic agrees with (the real loader: a snapshot from
before a lost tail, of the topic before it was re-created, or whose last record was compacted away
is refused, and an older one or the topic's start is used), and a snapshot in the bucket is
damaged. The new follower then folds every later record as they come, and is compared with the
live fold at every step as the RocksDB follower is."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, invariant, precondition, rule

import tests.unit.test_ownership_model as ownership
from processor.follower.cache_writes import RawMessage
from processor.follower.metadata_cache import MetadataCache
from processor.follower.snapshot_writer import write_snapshots
from processor.follower.snapshots import SnapshotStore, load_snapshots
from processor.metadata.model import SegmentState as S
from processor.storage.filesystem import FilesystemChunkStorage

NEVER_COMPACTED_MS = 1 << 62  # the model compacts at any legal point: a missing last record is refused


class TopicAsked:
    """The model's metadata partition as the snapshot writer and loader ask it."""

    def __init__(self, model: SnapshotModel) -> None:
        self.model = model

    def watermarks(self, partition: int) -> tuple[int, int]:
        return 0, self.model.topic.next_offset  # compaction never moves the low watermark

    def record_from(self, partition: int, offset: int) -> tuple[int, bytes | None, bytes | None, int] | None:
        for m in self.model.topic.log:
            if m.offset >= offset:
                return m.offset, m.key, m.value, 0
        return None


class SnapshotModel(ownership.OwnershipModel):
    @initialize()
    def snapshots_setup(self) -> None:
        self.snapshot_dir = Path(tempfile.mkdtemp(prefix="snapshot-model-"))
        self.storage = FilesystemChunkStorage(self.snapshot_dir / "bucket")
        self.incarnation = 0  # the metadata topic's: a rebuilt topic is another one
        self.started: MetadataCache | None = None  # a follower started from a snapshot
        self.started_applied = 0
        self.started_dirs = 0
        self.loaded = 0
        self.tail_compacted = False  # the topic was compacted since the follower started

    def teardown(self) -> None:
        if getattr(self, "started", None) is not None:
            assert self.started is not None
            self.started.close()
        super().teardown()
        if hasattr(self, "snapshot_dir"):
            shutil.rmtree(self.snapshot_dir, ignore_errors=True)

    def _store(self) -> SnapshotStore:
        return SnapshotStore(self.storage, "archive", f"meta/{self.incarnation}")

    def _catch_up_cache(self) -> None:
        new = [
            RawMessage(0, m.offset, m.key, m.value) for m in self.topic.log if m.offset >= self.cache_applied
        ]
        self.cache.apply_batch(new)
        self.cache_applied = self.topic.next_offset

    @rule()
    def snapshot_taken(self) -> None:
        self._catch_up_cache()
        write_snapshots(self.cache, self._store(), TopicAsked(self), [0], 1, keep=3)

    @rule()
    def follower_starts_from_a_snapshot(self) -> None:
        if self.started is not None:
            self.started.close()
        self.started_dirs += 1
        self.started = MetadataCache(self.snapshot_dir / f"started-{self.started_dirs}")
        outcome = load_snapshots(
            self.started, self._store(), TopicAsked(self), [0], 1, None, NEVER_COMPACTED_MS
        )[0]
        self.started_applied = outcome.next_offset or 0
        self.tail_compacted = False
        self.loaded += outcome.key is not None

    @precondition(lambda self: any(True for _ in self.storage.list("archive/")))
    @rule(data=st.data())
    def snapshot_damaged(self, data: st.DataObject) -> None:
        infos = list(self.storage.list("archive/"))
        info = data.draw(st.sampled_from(infos), label="snapshot")
        path = self.snapshot_dir / "bucket" / info.key
        raw = bytearray(path.read_bytes())
        at = data.draw(st.integers(0, len(raw) - 1), label="byte")
        raw[at] ^= 0x10
        path.write_bytes(bytes(raw))

    def compact(self, data: st.DataObject) -> None:
        super().compact(data)
        self.tail_compacted = True

    def metadata_topic_lost_and_rebuilt(self) -> None:
        super().metadata_topic_lost_and_rebuilt()
        self.incarnation += 1  # a new topic (another topic id): the old one's snapshots are not its
        if self.started is not None:  # a follower of the lost topic (its cache is rebuilt)
            self.started.close()
            self.started = None

    @invariant()
    def a_follower_from_a_snapshot_agrees(self) -> None:
        if self.started is None:
            return
        if self.topic.next_offset < self.started_applied:
            # the partition lost its tail under this follower: a real one is rebuilt (its cache is
            # ahead of the topic); what a new follower does then is the rule above
            self.started.close()
            self.started = None
            return
        new = [
            RawMessage(0, m.offset, m.key, m.value)
            for m in self.topic.log
            if m.offset >= self.started_applied
        ]
        self.started.apply_batch(new)
        self.started_applied = self.topic.next_offset
        # what a reader serves, as the base model holds a fresh fold of the compacted topic to it:
        # the tail this follower read may have been compacted (a record of it superseded before it
        # was read), so bookkeeping that only such records leave (a retired topic id noted from a
        # record compaction removed, say) may differ; what is served may not
        live = self.topic.live
        for tp in ownership.TPS:
            cached = self.started.remote_state(tp)
            view = live.partition(tp)
            assert {s.segment_id.id for s in cached.finished()} == set(self._served(live, tp))
            assert cached.log_start_offset == view.log_start_offset
            assert cached.current_epoch == view.current_epoch
            if not self.tail_compacted:  # nothing compacted since it started: everything agrees
                listed = {x: s for x, s in view.segments.items() if s.state is not S.DELETE_SEGMENT_FINISHED}
                assert cached.segments == listed
                assert cached.header == view.header
                assert cached.shadowed == view.shadowed
                assert cached.orphans == view.orphans


# the compaction and lost-and-rebuilt rules are the base class's, re-registered as they were
SnapshotModel.compact = precondition(lambda self: len(self.topic.log) > 0)(  # type: ignore[method-assign]
    rule(data=st.data())(SnapshotModel.compact)
)
SnapshotModel.metadata_topic_lost_and_rebuilt = precondition(  # type: ignore[method-assign]
    lambda self: self._manifested()
)(rule()(SnapshotModel.metadata_topic_lost_and_rebuilt))


# drawn as often as the owners' own steps (a rule is one of ~70 otherwise): four copies of each
def _copy_rule(name: str, copy: int) -> None:
    def method(self: SnapshotModel) -> None:
        getattr(SnapshotModel, name)(self)

    method.__name__ = f"{name}_{copy}"
    setattr(SnapshotModel, method.__name__, rule()(method))


for _copy in range(1, 5):
    for _name in ("snapshot_taken", "follower_starts_from_a_snapshot"):
        _copy_rule(_name, _copy)

SnapshotModel.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_snapshot_model = pytest.mark.timeout(360)(SnapshotModel.TestCase)


@pytest.mark.slow
def test_snapshot_model_long() -> None:
    run = SnapshotModel.TestCase("runTest")
    run.settings = settings(  # type: ignore[misc]
        max_examples=1_000, stateful_step_count=80, deadline=None, suppress_health_check=list(HealthCheck)
    )
    run.runTest()
