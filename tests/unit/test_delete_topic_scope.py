"""delete-topic's choice of what to delete (processor/commands/delete_topic.py: choose_scope, pure):
never what it cannot prove is garbage."""

from __future__ import annotations

import argparse
import dataclasses
import uuid
from pathlib import Path
from typing import cast

import pytest

from processor.commands.delete_topic import LiveTopic, choose_scope, delete_partition
from processor.errors import ConfigError
from processor.kafka.partition import TopicPartition
from processor.metadata.model import ClaimKind, PartitionClaim, RemoteLogSegmentId, RemoteLogSegmentMetadata
from processor.metadata.remote_log_state import PartitionRemoteState
from processor.storage.filesystem import FilesystemChunkStorage
from processor.wiring.deletion_context import DeletionContext
from tests.unit.test_claims import KEYS, TP, Log, deleter, segment
from tests.unit.test_deletion_proof import keys_in, objects_of, upload

LIVE = "0b6c1a52-3c39-4f5e-9d2c-6a4e3f0f6d11"
OLD = "5f0d3c7e-8a41-4a8e-b1c5-2f7d9e6b4a22"
OLDER = "9a2e4b18-6d73-4c1f-a0e8-7b3c5d1f9e33"
STRAY = "c4d8e2a6-1b5f-4e9a-8c3d-0f6a2b7e5d44"  # a folder in the bucket no metadata record names

HAS_ID = LiveTopic(exists=True, topic_id=LIVE)
NO_ID = LiveTopic(exists=True)
GONE = LiveTopic(exists=False)
UNREADABLE = LiveTopic(exists=True, unreadable="the topic id of t could not be read: timed out")


def args(topic_id: str | None = None, include_live: bool = False) -> argparse.Namespace:
    return argparse.Namespace(topic="orders", topic_id=topic_id, include_live=include_live)


@pytest.mark.parametrize(
    "given",
    [args(), args(topic_id=OLD), args(topic_id="legacy"), args(include_live=True)],
    ids=["default", "topic-id", "legacy", "include-live"],
)
def test_a_live_topic_id_that_cannot_be_read_refuses_whatever_the_options(given: argparse.Namespace) -> None:
    with pytest.raises(ConfigError, match=r"live topic id of orders could not be read.*nothing deleted"):
        choose_scope(given, UNREADABLE, {LIVE, OLD, None}, {LIVE, OLD, None}, legacy_live=False)


def test_a_topic_without_an_id_refuses_the_default_mode() -> None:
    with pytest.raises(ConfigError, match=r"reports no topic id.*nothing deleted.*--topic-id"):
        choose_scope(args(), NO_ID, {OLD, None}, {OLD, None}, legacy_live=False)


def test_a_topic_without_an_id_still_deletes_what_is_named_explicitly() -> None:
    one = choose_scope(args(topic_id=OLD), NO_ID, {OLD, None}, {None}, legacy_live=False)
    assert (one.ids, one.everything) == ({OLD}, False)
    legacy = choose_scope(args(topic_id="legacy"), NO_ID, {None}, {None}, legacy_live=False)
    assert (legacy.ids, legacy.everything) == ({None}, False)
    everything = choose_scope(args(include_live=True), NO_ID, {OLD, None}, {None}, legacy_live=False)
    # everything the metadata knows; a folder only the listing shows still needs --topic-id
    assert everything.everything and everything.ids == {None} and everything.listed_only == {OLD}


def test_a_topic_the_broker_says_is_gone_loses_every_history_the_metadata_knows() -> None:
    scope = choose_scope(args(), GONE, {OLD, STRAY, None}, {OLD, OLDER, None}, legacy_live=False)
    assert scope.everything and scope.ids == {OLD, OLDER, None}
    # another deployment's folder in a shared bucket is not this metadata's to judge
    assert scope.listed_only == {STRAY}


def test_a_gone_topic_with_an_explicit_id_deletes_that_id_only() -> None:
    scope = choose_scope(args(topic_id=OLD), GONE, {OLD, OLDER}, {OLD, OLDER}, legacy_live=False)
    assert (scope.ids, scope.everything) == ({OLD}, False)


def test_with_a_live_id_only_the_histories_the_metadata_knows_go() -> None:
    scope = choose_scope(
        args(), HAS_ID, listed={LIVE, OLD, STRAY}, known={LIVE, OLD, OLDER}, legacy_live=False
    )
    assert not scope.everything
    assert scope.ids == {OLD, OLDER}, "the live id never; an id known to the metadata only is fine"
    assert scope.listed_only == {STRAY}, "a folder only the listing shows is printed, not deleted"


def test_legacy_segments_go_only_when_known_and_not_part_of_the_live_history() -> None:
    retired = choose_scope(args(), HAS_ID, {LIVE, None}, {LIVE, None}, legacy_live=False)
    assert retired.ids == {None} and retired.listed_only == set()
    live = choose_scope(args(), HAS_ID, {LIVE, None}, {LIVE, None}, legacy_live=True)
    assert live.ids == set() and live.listed_only == set(), "the live history's legacy folder stays"
    stray = choose_scope(args(), HAS_ID, {LIVE, None}, {LIVE}, legacy_live=False)
    assert stray.ids == set() and stray.listed_only == {None}


def test_nothing_known_but_the_live_id_deletes_nothing() -> None:
    scope = choose_scope(args(), HAS_ID, {LIVE}, {LIVE}, legacy_live=False)
    assert scope.ids == set() and not scope.everything and scope.listed_only == set()


def test_an_explicit_id_may_be_one_found_only_in_the_bucket_but_never_the_live_one() -> None:
    scope = choose_scope(args(topic_id=STRAY), HAS_ID, {LIVE, STRAY}, {LIVE}, legacy_live=False)
    assert (scope.ids, scope.everything) == ({STRAY}, False)
    with pytest.raises(ConfigError, match="is the live topic's id"):
        choose_scope(args(topic_id=LIVE), HAS_ID, {LIVE}, {LIVE}, legacy_live=False)


def test_include_live_deletes_everything() -> None:
    scope = choose_scope(args(include_live=True), HAS_ID, {LIVE, STRAY}, {LIVE, OLD}, legacy_live=True)
    assert scope.everything and scope.ids == {LIVE, OLD} and scope.listed_only == {STRAY}


def test_the_legacy_history_of_the_live_topic_is_refused_by_name_as_the_live_id_is() -> None:
    """Before: ``--topic-id legacy`` deleted the segments without an id although they are part of the
    live topic's history (passing the live id itself was refused)."""
    with pytest.raises(ConfigError, match="live topic's history"):
        choose_scope(args(topic_id="legacy"), HAS_ID, {LIVE, None}, {LIVE, None}, legacy_live=True)
    retired = choose_scope(args(topic_id="legacy"), HAS_ID, {LIVE, None}, {LIVE, None}, legacy_live=False)
    assert (retired.ids, retired.everything) == ({None}, False)


class _Context:
    """What delete_partition uses of a DeletionContext: the metadata partition in memory (the real
    fold), a filesystem bucket, the real deleter."""

    def __init__(self, log: Log, storage: FilesystemChunkStorage) -> None:
        self.log, self.storage, self.keys, self.writer_id = log, storage, KEYS, "cli"
        self.publisher = log
        self.deleter = deleter(log, storage, "cli")
        self.deletion_topic = self
        self.held: dict[TopicPartition, int] = {}

    def pending(self, tps: object) -> list[RemoteLogSegmentMetadata]:
        return []

    def state(self, tp: TopicPartition) -> PartitionRemoteState:
        return self.log.state()

    def claim(self, tp: TopicPartition) -> int:
        self.held[tp] = self.log.claim("cli", ClaimKind.ADMIN)
        return self.held[tp]

    def release(self, tp: TopicPartition) -> None:
        epoch = self.held.pop(tp)
        self.log.publish(PartitionClaim(tp, uuid.uuid4(), ClaimKind.RELEASE, "cli", 0, released_epoch=epoch))


def test_a_gone_topic_keeps_the_folder_it_says_it_keeps(tmp_path: Path) -> None:
    """The topic is gone; the metadata knows topic id OLD, the bucket also holds a legacy folder no
    metadata names. Before: the command printed "segments without a topic id not deleted: found only
    in the bucket" and then deleted them, manifests too."""
    storage = FilesystemChunkStorage(tmp_path)
    log = Log()
    epoch = log.publish(PartitionClaim(TP, uuid.uuid4(), ClaimKind.LEAD, "w", 0, OLD))
    sid = RemoteLogSegmentId(TP.topic, TP.partition, uuid.uuid4(), OLD)
    keys = KEYS.segment(TP.topic, TP.partition, 0, sid.id, epoch, OLD)
    known = dataclasses.replace(
        segment(0, 9, epoch), segment_id=sid, data_object_key=keys.data, index_object_key=keys.index
    )
    assert log.accepted[log.publish(known)]
    upload(storage, known)
    stray = segment(0, 9, 1)  # a legacy folder (no topic id) only the bucket shows
    upload(storage, stray)
    scope = choose_scope(args(), GONE, {OLD, None}, {OLD}, legacy_live=False)
    assert scope.everything and scope.listed_only == {None}
    delete_partition(cast(DeletionContext, _Context(log, storage)), TP, scope)
    assert not objects_of(known) & keys_in(storage)
    assert objects_of(stray) <= keys_in(storage), "deleted a folder it printed it keeps"
