"""The rebuild read and planned a source partition's folders at a time plans what one plan of the
whole bucket plans (filesystem storage, walked by folders and listed once)."""

from __future__ import annotations

import tempfile
import uuid
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from processor.kafka.partition import TopicPartition
from processor.metadata.model import RemoteLogSegmentId, RemoteLogSegmentMetadata
from processor.rebuild.inventory import take_inventory
from processor.rebuild.manifests import read_manifests
from processor.rebuild.resolve import PartitionRebuild, plan_rebuild
from processor.rebuild.stream import (
    Group,
    PartitionSummary,
    ServedDigest,
    candidate_topics,
    folder_groups,
    list_groups,
    plan_groups,
    read_groups,
    topic_ids_from_folders,
)
from processor.storage.filesystem import FilesystemChunkStorage
from tests.unit.test_rebuild_inventory import KEYS, segment, store

ID1, ID2 = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
# a legacy topic whose name looks like topic "a"'s folder with an id: its folder joins a's group
UUID_NAMED = f"a-{ID1}"


class _Folders(FilesystemChunkStorage):
    lists_folders = True


def test_candidate_topics() -> None:
    assert candidate_topics(f"orders-{ID1}") == [f"orders-{ID1}", "orders"]
    assert candidate_topics("orders") == ["orders"]
    assert candidate_topics("snapshots=metadata") == []


def test_folders_of_one_partition_are_one_group() -> None:
    folders = [
        f"pre/orders-{ID1}/0/",
        f"pre/orders-{ID2}/0/",
        "pre/orders/0/",
        f"pre/orders-{ID1}/1/",
        f"pre/{UUID_NAMED}/0/",
        f"pre/{UUID_NAMED}-{ID2}/0/",
        "pre/snapshots=metadata/__remote_log_metadata-x/",
    ]
    groups = {g.folders for g in folder_groups("pre/", folders)}
    assert groups == {
        (f"pre/orders-{ID1}/0/", f"pre/orders-{ID2}/0/", "pre/orders/0/"),
        (f"pre/orders-{ID1}/1/",),
        (f"pre/{UUID_NAMED}-{ID2}/0/", f"pre/{UUID_NAMED}/0/"),  # joined through topic a-{ID1}
        ("pre/snapshots=metadata/__remote_log_metadata-x/",),
    }


def _seg(
    topic: str, topic_id: str | None, partition: int, start: int, when: int, states: str | None = "same"
) -> RemoteLogSegmentMetadata:
    base = segment(partition, start, start + 9)
    sid = uuid.uuid4()
    keys = KEYS.segment(topic, partition, start, sid, base.writer_epoch, topic_id)
    stated = topic_id if states == "same" else states  # a manifest may state another id than its folder
    return replace(
        base,
        segment_id=RemoteLogSegmentId(topic, partition, sid, stated),
        event_timestamp_ms=when,
        data_object_key=keys.data,
        index_object_key=keys.index,
    )


def _view(plan: dict[TopicPartition, PartitionRebuild]) -> dict[TopicPartition, object]:
    return {
        tp: (
            p.topic_id,
            [s.segment_id.id for s in p.served],
            [s.segment_id.id for s in p.published],
            [(m.segment.data_object_key, why) for m, why in p.not_served],
        )
        for tp, p in plan.items()
    }


segments = st.lists(
    st.tuples(
        st.sampled_from([("orders", ID1), ("orders", ID2), ("orders", None), (UUID_NAMED, None)]),
        st.integers(0, 2),  # partition
        st.integers(0, 6),  # start / 10 (overlaps: the fold decides)
        st.integers(0, 3),  # event time (ties)
        st.sampled_from(["ok", "ok", "ok", "no-index", "no-manifest", "corrupt", "other-id"]),
    ),
    max_size=25,
)


@settings(max_examples=40)
@given(segments, st.sampled_from([{}, {"orders": ID2}, {"orders": ID1, UUID_NAMED: None}]), st.booleans())
def test_streamed_plan_is_the_whole_plan(
    found: list[tuple[tuple[str, str | None], int, int, int, str]],
    broker: dict[str, str | None],
    by_folders: bool,
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        storage = (_Folders if by_folders else FilesystemChunkStorage)(Path(tmp))
        for (topic, tid), partition, start, when, how in found:
            other = ID1 if tid != ID1 else None
            seg = _seg(topic, tid, partition, start * 10, when, other if how == "other-id" else "same")
            if how == "corrupt":
                store(storage, seg, manifest=b"KTSM" + b"\x00" * 40)
            else:
                store(storage, seg, index=how != "no-index", manifest=None if how == "no-manifest" else b"")
        storage.create("pre/loose-object", [b"x"])
        inventory = take_inventory((i.key, i.size) for i in storage.list("pre/"))
        manifests, problems = read_manifests(storage, KEYS, inventory.complete, threads=2)
        whole = plan_rebuild(manifests, broker, now_ms=5)

        groups = list_groups(storage, "pre/", threads=2)
        assert all(isinstance(g, Group) for g in groups)
        streamed: dict[TopicPartition, PartitionRebuild] = {}
        seen_problems, without, listed, calls = [], [], 0, [0]
        known = {**topic_ids_from_folders("pre/", groups), **broker}
        for read, plan in plan_groups(
            storage, KEYS, groups, known, 5, lambda: calls.__setitem__(0, calls[0] + 1)
        ):
            assert not set(plan) & set(streamed), "a partition is planned in one group"
            streamed.update(plan)
            seen_problems += read.problems
            without += [o.data_key for o in read.inventory.without_manifest]
            listed += read.objects_listed
        assert _view(streamed) == _view(whole)
        assert sorted(seen_problems, key=lambda p: p.key) == sorted(problems, key=lambda p: p.key)
        assert sorted(without) == [o.data_key for o in inventory.without_manifest]
        assert listed == len(list(storage.list("pre/")))
        assert calls[0] == len(groups)
        for part in whole.values():
            summary = PartitionSummary.of(part)
            digest = ServedDigest()
            for s in reversed(part.served):
                digest.add(s.segment_id.id.bytes)
            assert summary.served == digest and summary.segments == len(part.served)


def test_a_digest_tells_sets_apart() -> None:
    a, b = ServedDigest(), ServedDigest()
    ids = [uuid.uuid4().bytes for _ in range(3)]
    for i in ids:
        a.add(i)
    for i in ids[:2]:
        b.add(i)
    assert a != b
    b.add(uuid.uuid4().bytes)
    assert a != b and a.count == b.count


def test_a_manifest_stating_another_topic_id_than_its_folder_is_a_problem(tmp_path: Path) -> None:
    storage = FilesystemChunkStorage(tmp_path)
    store(storage, _seg("orders", ID1, 0, 0, 1, states=ID2))
    [read] = [r for r in read_groups(storage, KEYS, list_groups(storage, "pre/"))]
    # its record's own checks refuse it (a segment's object key is built from the id it states), so
    # every manifest that counts lies in its topic id's folder: what topic_ids_from_folders relies on
    assert read.manifests == [] and len(read.problems) == 1
    assert "is not the data object of segment" in read.problems[0].what


def test_topic_ids_from_folders() -> None:
    groups = folder_groups(
        "pre/",
        [
            f"pre/orders-{ID1}/0/",
            f"pre/orders-{ID1}/1/",
            f"pre/pay-{ID1}/0/",
            f"pre/pay-{ID2}/0/",
            "pre/legacy/0/",
        ],
    )
    found = topic_ids_from_folders("pre/", groups)
    assert found["orders"] == ID1 and found["legacy"] is None and "pay" not in found
    assert found[f"orders-{ID1}"] is None  # what a legacy topic of that name would be: harmless
