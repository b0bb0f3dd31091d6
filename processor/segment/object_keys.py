"""The single place that builds object keys, from validated parts only.

Layout (Aiven's ``topic-<uuid>`` style: a topic deleted and re-created under the same name gets a
new id, so its objects never mix with the old topic's)::

    {prefix}/{topic}-{topic_id}/{partition}/{start_offset:020d}-{segment_uuid}-e{writer_epoch}.log
    {prefix}/{topic}-{topic_id}/{partition}/{start_offset:020d}-{segment_uuid}-e{writer_epoch}.log-index
    {prefix}/{topic}-{topic_id}/{partition}/{start_offset:020d}-{segment_uuid}-e{writer_epoch}.log-manifest
    {prefix}/{topic}-{topic_id}/{partition}/{start_offset:020d}-{segment_uuid}-e{writer_epoch}.log-keys

(the manifest: processor/metadata/manifest.py; ``-keys``: the segment's key filter,
processor/segment/key_filter.py, written only while an erasure secret is configured)

``topic_id`` is the broker's topic id as an RFC 4122 string. Keys written before topic ids were
recorded (or when the broker reports none) have no ``-{topic_id}``: ``{prefix}/{topic}/{partition}/...``;
they stay readable.

Topic names must be legal Kafka topic names (``[A-Za-z0-9._-]``, 1..249 characters, not ``.`` or
``..``), so a topic can never add a path level or climb out of the prefix. Names carry the segment
UUID (new for every copy attempt) and the writer's epoch, so two writers never write the same object
(Pravega's single-writer rule); listing a partition's prefix returns segments in offset order.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from processor.errors import InvalidNameError

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
_PREFIX_PART = re.compile(r"[A-Za-z0-9._=-]{1,255}")
_DATA_NAME = re.compile(r"(\d{20})-([0-9a-f-]{36})-e(\d+)\.log")
_TOPIC_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
INDEX_SUFFIX = "-index"
MANIFEST_SUFFIX = "-manifest"  # the segment manifest (processor/metadata/manifest.py)
KEY_FILTER_SUFFIX = "-keys"  # the segment's key filter (processor/segment/key_filter.py), optional
_SUFFIXES = (INDEX_SUFFIX, MANIFEST_SUFFIX, KEY_FILTER_SUFFIX)
# The project's folders beside the topics' (names no topic can have): snapshots of the folded metadata
# (processor/follower/snapshots.py) and the erasure audit trail (processor/rewrite/erase_audit.py).
# Neither holds segments: no segment record references their objects, and none is an orphan.
SNAPSHOT_FOLDER = "snapshots=metadata"
ERASURE_AUDIT_FOLDER = "erasures=audit"
SIDE_FOLDERS = (SNAPSHOT_FOLDER, ERASURE_AUDIT_FOLDER)


def validate_topic(topic: str) -> str:
    if not isinstance(topic, str) or not _TOPIC.fullmatch(topic) or topic in {".", ".."}:
        raise InvalidNameError(
            f"invalid topic name {topic!r}: Kafka topic names use only letters, digits, '.', '_' and '-' "
            "(1 to 249 characters, not '.' or '..')"
        )
    return topic


def validate_prefix(prefix: str) -> str:
    """Normalise a bucket prefix: '' or slash-separated safe parts, no '.', '..' or empty parts."""
    stripped = prefix.strip("/")
    if not stripped:
        return ""
    for part in stripped.split("/"):
        if part in {".", ".."} or not _PREFIX_PART.fullmatch(part):
            raise InvalidNameError(
                f"invalid S3 prefix {prefix!r}: part {part!r} is not allowed "
                "(letters, digits, '.', '_', '=', '-' only; no '.', '..' or empty parts)"
            )
    return stripped


def validate_topic_id(topic_id: str) -> str:
    if not isinstance(topic_id, str) or not _TOPIC_ID.fullmatch(topic_id):
        raise InvalidNameError(f"invalid topic id {topic_id!r}: expected a lower-case RFC 4122 UUID string")
    return topic_id


def validate_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidNameError(f"invalid partition {partition!r}")
    return partition


@dataclass(frozen=True, slots=True)
class SegmentObjectKeys:
    data: str
    index: str

    @property
    def manifest(self) -> str:
        return self.data + MANIFEST_SUFFIX

    @property
    def key_filter(self) -> str:
        return self.data + KEY_FILTER_SUFFIX

    def in_delete_order(self) -> tuple[str, str, str, str]:
        """The manifest first: a rebuild never brings back a segment whose deletion has begun. The
        key filter last (a segment may have none: deleting a missing object is no error)."""
        return (self.manifest, self.data, self.index, self.key_filter)


class ObjectKeyFactory:
    def __init__(self, prefix: str) -> None:
        self.prefix = validate_prefix(prefix)

    def _join(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts)) if self.prefix else "/".join(parts)

    def partition_prefix(self, topic: str, partition: int, topic_id: str | None = None) -> str:
        """The folder of one partition's objects: ``{topic}-{topic_id}/{partition}/``, or the legacy
        ``{topic}/{partition}/`` without an id."""
        folder = validate_topic(topic)
        if topic_id is not None:
            folder += "-" + validate_topic_id(topic_id)
        return self._join(folder, str(validate_partition(partition))) + "/"

    def topic_listing_prefix(self, topic: str) -> str:
        """A listing prefix covering every folder of ``topic``: ``{topic}/`` (legacy, no id) and
        ``{topic}-{topic_id}/`` (one per topic id). It also covers topics whose names merely start
        with ``topic``: keep only the keys :meth:`partition_of` recognises."""
        return self._join(validate_topic(topic))

    def folder_of(self, topic: str, key: str) -> tuple[str | None, int] | None:
        """(topic id or None for the legacy folder, partition) of ``key`` if it lies in one of
        ``topic``'s partition folders, else None."""
        m = re.match(re.escape(self._join(topic)) + r"(?:-(" + _TOPIC_ID.pattern + r"))?/(\d+)/", key)
        return (m.group(1), int(m.group(2))) if m else None

    def partition_of(self, topic: str, key: str) -> int | None:
        """The partition of ``key`` if it lies in one of ``topic``'s partition folders (any topic
        id, or none), else None."""
        m = re.match(re.escape(self._join(topic)) + r"(?:-" + _TOPIC_ID.pattern + r")?/(\d+)/", key)
        return int(m.group(1)) if m else None

    def segment(
        self,
        topic: str,
        partition: int,
        start_offset: int,
        segment_id: uuid.UUID,
        writer_epoch: int,
        topic_id: str | None = None,
    ) -> SegmentObjectKeys:
        if start_offset < 0 or writer_epoch < 0:
            raise InvalidNameError(f"invalid start offset {start_offset} or writer epoch {writer_epoch}")
        name = f"{start_offset:020d}-{segment_id}-e{writer_epoch}.log"
        data = self.partition_prefix(topic, partition, topic_id) + name
        return SegmentObjectKeys(data, data + INDEX_SUFFIX)

    def owned_objects(
        self,
        topic: str,
        partition: int,
        segment_id: uuid.UUID,
        topic_id: str | None,
        data_key: str,
        index_key: str,
    ) -> SegmentObjectKeys:
        """The objects a segment record names, accepted only if they are that segment's own: under
        the prefix, in the folder of the segment's topic id and partition, with the segment's UUID in
        the name, the index being ``{data}-index``. Every delete goes through this: a record from the
        metadata or deletion topic is input like any other, and a key it carries must never make a
        writer delete another segment's, partition's or application's object."""
        folder = self.partition_prefix(topic, partition, topic_id)
        name = data_key[len(folder) :] if data_key.startswith(folder) else ""
        m = _DATA_NAME.fullmatch(name)
        if m is None or m.group(2) != str(segment_id) or index_key != data_key + INDEX_SUFFIX:
            raise InvalidNameError(
                f"object keys {data_key!r} / {index_key!r} are not the objects of segment {segment_id} "
                f"in {folder!r}"
            )
        return SegmentObjectKeys(data_key, index_key)

    def in_side_folder(self, key: str) -> bool:
        """Whether ``key`` is under one of the project's folders that hold no segments
        (:data:`SIDE_FOLDERS`): metadata snapshots, the erasure audit trail."""
        head = self._join("")
        return key.startswith(head) and key[len(head) :].split("/", 1)[0] in SIDE_FOLDERS

    def is_project_key(self, key: str) -> bool:
        """Whether ``key`` is an object (or a multipart upload's key) of this project's layout under
        the prefix: ``{prefix}/{topic}[-{topic_id}]/{partition}/{start}-{uuid}-e{epoch}.log``, with
        ``-index``, ``-manifest`` or ``-keys`` after it or not."""
        head = self._join("")
        if not key.startswith(head):
            return False
        parts = key[len(head) :].split("/")
        if len(parts) != 3 or not parts[1].isdigit():
            return False
        folder, _, name = parts
        topic = folder
        if len(folder) > 37 and folder[-37] == "-" and _TOPIC_ID.fullmatch(folder[-36:]):
            topic = folder[:-37]
        if not _TOPIC.fullmatch(topic) or topic in {".", ".."}:
            return False
        for suffix in _SUFFIXES:
            if name.endswith(suffix):
                name = name[: -len(suffix)]
                break
        return _DATA_NAME.fullmatch(name) is not None

    @staticmethod
    def segment_name(key: str) -> tuple[uuid.UUID, int, str] | None:
        """(segment UUID, writer epoch, data object key) of a data, index, manifest or key filter
        object's key, or None when its name is not one of this layout's."""
        data_key = key
        for suffix in _SUFFIXES:
            if data_key.endswith(suffix):
                data_key = data_key[: -len(suffix)]
                break
        m = _DATA_NAME.fullmatch(data_key.rsplit("/", 1)[-1])
        if m is None:
            return None
        return uuid.UUID(m.group(2)), int(m.group(3)), data_key

    def check_segment_key(self, key: str, topic: str, partition: int) -> str:
        """Accept a key read from the metadata topic only if it is one this factory would build.

        Keys on the metadata topic are input like any other: a record naming ``../other-tenant/x``
        or another partition's object must never make a reader fetch it.
        """
        legacy = self.partition_prefix(topic, partition)
        name = key[len(legacy) :] if key.startswith(legacy) else ""
        with_id = self._join(validate_topic(topic)) + "-"
        if not name and key.startswith(with_id):
            rest = key[len(with_id) :]
            tid, _, tail = rest.partition("/")
            head = f"{partition}/"
            if _TOPIC_ID.fullmatch(tid) and tail.startswith(head):
                name = tail[len(head) :]
        if name.endswith(INDEX_SUFFIX):
            name = name[: -len(INDEX_SUFFIX)]
        if not _DATA_NAME.fullmatch(name):
            raise InvalidNameError(f"object key {key!r} is not a segment object of {topic}-{partition}")
        return key
