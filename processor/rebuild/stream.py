"""The rebuild's reading, a source partition at a time: memory bounded by the largest partition.

A source partition's objects all lie in its partition folders (``{topic}-{topic_id}/{p}/``, one per
topic id, and the legacy ``{topic}/{p}/``): :func:`folder_groups` puts the folders that may hold
one partition's segments into one group (a folder ``a-{uuid}/0/`` may be topic ``a``'s or, in the
legacy layout, topic ``a-{uuid}``'s: groups joined through any name they may share), and
:func:`read_groups` lists a group, takes its inventory and reads its manifests, ``list_threads``
groups listed ahead and ``read_threads`` manifests read at once across group boundaries, and yields
one :class:`GroupRead` a group. Only a group's listing and manifests are held while it is read and
resolved (:func:`processor.rebuild.resolve.plan_rebuild` plans whatever partitions the manifests
name); what a rebuild keeps of a published partition is a :class:`PartitionSummary`.

Objects met above the partition folders (in the prefix, in a topic folder) are one group of their
own: a segment's manifest there never checks out (its key is not one the key factory builds), so
they are only inventoried and reported. A store that cannot list folders (not S3) is listed once and
grouped in memory (its keys only).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from processor.errors import InvalidNameError
from processor.kafka.partition import TopicPartition
from processor.metadata.manifest import SegmentManifest
from processor.rebuild.inventory import Inventory, SegmentObjects, take_inventory
from processor.rebuild.listing import LIST_THREADS, WINDOW_PER_THREAD, walk
from processor.rebuild.manifests import IN_FLIGHT_PER_THREAD, READ_THREADS, Problem, read_one
from processor.rebuild.parallel import bounded_map
from processor.rebuild.resolve import PartitionRebuild, plan_rebuild
from processor.segment.object_keys import ObjectKeyFactory, validate_topic
from processor.storage.chunk_storage import ChunkInfo, ChunkStorage

_WITH_ID = re.compile(r"(.+)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@dataclass(frozen=True)
class Group:
    """Folders listed together (``folders``), or objects already listed (``listed``)."""

    folders: tuple[str, ...] = ()
    listed: tuple[ChunkInfo, ...] | None = None


@dataclass
class GroupRead:
    group: Group
    inventory: Inventory
    objects_listed: int
    manifests: list[SegmentManifest] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)


def candidate_topics(topic_folder: str) -> list[str]:
    """The topics whose partition folders a topic folder named ``topic_folder`` may be: the name
    itself (the legacy layout) and the name without a trailing ``-{topic_id}``."""
    out = []
    for name in (topic_folder, m.group(1) if (m := _WITH_ID.fullmatch(topic_folder)) else None):
        if name is None:
            continue
        try:
            out.append(validate_topic(name))
        except InvalidNameError:
            continue
    return out


def folder_groups(root: str, folders: Iterable[str]) -> list[Group]:
    """``folders`` (``{root}{topic folder}/{partition folder}/``) grouped so that every folder that
    may hold one source partition's segments is in one group; a folder no partition's segments
    can be in is a group of its own. Groups in order of their first folder."""
    parent: dict[str, str] = {}  # union-find over folders

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    owner: dict[tuple[str, str], str] = {}  # (topic, partition folder) -> a folder holding it
    for folder in sorted(set(folders)):
        parent.setdefault(folder, folder)
        parts = folder[len(root) :].rstrip("/").split("/")
        if len(parts) != 2:
            continue
        topic_folder, partition = parts
        for topic in candidate_topics(topic_folder):
            first = owner.setdefault((topic, partition), folder)
            a, b = find(first), find(folder)
            if a != b:
                parent[max(a, b)] = min(a, b)
    members: dict[str, list[str]] = {}
    for folder in sorted(parent):
        members.setdefault(find(folder), []).append(folder)
    return [Group(tuple(fs)) for _root, fs in sorted(members.items())]


def list_groups(storage: ChunkStorage, root: str, threads: int = LIST_THREADS) -> list[Group]:
    """The groups of the prefix ``root``: its partition folders grouped, the objects above them one
    group (first). A store that lists no folders is listed here, whole, and grouped by key."""
    if storage.lists_folders:
        folders, loose = walk(storage, root, threads)
        groups = folder_groups(root, folders)
        return [Group(listed=tuple(loose)), *groups] if loose else groups
    by_folder: dict[str, list[ChunkInfo]] = {}
    loose = []
    for info in storage.list(root):
        parts = info.key[len(root) :].split("/")
        if len(parts) < 3:
            loose.append(info)
        else:
            by_folder.setdefault(f"{root}{parts[0]}/{parts[1]}/", []).append(info)
    out = [Group(listed=tuple(loose))] if loose else []
    for group in folder_groups(root, by_folder):
        out.append(Group(listed=tuple(i for f in group.folders for i in by_folder[f])))
    return out


def topic_ids_from_folders(root: str, groups: Iterable[Group]) -> dict[str, str | None]:
    """The topic id of each topic all of whose partition folders carry one identity (one
    ``{topic}-{topic_id}`` name, or only the legacy ``{topic}``): its current one, since every
    manifest that checks out lies in the folder of the topic id it states (a record whose object key
    is not its segment's own does not decode), so its newest segment's is that one. A topic whose
    folders carry several is left out (its newest segment decides: read twice)."""
    seen: dict[str, set[str | None]] = {}

    def note(topic_folder: str) -> None:
        for topic in candidate_topics(topic_folder):
            identity = topic_folder[len(topic) + 1 :] if topic != topic_folder else None
            seen.setdefault(topic, set()).add(identity)

    for group in groups:
        for folder in group.folders:
            parts = folder[len(root) :].split("/")
            if len(parts) >= 3:
                note(parts[0])
        for info in group.listed or ():
            parts = info.key[len(root) :].split("/")
            if len(parts) >= 3:
                note(parts[0])
    return {topic: next(iter(ids)) for topic, ids in seen.items() if len(ids) == 1}


@dataclass(frozen=True)
class _End:
    group: Group
    inventory: Inventory
    listed: int


def read_groups(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    groups: Iterable[Group],
    list_threads: int = LIST_THREADS,
    read_threads: int = READ_THREADS,
) -> Iterator[GroupRead]:
    """Each group's inventory and the manifests of its complete segments (or their problems), in
    the order of ``groups``. A storage error is raised here, never lost."""

    def listed(group: Group) -> _End:
        if group.listed is not None:
            chunks: Iterable[ChunkInfo] = group.listed
        else:
            chunks = [info for folder in group.folders for info in storage.list(folder)]
        pairs = [(info.key, info.size) for info in chunks]
        return _End(group, take_inventory(pairs), len(pairs))

    def tagged() -> Iterator[SegmentObjects | _End]:
        window = max(1, list_threads) * WINDOW_PER_THREAD
        for end in bounded_map(listed, groups, list_threads, window, "rebuild-list"):
            yield from end.inventory.complete
            yield end

    def read(item: SegmentObjects | _End) -> SegmentManifest | Problem | _End:
        return item if isinstance(item, _End) else read_one(storage, keys, item)

    manifests: list[SegmentManifest] = []
    problems: list[Problem] = []
    window = max(1, read_threads) * IN_FLIGHT_PER_THREAD
    for result in bounded_map(read, tagged(), read_threads, window, "rebuild-read"):
        if isinstance(result, _End):
            result.inventory.complete.clear()  # read: not kept
            yield GroupRead(result.group, result.inventory, result.listed, manifests, problems)
            manifests, problems = [], []
        elif isinstance(result, Problem):
            problems.append(result)
        else:
            manifests.append(result)


class ServedDigest:
    """An order-free digest of a set of segment ids: their count and the sum of their SHA-256
    modulo 2^256 (what a rebuild keeps of a partition's planned segments to compare with what the
    published topic folds to, instead of every id)."""

    __slots__ = ("count", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0

    def add(self, segment_id: bytes) -> None:
        self.count += 1
        self.total = (self.total + int.from_bytes(hashlib.sha256(segment_id).digest(), "big")) % (1 << 256)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ServedDigest) and (self.count, self.total) == (other.count, other.total)

    def __hash__(self) -> int:
        return hash((self.count, self.total))


@dataclass
class PartitionSummary:
    """What a rebuild keeps of a partition once it is planned."""

    topic_id: str | None
    segments: int
    superseded: int
    start_offset: int | None
    end_offset: int | None
    served: ServedDigest
    not_served: list[tuple[str, str]]  # (data object key, why)

    @classmethod
    def of(cls, part: PartitionRebuild) -> PartitionSummary:
        digest = ServedDigest()
        for s in part.served:
            digest.add(s.segment_id.id.bytes)
        return cls(
            part.topic_id,
            len(part.served),
            len(part.superseded),
            min((s.start_offset for s in part.served), default=None),
            max((s.end_offset for s in part.served), default=None),
            digest,
            [(m.segment.data_object_key, why) for m, why in part.not_served],
        )


def note_newest(newest: dict[str, tuple[int, str, str | None]], manifests: Iterable[SegmentManifest]) -> None:
    """Keep, per topic, the topic id of its most recently finished segment (ties: the first in key
    order), as :func:`processor.rebuild.resolve.current_topic_ids` does over one listing."""
    for m in manifests:
        seg = m.segment
        topic, when, key = seg.segment_id.topic, seg.event_timestamp_ms, seg.data_object_key
        held = newest.get(topic)
        if held is None or when > held[0] or (when == held[0] and key < held[1]):
            newest[topic] = (when, key, seg.segment_id.topic_id)


def plan_groups(
    storage: ChunkStorage,
    keys: ObjectKeyFactory,
    groups: list[Group],
    broker_topic_ids: Mapping[str, str | None],
    now_ms: int,
    on_group: Callable[[], None] = lambda: None,
) -> Iterator[tuple[GroupRead, dict[TopicPartition, PartitionRebuild]]]:
    """Each group read and planned, as :func:`plan_rebuild` plans the whole bucket: a topic the
    broker does not know takes the topic id of its newest segment anywhere in the bucket, so a group
    holding one is planned after every group was read once, in a second read (its listing counted
    once). ``on_group`` after each first read."""
    deferred: list[tuple[Group, int]] = []
    newest: dict[str, tuple[int, str, str | None]] = {}
    for read in read_groups(storage, keys, groups):
        on_group()
        unknown = [m for m in read.manifests if m.segment.segment_id.topic not in broker_topic_ids]
        if unknown:
            note_newest(newest, unknown)
            deferred.append((read.group, read.objects_listed))
            continue
        yield read, plan_rebuild(read.manifests, broker_topic_ids, now_ms)
    resolved = {**broker_topic_ids, **{topic: tid for topic, (_w, _k, tid) in newest.items()}}
    listed = [n for _group, n in deferred]
    for n, read in zip(listed, read_groups(storage, keys, [g for g, _n in deferred]), strict=True):
        read.objects_listed = n
        yield read, plan_rebuild(read.manifests, resolved, now_ms)
