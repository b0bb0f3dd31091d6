"""The single place that builds object keys, from validated parts only.

Layout::

    {prefix}/{topic}/{partition}/{start_offset:020d}-{segment_uuid}-e{writer_epoch}.log
    {prefix}/{topic}/{partition}/{start_offset:020d}-{segment_uuid}-e{writer_epoch}.log-index

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
INDEX_SUFFIX = "-index"


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


def validate_partition(partition: int) -> int:
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
        raise InvalidNameError(f"invalid partition {partition!r}")
    return partition


@dataclass(frozen=True, slots=True)
class SegmentObjectKeys:
    data: str
    index: str


class ObjectKeyFactory:
    def __init__(self, prefix: str) -> None:
        self.prefix = validate_prefix(prefix)

    def _join(self, *parts: str) -> str:
        return "/".join((self.prefix, *parts)) if self.prefix else "/".join(parts)

    def partition_prefix(self, topic: str, partition: int) -> str:
        return self._join(validate_topic(topic), str(validate_partition(partition))) + "/"

    def segment(
        self, topic: str, partition: int, start_offset: int, segment_id: uuid.UUID, writer_epoch: int
    ) -> SegmentObjectKeys:
        if start_offset < 0 or writer_epoch < 0:
            raise InvalidNameError(f"invalid start offset {start_offset} or writer epoch {writer_epoch}")
        name = f"{start_offset:020d}-{segment_id}-e{writer_epoch}.log"
        data = self.partition_prefix(topic, partition) + name
        return SegmentObjectKeys(data, data + INDEX_SUFFIX)

    def check_segment_key(self, key: str, topic: str, partition: int) -> str:
        """Accept a key read from the metadata topic only if it is one this factory would build.

        Keys on the metadata topic are input like any other: a record naming ``../other-tenant/x``
        or another partition's object must never make a reader fetch it.
        """
        head = self.partition_prefix(topic, partition)
        name = key[len(head) :] if key.startswith(head) else ""
        if name.endswith(INDEX_SUFFIX):
            name = name[: -len(INDEX_SUFFIX)]
        if not _DATA_NAME.fullmatch(name):
            raise InvalidNameError(f"object key {key!r} is not a segment object of {topic}-{partition}")
        return key
