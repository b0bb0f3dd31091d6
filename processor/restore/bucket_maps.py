"""Offset maps in the bucket, next to the archive they came from.

Key layout (one immutable object per source partition and position; the newest has the highest
``covered_end``, and listing the folder returns it last)::

    {prefix}/{topic}-{topic_id}/restores/{target_cluster_id}/{restore_id}/{source_partition}/{covered_end:020d}.offsetmap

(``{topic}/restores/...`` for an archive without topic ids). The folder is no partition folder (its
name is not a number), so ``verify`` and ``delete-topic``, which look only at partition folders,
leave it alone. The bytes are the offset map layout of :mod:`processor.restore.offset_map`, the whole
map of the partition as committed on the progress topic when it was written. The progress topic on
the target stays the authority; these copies let ``restore-groups`` work from the bucket alone.
"""

from __future__ import annotations

import contextlib
import re

from processor.errors import InvalidNameError, ObjectExistsError
from processor.restore import offset_map
from processor.restore.offset_map import OffsetMap
from processor.restore.progress_record import validate_restore_id
from processor.segment.object_keys import (
    validate_partition,
    validate_prefix,
    validate_topic,
    validate_topic_id,
)
from processor.storage.chunk_storage import ChunkStorage

SUFFIX = ".offsetmap"
_CLUSTER_ID = re.compile(r"[A-Za-z0-9._=-]{1,200}")
_NAME = re.compile(r"(\d{20})" + re.escape(SUFFIX))


def _folder(
    prefix: str, topic: str, topic_id: str | None, cluster_id: str, restore_id: str, partition: int
) -> str:
    if not _CLUSTER_ID.fullmatch(cluster_id):
        raise InvalidNameError(f"cluster id {cluster_id!r} cannot be part of an object key")
    topic_folder = validate_topic(topic) + ("" if topic_id is None else "-" + validate_topic_id(topic_id))
    parts = [
        validate_prefix(prefix),
        topic_folder,
        "restores",
        cluster_id,
        validate_restore_id(restore_id),
        str(validate_partition(partition)),
    ]
    return "/".join(p for p in parts if p) + "/"


def map_key(
    prefix: str, topic: str, topic_id: str | None, cluster_id: str, restore_id: str, offset_map: OffsetMap
) -> str:
    folder = _folder(prefix, topic, topic_id, cluster_id, restore_id, offset_map.source_partition)
    return f"{folder}{offset_map.covered_end:020d}{SUFFIX}"


def write_map(
    storage: ChunkStorage,
    prefix: str,
    topic: str,
    topic_id: str | None,
    cluster_id: str,
    restore_id: str,
    full_map: OffsetMap,
) -> str:
    key = map_key(prefix, topic, topic_id, cluster_id, restore_id, full_map)
    # An earlier run at the same position wrote it already: the same committed map.
    with contextlib.suppress(ObjectExistsError):
        storage.create(key, [offset_map.encode(full_map)])
    return key


def latest_maps(
    storage: ChunkStorage, prefix: str, topic: str, cluster_id: str, restore_id: str
) -> dict[int, OffsetMap]:
    """The newest offset map of every source partition of a restore, whatever the archive's topic
    id (a topic archived under two ids, deleted and re-created, is ambiguous: an error)."""
    root = "/".join(p for p in (validate_prefix(prefix), validate_topic(topic)) if p)
    pattern = re.compile(
        re.escape(root)
        + r"(?:-([0-9a-f-]{36}))?/restores/"
        + re.escape(cluster_id)
        + "/"
        + re.escape(validate_restore_id(restore_id))
        + r"/(\d+)/(\d{20})"
        + re.escape(SUFFIX)
    )
    newest: dict[int, str] = {}
    topic_ids: set[str | None] = set()
    for info in storage.list(root):
        m = pattern.fullmatch(info.key)
        if m is None:
            continue
        topic_ids.add(m.group(1))
        p = int(m.group(2))
        if p not in newest or info.key > newest[p]:
            newest[p] = info.key
    if len(topic_ids) > 1:
        raise InvalidNameError(
            f"offset maps of restore {restore_id} exist for several archives of {topic} "
            f"(topic ids {sorted(str(t) for t in topic_ids)}): use another --restore-id or the progress topic"
        )
    return {p: offset_map.decode(storage.read_all(key), where=key) for p, key in sorted(newest.items())}
